"""The lock-set checker on hand-built histories: valid, a lost update named with the ops
that lost it, uncertain adds that may or may not be there, unexpected elements, and no
final read; plus the verdict it gives the lock-set workload."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.lock_set import check_lock_set
from lockcheck.checker.verdict import run_verdict
from lockcheck.history import Op
from tests.checker.histories import H

OPTS = CheckOptions(workload="lock-set")


def add(h: H, p: int, key: str, element: str, read_v: int, new_v: int | None, t0: int,
        result: str | None = "ok") -> H:
    """One read-modify-write: read version `read_v`, then add `element` (-> `new_v`)."""
    h.op(p, "invoke", "read", key, {}, t0)
    h.op(p, "ok", "read", key, {"version": read_v, "size": read_v}, t0 + 1)
    h.op(p, "invoke", "add", key, {"element": element, "read_version": read_v}, t0 + 5)
    if result is not None:
        done: Any = {"element": element, "read_version": read_v}
        if result == "ok":
            done["version"] = new_v
        h.op(p, result, "add", key, done, t0 + 6, error=None if result == "ok" else "timeout")
    return h


def final(h: H, key: str, elements: list[str], t: int, more: dict[str, list[str]] | None = None
          ) -> H:
    """The store's final state, as it records it when it stops."""
    sets = {k: {"version": len(v), "elements": v} for k, v in {key: elements,
                                                                **(more or {})}.items()}
    h.op("resource", "event", "final-state", None, {"sets": sets}, t)
    return h


def ops_of(h: H) -> list[Op]:
    return h.ops()


def test_every_acknowledged_add_present_is_valid() -> None:
    h = H()
    add(h, 0, "k0", "a", 0, 1, 10)
    add(h, 1, "k0", "b", 1, 2, 20)
    final(h, "k0", ["a", "b"], 100)
    r = check_lock_set(ops_of(h), OPTS)
    assert r["valid"] is True and r["acknowledged"] == 2 and r["lost"] == []
    assert r["summary"].startswith("set intact: all 2 acknowledged adds present")


def test_a_lost_update_is_named_with_the_add_that_erased_it() -> None:
    h = H()
    # both read version 0 (their sections overlapped); 1 writes v1, then 2 writes v2
    # from its older read: 1's element is gone
    h.op(1, "invoke", "read", "k0", {}, 10).op(1, "ok", "read", "k0",
                                                {"version": 0, "size": 0}, 11)
    h.op(2, "invoke", "read", "k0", {}, 12).op(2, "ok", "read", "k0",
                                                {"version": 0, "size": 0}, 13)
    h.op(1, "invoke", "add", "k0", {"element": "x1", "read_version": 0}, 20)
    h.op(1, "ok", "add", "k0", {"element": "x1", "version": 1, "read_version": 0}, 21)
    h.op(2, "invoke", "add", "k0", {"element": "x2", "read_version": 0}, 30)
    h.op(2, "ok", "add", "k0", {"element": "x2", "version": 2, "read_version": 0}, 31)
    final(h, "k0", ["x2"], 100)
    ops = ops_of(h)
    r = check_lock_set(ops, OPTS)
    assert r["valid"] is False and r["lost_count"] == 1
    lost = r["lost"][0]
    assert lost["element"] == "x1" and lost["process"] == 1 and lost["version"] == 1
    assert lost["index"] == next(o.index for o in ops if o.f == "add" and o.type == "ok"
                                 and o.process == 1)
    assert lost["erased_by"]["process"] == 2 and lost["erased_by"]["read_version"] == 0
    assert "erased by process 2's add" in r["summary"]
    valid, why = run_verdict("lock-set", {"lock-set": r})
    assert valid is False and why.startswith("lock-set: lost updates: 1 of 2 acknowledged "
                                             "adds lost")


def test_uncertain_adds_may_or_may_not_be_there() -> None:
    h = H()
    add(h, 0, "k0", "a", 0, 1, 10)
    add(h, 1, "k0", "maybe-in", 1, None, 20, result="info")
    add(h, 2, "k0", "maybe-out", 2, None, 30, result="info")
    add(h, 3, "k0", "cut-off", 2, None, 40, result=None)  # the run ended first
    final(h, "k0", ["a", "maybe-in"], 100)
    r = check_lock_set(ops_of(h), OPTS)
    assert r["valid"] is True, r
    assert r["indeterminate"] == 3 and r["indeterminate_present"] == 1


def test_a_failed_add_that_shows_up_is_unexpected() -> None:
    h = H()
    add(h, 0, "k0", "a", 0, 1, 10)
    add(h, 1, "k0", "refused", 1, None, 20, result="fail")
    final(h, "k0", ["a", "refused", "ghost"], 100)
    r = check_lock_set(ops_of(h), OPTS)
    assert r["valid"] is False and r["lost"] == []
    assert {(u["element"], u["why"]) for u in r["unexpected"]} == {
        ("refused", "its add failed"), ("ghost", "never added")}


def test_without_a_final_state_nothing_is_known() -> None:
    h = H()
    add(h, 0, "k0", "a", 0, 1, 10)
    r = check_lock_set(ops_of(h), OPTS)
    assert r["valid"] == "unknown" and r["unread_keys"] == ["k0"]
    assert run_verdict("lock-set", {"lock-set": r})[0] == "unknown"


def test_keys_are_separate_sets_and_the_last_final_state_counts() -> None:
    h = H()
    add(h, 0, "k0", "a", 0, 1, 10)
    add(h, 1, "k1", "b", 0, 1, 20)
    add(h, 2, "k2", "never-written", 0, None, 30, result="info")
    final(h, "k0", [], 50)  # an earlier final state is superseded
    final(h, "k0", ["a"], 100, more={"k1": ["b"]})
    r = check_lock_set(ops_of(h), OPTS)
    assert r["valid"] is True and r["keys"]["k1"] == {"adds": 1, "lost": 0, "final_size": 1}
    assert r["keys"]["k2"]["final_size"] == 0, "a name the store never wrote is empty"


def test_verdict_reports_overlaps_as_the_cause_but_the_set_decides() -> None:
    ls = {"valid": True, "summary": "set intact: all 3 acknowledged adds present"}
    me = {"valid": False, "violation_count": 2, "keys": {"k0": 2}}
    valid, why = run_verdict("lock-set", {"lock-set": ls, "mutual-exclusion": me})
    assert valid is True
    assert why == ("set intact: all 3 acknowledged adds present; "
                   "2 overlapping critical sections on 1 key")
    assert run_verdict("lock-set", {"mutual-exclusion": me})[0] == "unknown"


@pytest.mark.parametrize("n", [1, 5])
def test_serial_adds_never_lose_anything(n: int) -> None:
    h, elements = H(), []
    for i in range(n):
        add(h, i % 3, "k0", f"e{i}", i, i + 1, 10 * i + 10)
        elements.append(f"e{i}")
    final(h, "k0", elements, 1000)
    assert check_lock_set(ops_of(h), OPTS)["valid"] is True


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=12))
def test_against_a_simulated_store(steps: list[tuple[int, bool]]) -> None:
    """Random interleavings of read-modify-writes against a model of the store: the
    checker's lost set is exactly what the store dropped (brute force)."""
    store: list[str] = []
    version = 0
    reads: dict[int, tuple[int, list[str]]] = {}
    h, t, acked = H(), 0, []
    for i, (p, write_now) in enumerate(steps):
        t += 10
        if p not in reads or not write_now:
            h.op(p, "invoke", "read", "k", {}, t)
            reads[p] = (version, list(store))
            h.op(p, "ok", "read", "k", {"version": version, "size": len(store)}, t + 1)
            continue
        rv, seen = reads.pop(p)
        e = f"e{i}"
        h.op(p, "invoke", "add", "k", {"element": e, "read_version": rv}, t)
        version += 1
        store = [*seen, e]
        h.op(p, "ok", "add", "k", {"element": e, "version": version, "read_version": rv},
             t + 1)
        acked.append(e)
    final(h, "k", store, t + 100)
    r = check_lock_set(ops_of(h), OPTS)
    assert {x["element"] for x in r["lost"]} == set(acked) - set(store)
    assert r["valid"] is (set(acked) <= set(store))
    for x in r["lost"]:
        assert x["erased_by"] is not None, "a lost add always has an eraser here"
