"""redis-sentinel findings, real servers: a Sentinel failover grants the lock twice.

Asynchronous replication is why: the old primary keeps granting and renewing locks
that the promoted replica never sees.

* `partition-primary`: the primary is cut off with some clients. The Sentinels on the
  other side promote a replica in about 3 s, and from then on two primaries grant the
  same names. This goes on after the heal too: Sentinel waits about 8 s before it
  demotes the old primary, and the clients on its side keep their connections to it.
  The seed is fixed so that clients land on both sides; the timing is left to chance.
* `failover` (`SENTINEL FAILOVER`, a clean failover on request): the clients stay
  connected to the old primary, which keeps serving for about 10 s until Sentinel
  demotes it and disconnects them. They then reconnect to the new primary, whose copy
  of the lock keys is 10 s old, so locks held right then are granted again.

* `kill-primary` with the default 100 ms restart: the primary is back, empty and still a
  primary, before the Sentinels notice; its replicas resync from it and drop every
  key, so every lock held is granted again.

* `redis-sentinel-min-replicas` under S1's partition: the cut-off primary refuses
  writes (`NOREPLICAS`), but the fence counter still replicates asynchronously, so
  fences repeat after the failover.

The runs happen once per module, at the same time, and several tests look at each;
nothing of any may be left behind afterwards (`run_all`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lockcheck.history import read_history
from tests.integration.test_redlock import nemesis, run_all

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

SENTINEL = ("--backend", "redis-sentinel")
RUNS: dict[str, tuple[str, ...]] = {
    # one fault: cut at 4 s, healed at 8 s; the quiet phase runs to 12 s.
    # Seed 0 puts c1, c2 and c4 with n1 and c0 and c3 on the other side.
    "partition": (*SENTINEL, "--nemesis", "partition-primary", "--nemesis-interval", "4",
                  "--time-limit", "12", "--seed", "0"),
    # one failover at 4.5 s (a second would start after the faults end at 13.5 s); the
    # old primary is demoted about 10 s after it, at about 16 s, inside the run
    "failover": (*SENTINEL, "--nemesis", "failover", "--nemesis-interval", "4.5",
                 "--time-limit", "18"),
}
# a second pair, started when the first is done: the Sentinels' timing (sdown after
# 1 s, failover in about 3 s) must not suffer four clusters at once on a loaded machine
MORE_RUNS: dict[str, tuple[str, ...]] = {
    # kills of the primary at about 4 s and 8 s, each restarted 100 ms later; holds of
    # 0.5-1.5 s outlast the kill and the restart (with the default 50-500 ms the
    # holders of one run all left before the restart, at load average 40)
    "kill_primary": (*SENTINEL, "--nemesis", "kill-primary", "--nemesis-interval", "4",
                     "--time-limit", "12", "--seed", "1", "--hold-ms", "500-1500"),
    # S1's partition with `min-replicas-to-write 1`
    "min_replicas": ("--backend", "redis-sentinel-min-replicas", "--nemesis",
                     "partition-primary", "--nemesis-interval", "4", "--time-limit", "12",
                     "--seed", "0"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    # both at once (each has its own run id and subnet): the suite waits for the longer
    yield from run_all(module_cli, RUNS)


@pytest.fixture(scope="module")
def more_runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    yield from run_all(module_cli, MORE_RUNS)


@pytest.fixture(scope="module")
def partition_run(runs: dict[str, Any]) -> Any:
    return runs["partition"]


@pytest.fixture(scope="module")
def failover_run(runs: dict[str, Any]) -> Any:
    return runs["failover"]


def sentinel_logs(r: Any) -> str:
    return "".join(p.read_text() for p in sorted(r.run_dir.glob("nodes/n*/sentinel.log")))


# -- partition-primary ---------------------------------------------------------------------


def test_a_partitioned_primary_grants_the_lock_twice(partition_run: Any) -> None:
    r = partition_run
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    ls = res["checkers"]["lease-safety"]
    assert ls["valid"] is False and ls["violation_count"] > 0, ls
    assert "mutual exclusion violated" in res["summary"]


def test_the_two_holders_were_on_the_two_sides(partition_run: Any) -> None:
    """Each side had a primary of its own: the overlapping holders talked to different
    primaries, one on each side of the cut."""
    r = partition_run
    (start,) = nemesis(r, "start-partition")
    assert start.value["targets"][0] == "n1", "the Sentinels named n1 the primary"
    side = {h: i for i, hosts in enumerate(start.value["sides"]) for h in hosts}
    recovery = r.test_json()["recovery_worker"]  # runs on c0, after every heal

    def host(w: int) -> str:
        return "c0" if w == recovery else f"c{w}"

    violations = r.results()["checkers"]["mutual-exclusion"]["violations"]
    across = [v for v in violations if {side[host(w)] for w in v["workers"]} == {0, 1}]
    assert across, violations[:3]


def test_the_sentinels_failed_over_and_fences_repeat(partition_run: Any) -> None:
    r = partition_run
    logs = sentinel_logs(r)
    assert "+switch-master lockcheck" in logs
    # the fence counter replicates asynchronously too: the new primary's is behind
    fe = r.results()["checkers"]["fencing"]
    assert fe["duplicate_fence_count"] > 0 or fe["regression_count"] > 0, fe


def test_after_the_partition_the_service_serves_again(partition_run: Any) -> None:
    res = partition_run.results()
    assert res["recovery"]["valid"] is True, res["recovery"]
    assert res.get("heal_errors", []) == [] and "failure" not in res


# -- failover on request -----------------------------------------------------------------


def test_a_requested_failover_grants_the_lock_twice(failover_run: Any) -> None:
    r = failover_run
    assert r.code == 1, r.explain()
    me = r.results()["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me


def test_the_failover_promoted_a_replica_and_demoted_the_old_primary(
        failover_run: Any) -> None:
    r = failover_run
    (done,) = nemesis(r, "failover")
    assert done.value["from"] == "n1" and done.value["to"] in ("n2", "n3"), done.value
    assert done.value["targets"] == ["n1"]
    logs = sentinel_logs(r)
    assert "+convert-to-slave slave 10." in logs  # the old primary, demoted late
    res = r.results()
    assert res["recovery"]["valid"] is True, res["recovery"]


# -- the primary killed and restarted empty ----------------------------------------------


def test_a_primary_restarted_empty_grants_every_held_lock_again(
        more_runs: dict[str, Any]) -> None:
    """S3: the restarted primary comes back empty before any failover; every lock
    held at the kill is free on it (and, after the resync, on its replicas)."""
    r = more_runs["kill_primary"]
    assert r.code == 1, r.explain()
    c = r.results()["checkers"]
    assert c["mutual-exclusion"]["valid"] is False, c["mutual-exclusion"]
    assert c["lease-safety"]["valid"] is False, c["lease-safety"]  # the service's doing
    kills = nemesis(r, "kill")
    assert kills and kills[0].value["targets"] == ["n1"]  # the primary of the moment
    assert all(len(k.value["targets"]) == 1 for k in kills)
    first_kill = min(k.time for k in kills)
    assert all(v["granted"]["ok_ns"] > first_kill for v in c["lease-safety"]["violations"])
    # the fence counter was wiped with the keys: fences repeat
    assert c["fencing"]["duplicate_fence_count"] > 0, c["fencing"]


# -- the variants ------------------------------------------------------------------------


def test_min_replicas_refuses_the_cut_off_primary_but_fences_repeat(
        more_runs: dict[str, Any]) -> None:
    """S5: `min-replicas-to-write 1` makes a primary cut off from its replicas refuse
    grants (a definite `NOREPLICAS`), but what it acknowledged before noticing, the
    fence counter's INCR included, is lost in the failover: fences are granted twice."""
    r = more_runs["min_replicas"]
    assert r.code == 1, r.explain()
    fe = r.results()["checkers"]["fencing"]
    assert fe["duplicate_fence_count"] > 0, fe
    (start,) = nemesis(r, "start-partition")
    (stop,) = nemesis(r, "stop-partition")
    ops = read_history(r.run_dir / "history.jsonl")
    refused = [o for o in ops if o.f == "acquire" and o.type == "fail"
               and (o.error or "").startswith("NOREPLICAS")]
    # from the cut on (until the old primary, back with its replicas, is demoted)
    assert refused and all(o.time > start.time for o in refused)
    assert any(o.time < stop.time for o in refused)
