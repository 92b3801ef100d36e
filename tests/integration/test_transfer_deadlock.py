"""Lock ordering and deadlock, real servers: the transfer workload takes two account
locks per operation. In random order it deadlocks on Redis, and the TTL breaks each
cycle; in one global order (sorted) it never does; one coarse lock never does either.
On `redis-no-ttl` with no wait limit the deadlock lasts until the run stops, and the
locks stay held: the recovery phase says so.

All start at once, each on its own cluster, no fault.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

COMMON = ("--workload", "transfer", "--nemesis", "none", "--time-limit", "6", "--keys", "3",
          "--concurrency", "4", "--hold-ms", "20", "--ttl-ms", "500", "--quiet", "1",
          "--recover-s", "2", "--seed", "1", "--no-report")
RUNS = {
    "random": ("--backend", "redis", *COMMON, "--lock-order", "random"),
    "sorted": ("--backend", "redis", *COMMON, "--lock-order", "sorted"),
    "coarse": ("--backend", "redis", *COMMON, "--lock-scope", "coarse"),
    "no-ttl": ("--backend", "redis-no-ttl", *COMMON, "--lock-order", "random",
               "--wait-ms", "0"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    started = {name: module_cli.start("test", *argv) for name, argv in RUNS.items()}
    done = {name: p.wait(timeout=180) for name, p in started.items()}
    for name, r in done.items():
        assert r.run_dir is not None and r.code in (0, 1), f"{name}: {r.explain()}"
    yield done
    module_cli.assert_no_leftovers(None)


def deadlock(r: Any) -> dict[str, Any]:
    res: dict[str, Any] = r.results()["checkers"]["deadlock"]
    return res


def safe(r: Any) -> None:
    """The lock itself held: liveness failed, never safety."""
    for name in ("mutual-exclusion", "linearizable"):
        assert r.results()["checkers"][name]["valid"] is True, (name, r.explain())


def test_random_order_deadlocks_and_ttls_break_the_cycles(runs: dict[str, Any]) -> None:
    r = runs["random"]
    assert r.code == 1, r.explain()
    d = deadlock(r)
    assert d["valid"] is False and d["cycle_count"] >= 1, d["summary"]
    assert d["broken_by"].get("expiry", 0) >= 1, d["broken_by"]
    assert d["not_completed"] > 0 and d["never_completed"]
    assert r.results()["summary"].startswith("deadlock (liveness)")
    live = r.results()["metrics"]["liveness"]
    assert live["cycles"] == d["cycle_count"] and live["deadlock_s"] > 0
    safe(r)


def test_sorted_order_never_deadlocks_and_does_more(runs: dict[str, Any]) -> None:
    r = runs["sorted"]
    assert r.code == 0, r.explain()
    d = deadlock(r)
    assert d["valid"] is True and d["cycle_count"] == 0, d["summary"]
    rnd = runs["random"].results()["metrics"]["liveness"]
    assert r.results()["metrics"]["liveness"]["throughput_per_s"] > rnd["throughput_per_s"]
    safe(r)


def test_one_coarse_lock_never_deadlocks(runs: dict[str, Any]) -> None:
    r = runs["coarse"]
    assert r.code == 0, r.explain()
    assert deadlock(r)["cycle_count"] == 0 and deadlock(r)["completed"] > 20


def test_without_ttls_the_deadlock_lasts_and_recovery_fails(runs: dict[str, Any]) -> None:
    r = runs["no-ttl"]
    assert r.code == 1, r.explain()
    d = deadlock(r)
    assert d["cycle_count"] >= 1 and set(d["broken_by"]) <= {"run-end", "never"}, d
    assert d["outcomes"].get("stuck", 0) >= 2, d["outcomes"]
    rec = r.results()["recovery"]
    assert rec["valid"] is False and "NOT RECOVERED" in rec["summary"], rec
