"""Consul findings, real 3-server Consul clusters, through the `lockcheck` command.

Consul grants no session TTL under 10 s, so every run here is at 10 s (the backend's
minimum, its default), and the runs start together (each has its own run id and
subnet): the module costs about as long as its longest runs, the 42 s client pause
and the one whose recovery phase waits out a lock that is never freed (30 s, 3x TTL):
about 75 s.

* `consul` + `partition`: the side without a quorum grants nothing, and every lock
  serves again after the heal;
* `consul-lockindex-fence` with no fault: LockIndex fences go back to 1 once a release
  deletes the key, and the fenced resource refuses current holders;
* `--ttl-ms 1000` on `consul` is refused in one line, and a run without `--ttl-ms`
  records 10000;
* `consul` + `client-pause` past 2x TTL + lock-delay, `fenced`: the woken holder
  overlaps the next one, and the resource refuses its write (ModifyIndex fences);
* `consul-no-ttl` + `partition-holder`: a holder cut off until its renewal and
  release fail leaves its lock held by a session that never expires; nobody takes it
  again. The same fault on `consul` (a 10 s session) frees the lock.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from lockcheck.errors import BadInput
from lockcheck.history import Op, pair_ops, read_history
from tests.integration.test_redlock import run_all

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

# a holder cut off as it enters a 6 s section, for 9 s: its renewal (due every TTL/3 =
# 3.3 s) or, after the section, its release waits out its op timeout (TTL/4 = 2.5 s)
# inside the cut and fails, even when the cut comes seconds late (a loaded machine
# sets it up slowly). One fault, and the first comes seconds after the workers start:
# hence 18 s.
HOLDER_CUT = ("--nemesis", "partition-holder", "--hold-ms", "6000", "--time-limit", "18",
              "--nemesis-interval", "2", "--nemesis-duration", "9", "--quiet", "1")
RUNS: dict[str, tuple[str, ...]] = {
    "partition": ("--backend", "consul", "--nemesis", "partition", "--time-limit", "12",
                  "--nemesis-interval", "2", "--quiet", "2"),
    "lock_index": ("--backend", "consul-lockindex-fence", "--workload", "fenced",
                   "--nemesis", "none", "--time-limit", "6", "--quiet", "1"),
    "no_ttl_cut": ("--backend", "consul-no-ttl", *HOLDER_CUT),
    "ttl_cut": ("--backend", "consul", *HOLDER_CUT),
    # a holder stopped for 33 s: Consul keeps its unrenewed session 2x TTL, then the
    # lock-delay (TTL) passes, and a rival is granted 30 s after the paused grant; the
    # pause ends before the quiet phase (at 40 s) even when the workers start late.
    # Sections of 1-2 s: with the default 50-500 ms a loaded machine's SIGSTOP came
    # after the holder's write once (CI-like run, 3 test processes), and the woken
    # holder had nothing left to write
    "pause_fenced": ("--backend", "consul", "--workload", "fenced", "--nemesis",
                     "client-pause", "--pause-ms", "33000", "--time-limit", "42",
                     "--quiet", "2", "--hold-ms", "1000-2000"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    from lockcheck.db.consul import consul_binary

    try:
        consul_binary()
    except BadInput as e:
        pytest.skip(str(e))
    yield from run_all(module_cli, RUNS)


def ops_of(r: Any) -> list[Op]:
    return read_history(r.run_dir / "history.jsonl")


def test_partition_minority_cannot_grant(module_cli: Any, runs: dict[str, Any]) -> None:
    r = runs["partition"]
    assert r.code == 0, r.explain()
    res = r.results()
    c = res["checkers"]
    assert c["mutual-exclusion"]["valid"] is True, c["mutual-exclusion"]
    assert c["lease-safety"]["valid"] is True, c["lease-safety"]["violations"][:3]
    assert c["mutual-exclusion"]["sections"] > 5
    ops = ops_of(r)
    starts = [o for o in ops if o.f == "start-partition" and o.type == "info"]
    stops = [o for o in ops if o.f == "stop-partition" and o.type == "info"]
    assert starts and res["stats"]["faults"] == len(starts)
    windows = list(zip([o.time for o in starts], [o.time for o in stops], strict=False))
    # a client on the side without a quorum gets no grant, not even a "busy": its
    # acquire, in flight while a partition was in place, is refused or unanswered
    cut = [p for p in pair_ops(ops) if p.invoke.f == "acquire" and p.complete is not None
           and any(p.invoke.time <= b and p.complete.time >= a for a, b in windows)
           and (p.complete.type == "info" or
                (p.complete.type == "fail" and p.complete.error != "busy"))]
    assert cut, "no acquire was refused for want of a quorum during the partitions"
    assert res["recovery"]["valid"] is True, res["recovery"]
    module_cli.assert_no_leftovers(r.test_json()["run_id"])
    assert "10.77." not in subprocess.run(["iptables-save"], capture_output=True,
                                          text=True).stdout


def test_lock_index_fences_go_back_to_one_with_no_fault(module_cli: Any,
                                                        runs: dict[str, Any]) -> None:
    r = runs["lock_index"]
    assert r.code == 1, r.explain()
    res = r.results()
    fe = res["checkers"]["fencing"]
    assert fe["regression_count"] > 0, fe
    # the resource refused current holders whose fence was below one it accepted
    assert fe["saves_regressed_fence"] > 0 and fe["stale_accepted_count"] == 0, fe
    assert res["checkers"]["mutual-exclusion"]["valid"] is True  # the lock itself held
    assert res["stats"]["faults"] == 0
    fences = [o.value.get("fence") for o in ops_of(r) if o.f == "acquire" and o.type == "ok"]
    assert fences.count(1) > 3, fences[:40]  # each key's count starts again at 1
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_without_ttl_ms_a_run_is_at_consuls_minimum(runs: dict[str, Any]) -> None:
    t = runs["lock_index"].test_json()
    assert t["ttl_ms"] == 10_000  # no --ttl-ms given
    from lockcheck.db.consul import consul_version

    assert t["versions"]["consul"] == consul_version() == "1.8.7"


def test_a_ttl_below_consuls_minimum_is_refused_in_one_line(module_cli: Any) -> None:
    r = module_cli("test", "--backend", "consul", "--ttl-ms", "1000", timeout=60)
    assert r.code == 254, r.explain()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("lockcheck: --ttl-ms 1000 is too short for backend consul")
    assert "10000" in lines[0], lines[0]
    assert r.run_dir is None


def holder_cut(r: Any) -> tuple[dict[str, Any], Op]:
    """The holder the partition cut off, and its renewal or release that failed."""
    ops = ops_of(r)
    starts = [o for o in ops if o.f == "start-partition" and o.type == "info"]
    aimed = [o.value["holder"] for o in starts if "holder" in o.value]
    assert aimed, [o.value for o in starts]
    h = aimed[0]
    # its renewal, or its release after the section, went unanswered inside the cut
    cut = [p.complete for p in pair_ops(ops) if p.invoke.f in ("renew", "release")
           and p.invoke.process == h["process"] and p.invoke.key == h["key"]
           and p.complete is not None and p.complete.type in ("fail", "info")
           and p.complete.time > starts[0].time]
    assert cut, f"the holder of {h['key']} was not cut off before it released"
    return h, cut[0]


def test_a_cut_off_holder_leaves_a_session_without_ttl_holding_for_ever(
        runs: dict[str, Any]) -> None:
    r = runs["no_ttl_cut"]
    res = r.results()
    h, _ = holder_cut(r)
    rec = res["recovery"]
    assert rec["valid"] is False, rec
    assert rec["keys"][h["key"]]["acquired_after_s"] is None, rec
    assert any(e.startswith("recovery: NOT RECOVERED") for e in res["errors"])
    # safe all along: it is the lock's liveness that is lost, reported beside the
    # safety verdict (exit 0)
    assert res["checkers"]["mutual-exclusion"]["valid"] is True
    assert r.code == 0, r.explain()


def test_with_a_ttl_the_cut_off_holders_lock_is_freed(runs: dict[str, Any]) -> None:
    r = runs["ttl_cut"]
    assert r.code == 0, r.explain()
    res = r.results()
    h, _ = holder_cut(r)
    rec = res["recovery"]
    assert rec["valid"] is True, rec
    assert rec["keys"][h["key"]]["acquired_after_s"] is not None
    assert res["checkers"]["mutual-exclusion"]["valid"] is True
    assert res["checkers"]["lease-safety"]["valid"] is True


def test_a_holder_paused_past_its_session_overlaps_and_the_fence_stops_its_write(
        module_cli: Any, runs: dict[str, Any]) -> None:
    r = runs["pause_fenced"]
    assert r.code == 1, r.explain()
    res = r.results()
    assert res["summary"].startswith("the lock failed, the resource held"), res["summary"]
    c = res["checkers"]
    paused = [o.value for o in ops_of(r) if o.f == "pause-client" and o.type == "info"
              and "skipped" not in o.value]
    assert paused, "no holder was paused"
    me = c["mutual-exclusion"]
    assert me["valid"] is False, me
    assert any(paused[0]["process"] in v["processes"] for v in me["violations"]), \
        me["violations"][:3]
    # the rival was granted after the paused lease had provably run out
    assert c["lease-safety"]["valid"] is True, c["lease-safety"]["violations"][:3]
    fe = c["fencing"]
    assert fe["resource_valid"] is True and fe["stale_accepted_count"] == 0, fe
    assert fe["saves_stale_holder"] > 0, fe  # the woken holder's write was refused
    assert fe["regression_count"] == 0 and fe["duplicate_fence_count"] == 0, fe
    module_cli.assert_no_leftovers(r.test_json()["run_id"])
