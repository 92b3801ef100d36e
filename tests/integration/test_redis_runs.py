"""Real runs against redis-server in network namespaces, through the `lockcheck` command.

Each run happens once per module (they take 5-22 s each, in two waves) and several tests
look at it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lockcheck.history import pair_ops, read_history, read_history_full

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


RUNS: dict[str, tuple[str, ...]] = {
    "none_run": ("--nemesis", "none", "--time-limit", "4"),
    "kill_run": ("--backend", "redis", "--nemesis", "kill", "--time-limit", "20"),
    "fenced_run": ("--workload", "fenced", "--nemesis", "kill", "--time-limit", "20"),
    "unfenced_run": ("--workload", "fenced", "--resource", "unfenced", "--nemesis", "kill",
                     "--time-limit", "20"),
    "partition_run": ("--nemesis", "partition", "--time-limit", "10",
                      "--nemesis-interval", "1.5"),
}
# together, each with its own run id and subnet: one Redis node and a few clients each
WAVES = (("kill_run", "fenced_run", "unfenced_run"), ("none_run", "partition_run"))


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> dict[str, Any]:
    done: dict[str, Any] = module_cli.in_waves(WAVES, RUNS.__getitem__, 120)
    for r in done.values():
        assert r.run_dir is not None, r.explain()
        assert r.code in (0, 1, 2), r.explain()
    return done


@pytest.fixture(scope="module")
def none_run(runs: dict[str, Any]) -> Any:
    return runs["none_run"]


@pytest.fixture(scope="module")
def kill_run(runs: dict[str, Any]) -> Any:
    return runs["kill_run"]


@pytest.fixture(scope="module")
def fenced_run(runs: dict[str, Any]) -> Any:
    return runs["fenced_run"]


@pytest.fixture(scope="module")
def unfenced_run(runs: dict[str, Any]) -> Any:
    return runs["unfenced_run"]


@pytest.fixture(scope="module")
def partition_run(runs: dict[str, Any]) -> Any:
    return runs["partition_run"]


def run_id(r: Any) -> str:
    rid: str = r.test_json()["run_id"]
    return rid


def check(module_cli: Any, *args: Any) -> Any:
    return module_cli("check", *args, timeout=120)


# -- verdicts ----------------------------------------------------------------------------


def test_no_faults_is_valid(module_cli: Any, none_run: Any) -> None:
    assert none_run.code == 0, none_run.explain()
    res = none_run.results()
    assert res["valid"] is True
    me = res["checkers"]["mutual-exclusion"]
    assert me["violation_count"] == 0 and me["sections"] > 5
    assert res["interrupted"] is False and res["errors"] == []
    assert "valid: " in none_run.stderr
    rid = run_id(none_run)
    # the watcher saw the registry while the run was up: redis and the 5 workers
    assert len(none_run.traces[rid].pids) >= 6
    module_cli.assert_no_leftovers(rid)


def test_kill_finds_mutual_exclusion_violation(module_cli: Any, kill_run: Any) -> None:
    assert kill_run.code == 1, kill_run.explain()
    res = kill_run.results()
    assert res["valid"] is False
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0
    v = me["violations"][0]
    assert v["key"].startswith("k")
    assert len(v["processes"]) == 2 and v["processes"][0] != v["processes"][1]
    assert v["start"] < v["end"]
    assert "mutual exclusion violated" in res["summary"]
    assert res["stats"]["faults"] >= 2
    assert "INVALID" in kill_run.stderr
    module_cli.assert_no_leftovers(run_id(kill_run))


def test_fenced_resource_saves_the_day(module_cli: Any, fenced_run: Any) -> None:
    res = fenced_run.results()
    # a failed lock checker makes the run invalid even where the resource held
    lock_failed = any(c.get("valid") is False for n, c in res["checkers"].items()
                      if n in ("mutual-exclusion", "lease-safety", "linearizable"))
    assert fenced_run.code == (1 if lock_failed else 0), fenced_run.explain()
    fe = res["checkers"]["fencing"]
    assert fe["resource_valid"] is True
    assert fe["stale_accepted_count"] == 0 and fe["interleaved_count"] == 0
    # the kill reset redis's fence counter: tokens went backwards, the resource refused
    assert fe["saves"] > 0 or fe["regression_count"] > 0, fe
    assert fe["accepted"] > 0
    assert res["summary"].startswith("the lock failed, the resource held" if lock_failed
                                     else "resource safe")
    module_cli.assert_no_leftovers(run_id(fenced_run))


def test_unfenced_resource_is_corrupted(module_cli: Any, unfenced_run: Any) -> None:
    assert unfenced_run.code == 1, unfenced_run.explain()
    res = unfenced_run.results()
    fe = res["checkers"]["fencing"]
    assert fe["resource_valid"] is False
    bad = fe["stale_accepted_count"] + fe["interleaved_count"]
    assert bad > 0, fe
    examples = fe["stale_accepted"] + fe["interleaved_writes"]
    assert examples, "the report must show the accepted bad writes"
    assert fe["unfenced_rejections"] == 0 and fe["rejected"] == 0  # unfenced accepts all
    assert "resource corrupted" in res["summary"], res["summary"]
    # the resource's own log agrees: a write accepted with a fence below the max
    recs = [json.loads(x) for x in
            (unfenced_run.run_dir / "resource.jsonl").read_text().splitlines()]
    assert all(r["accepted"] for r in recs)
    assert any(r["max_fence"] is not None and r["fence"] <= r["max_fence"] for r in recs)
    module_cli.assert_no_leftovers(run_id(unfenced_run))


def test_partition_run_heals_and_records_the_faults(module_cli: Any,
                                                    partition_run: Any) -> None:
    r = partition_run
    assert r.code in (0, 1), r.explain()
    ops = read_history(r.run_dir / "history.jsonl")
    nem = [o for o in ops if o.process == "nemesis"]
    starts = [o for o in nem if o.f == "start-partition" and o.type == "info"]
    stops = [o for o in nem if o.f == "stop-partition" and o.type == "info"]
    assert starts, "no partition was started"
    assert len(starts) == len(stops), "every partition must be healed"
    for o in starts:
        sides = o.value["sides"]
        assert len(sides) == 2 and o.value["kind"] in ("halves", "isolate")
        assert sorted(sides[0] + sides[1]) == sorted(["n1", "c0", "c1", "c2", "c3", "c4"])
    for p in pair_ops(nem):
        assert p.complete is not None and p.complete.type == "info"
    # the last fault ended before the quiet phase; ops went on after it
    assert ops[-1].time > stops[-1].time
    assert r.results()["stats"]["faults"] == len(starts)
    # the rules lived in the namespaces, and those are gone; none leaked onto the host
    module_cli.assert_no_leftovers(run_id(r))
    host_rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert "10.77." not in host_rules


# -- `lockcheck check` reproduces the run's verdict --------------------------------------


@pytest.mark.parametrize("which", ["none_run", "kill_run", "fenced_run", "unfenced_run"])
def test_check_reproduces_the_verdict(module_cli: Any, request: pytest.FixtureRequest,
                                      which: str) -> None:
    r = request.getfixturevalue(which)
    res = r.results()
    c = check(module_cli, r.run_dir)
    assert c.code == r.code, c.explain()
    word = {True: "valid", False: "INVALID"}[res["valid"]]
    assert c.stdout.startswith(f"{r.run_dir}: {word} ")
    j = check(module_cli, "--json", r.run_dir)
    assert j.code == r.code
    d = json.loads(j.stdout)
    assert d["valid"] == res["valid"]
    assert d["ops"] == res["ops"]
    for name, cr in res["checkers"].items():
        assert d["checkers"][name]["valid"] == cr["valid"], name
    me, me2 = res["checkers"]["mutual-exclusion"], d["checkers"]["mutual-exclusion"]
    assert me2["violation_count"] == me["violation_count"]
    # the history file alone (no test.json beside it) gives the same mutex verdict
    if res["workload"] == "mutex":
        h = check(module_cli, r.run_dir / "history.jsonl")
        assert h.code == r.code


def test_check_through_the_latest_link(module_cli: Any, kill_run: Any) -> None:
    latest = kill_run.run_dir.parent / "latest"
    c = check(module_cli, latest)
    assert c.code == kill_run.code


# -- the results directory ---------------------------------------------------------------


def test_results_layout(none_run: Any) -> None:
    d: Path = none_run.run_dir
    results_root = none_run.results_dir
    # <backend>/<workload>/<nemesis>/<time> (results/latest: test_default_results_dir)
    assert d.parents[3] == results_root
    assert d.relative_to(results_root).parts[:3] == ("redis", "mutex", "none")
    for f in ("test.json", "history.jsonl", "results.json", "lockcheck.log",
              "nodes/n1/redis.log"):
        assert (d / f).is_file(), f
        assert (d / f).stat().st_size > 0, f
    assert sorted(p.name for p in (d / "workers").iterdir()) == [
        *(f"c{i}.log" for i in range(5)), "recovery.log"]
    latest = d.parent / "latest"
    assert latest.is_symlink() and os.readlink(latest) == d.name
    assert latest.resolve() == d.resolve()
    assert not list(d.rglob("*.tmp"))


def test_test_json_records_options_and_versions(none_run: Any) -> None:
    t = none_run.test_json()
    assert t["backend"] == "redis" and t["workload"] == "mutex" and t["nemesis"] == []
    assert t["time_limit"] == 4.0 and isinstance(t["seed"], int)
    v = t["versions"]
    assert set(v) >= {"lockcheck", "python", "kernel", "redis-server", "redis-py"}
    assert all(isinstance(x, str) and x for x in v.values())
    assert v["redis-server"][0].isdigit()
    assert len(t["run_id"]) == 6 and t["started"]


def test_history_is_readable_and_complete(none_run: Any) -> None:
    read = read_history_full(none_run.run_dir / "history.jsonl")
    ops = read.ops
    assert read.truncated_line is None
    assert [o.index for o in ops] == list(range(len(ops)))
    assert len(ops) == none_run.results()["ops"]
    assert {o.type for o in ops} >= {"invoke", "ok", "event"}
    assert {o.f for o in ops} >= {"acquire", "release", "renew", "enter", "exit"}
    pairs = list(pair_ops(ops))
    assert all(p.complete is not None for p in pairs), "a clean stop completes every op"
    # each process's records are in time order; every record names its worker (the
    # five clients, and the recovery worker, index 5, at the end)
    last: dict[Any, int] = {}
    for o in ops:
        assert o.worker in range(6)
        assert o.time >= last.get(o.process, 0)
        last[o.process] = o.time
    recovery = [o for o in ops if o.worker == 5]
    assert recovery and min(o.time for o in recovery) > max(o.time for o in ops
                                                            if o.worker != 5)
    assert {o.key for o in recovery if o.f == "acquire" and o.type == "ok"} == {"k0", "k1", "k2"}
    assert none_run.results()["recovery"]["valid"] is True


def test_redis_log_and_controller_log(none_run: Any) -> None:
    d = none_run.run_dir
    assert "Ready to accept connections" in (d / "nodes/n1/redis.log").read_text()
    assert "cluster " in (d / "lockcheck.log").read_text()
