"""The deadlock checker on hand-built histories, and the wait-for cycles against a
brute-force oracle."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.deadlock import check_deadlock
from lockcheck.checker.verdict import run_verdict, transfer_verdict
from lockcheck.checker.waits_for import deadlocked
from lockcheck.history import Op
from tests.checker.histories import H

MS = 1_000_000


def begin(h: H, p: int, op: int, keys: list[str], t: int) -> H:
    return h.op(p, "event", "begin", keys[0], {"op": op, "keys": keys}, t)


def end(h: H, p: int, op: int, keys: list[str], t: int, outcome: str = "completed") -> H:
    return h.op(p, "event", "end", keys[0], {"op": op, "keys": keys, "outcome": outcome}, t)


def wait(h: H, p: int, op: int, key: str, t: int, holds: list[str]) -> H:
    return h.op(p, "event", "wait", key, {"op": op, "holds": holds, "limit_ms": 3000}, t)


def waited(h: H, p: int, op: int, key: str, t: int, outcome: str = "granted") -> H:
    return h.op(p, "event", "waited", key, {"op": op, "outcome": outcome}, t)


def take(h: H, p: int, op: int, key: str, fence: int, t: int, holds: list[str]) -> H:
    wait(h, p, op, key, t, holds)
    h.acquire(p, key, fence, t + 1, t + 2)
    return waited(h, p, op, key, t + 3)


def crossed(h: H, t: int, *, a: str = "x", b: str = "y") -> H:
    """Process 0 holds a and waits for b; process 1 holds b and waits for a (at t)."""
    begin(h, 0, 0, [a, b], t)
    begin(h, 1, 0, [b, a], t)
    take(h, 0, 0, a, 1, t + 10, [])
    take(h, 1, 0, b, 1, t + 20, [])
    wait(h, 0, 0, b, t + 30, [a])
    h.acquire(0, b, None, t + 31, t + 32, result="fail", error="busy")
    wait(h, 1, 0, a, t + 40, [b])  # the cycle closes here
    h.acquire(1, a, None, t + 41, t + 42, result="fail", error="busy")
    return h


def check(ops: list[Op]) -> dict:  # type: ignore[type-arg]
    return check_deadlock(ops, CheckOptions(workload="transfer"))


def test_a_history_without_transfers_abstains() -> None:
    r = check(H().acquire(0, "k", 1, 0, 10).ops())
    assert r["valid"] == "unknown" and "nothing_checked" in r


def test_two_crossed_waits_broken_by_an_expiry() -> None:
    h = crossed(H(), 0)
    # 1 s later x's TTL ran out: process 1 is granted x, which 0 never released
    h.acquire(1, "x", 2, 1000 * MS, 1000 * MS + 5)
    waited(h, 1, 0, "x", 1000 * MS + 6)
    waited(h, 0, 0, "y", 1000 * MS + 50, "wait-limit")
    h.release(0, "x", 1, 1000 * MS + 60, 1000 * MS + 70, result="fail", error="not-owner")
    end(h, 0, 0, ["x", "y"], 1000 * MS + 80, "wait-limit")
    end(h, 1, 0, ["y", "x"], 1000 * MS + 90, "lease-expired")
    r = check(h.ops())
    assert r["valid"] is False
    [c] = r["cycles"]
    assert c["workers"] == [0, 1] and c["keys"] == ["x", "y"]
    assert c["broken_by"] == "expiry" and abs(c["duration_s"] - 1.0) < 0.001
    assert r["broken_by"] == {"expiry": 1} and r["not_completed"] == 2
    assert {o["outcome"] for o in r["never_completed"]} == {"wait-limit", "lease-expired"}
    assert "1 deadlock cycle(s)" in r["summary"]


def test_a_wait_limit_breaks_it() -> None:
    h = crossed(H(), 0)
    waited(h, 0, 0, "y", 500 * MS, "wait-limit")
    h.release(0, "x", 1, 500 * MS + 1, 500 * MS + 2)
    r = check(h.ops())
    assert [c["broken_by"] for c in r["cycles"]] == ["wait-limit"]
    assert r["cycles"][0]["duration_s"] == 0.5


def test_a_cycle_the_history_ends_in_is_never_broken() -> None:
    h = crossed(H(), 0)
    h.op(0, "event", "wait", "zz", {"op": 9}, 2000 * MS)  # the history goes on
    r = check(h.ops())
    assert r["never_broken"] == 1 and r["cycles"][0]["broken_by"] is None
    assert r["outcomes"] == {"no end recorded": 2}
    assert "never broken" in r["summary"]


def test_a_cycle_of_three() -> None:
    h = H()
    for p, (a, b) in enumerate([("x", "y"), ("y", "z"), ("z", "x")]):
        begin(h, p, 0, [a, b], p)
        take(h, p, 0, a, 1, 10 + 10 * p, [])
    for p, (a, b) in enumerate([("x", "y"), ("y", "z"), ("z", "x")]):
        wait(h, p, 0, b, 100 + p, [a])
    waited(h, 2, 0, "x", 300, "stopped")
    r = check(h.ops())
    [c] = r["cycles"]
    assert c["workers"] == [0, 1, 2] and c["broken_by"] == "run-end"
    assert r["stuck_worker_s"] == round(3 * (300 - 102) / 1e9, 3)


def test_waits_in_one_order_never_form_a_cycle() -> None:
    h = H()
    begin(h, 0, 0, ["x", "y"], 0)
    begin(h, 1, 0, ["x", "y"], 1)
    take(h, 0, 0, "x", 1, 10, [])
    wait(h, 1, 0, "x", 20, [])  # waits for x holding nothing
    take(h, 0, 0, "y", 1, 30, ["x"])
    h.release(0, "y", 1, 40, 41).release(0, "x", 1, 42, 43)
    end(h, 0, 0, ["x", "y"], 44)
    h.acquire(1, "x", 2, 50, 51)
    waited(h, 1, 0, "x", 52)
    take(h, 1, 0, "y", 2, 60, ["x"])
    h.release(1, "y", 2, 70, 71).release(1, "x", 2, 72, 73)
    end(h, 1, 0, ["x", "y"], 74)
    r = check(h.ops())
    assert r["valid"] is True and r["completed"] == 2 and r["cycle_count"] == 0
    assert r["summary"].startswith("no deadlock: 2 of 2 operations completed")


def test_retired_process_ids_are_the_same_worker() -> None:
    h = H(concurrency=2)  # process 2 is worker 0 after an info
    crossed(h, 0)
    h.acquire(2, "y", None, 100, 101, result="fail", error="busy")
    r = check(h.ops())
    assert r["cycle_count"] == 1 and r["cycles"][0]["workers"] == [0, 1]


def test_the_verdict_keeps_liveness_and_safety_apart() -> None:
    mutex = {"valid": True, "sections": 4, "violations": []}
    dl = {"valid": False, "summary": "1 deadlock cycle(s), 1 s in deadlock"}
    valid, text = transfer_verdict({"mutual-exclusion": mutex, "deadlock": dl})
    assert valid is False and text.startswith("deadlock (liveness): 1 deadlock cycle")
    assert "safety: mutual exclusion held" in text
    valid, text = run_verdict("transfer", {"mutual-exclusion": mutex,
                                           "deadlock": {"valid": True,
                                                        "summary": "no deadlock: 5 of 5"}})
    assert valid is True and text.endswith("no deadlock: 5 of 5")


# -- the cycles against a brute-force oracle ------------------------------------------

def oracle(nodes: range, edges: set[tuple[int, int]]) -> set[frozenset[int]]:
    """Transitive closure: u and v are deadlocked together when each reaches the
    other; a node alone only when it reaches itself."""
    reach = {(u, v) for u, v in edges}
    for k, i, j in itertools.product(nodes, nodes, nodes):
        if (i, k) in reach and (k, j) in reach:
            reach.add((i, j))
    groups = set()
    for u in nodes:
        if (u, u) in reach:
            groups.add(frozenset(v for v in nodes if (u, v) in reach and (v, u) in reach))
    return groups


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                        max_size=n * 2))))
def test_deadlocked_sets_are_the_mutually_reachable_ones(case: tuple) -> None:  # type: ignore[type-arg]
    n, edges = case
    graph: dict[int, list[int]] = {u: [] for u in range(n)}
    for u, v in edges:
        graph[u].append(v)
    assert set(deadlocked(graph)) == oracle(range(n), edges)
