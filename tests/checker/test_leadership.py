"""The leadership checker: two leaders acting at once, a deposed leader acting, a term
that went backwards (checker/leadership.py), on hand-built histories."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.leadership import check_leadership, leadership_summary
from lockcheck.history import Op
from tests.checker.histories import H

MS = 1_000_000
TTL = 1000


def act(h: H, p: int, term: int | None, t0: int, t1: int | None, *, accepted: bool | None = True,
        max_term: int | None = None, seq: int | None = None, key: str = "e") -> H:
    h.op(p, "invoke", "act", key, {"term": term, "n": 1}, t0)
    if t1 is None:
        return h
    if accepted is None:
        return h.op(p, "info", "act", key, {"term": term, "n": 1}, t1, error="timeout")
    v = {"term": term, "n": 1, "accepted": accepted, "seq": seq, "max_term": max_term}
    if accepted:
        return h.op(p, "ok", "act", key, v, t1)
    return h.op(p, "fail", "act", key, v, t1, error="stale-term")


def lead(h: H, p: int, term: int, start: int, end: int | None, key: str = "e") -> H:
    """A won campaign at `start` (ms), the term entered 1 ms later, left at `end`."""
    h.acquire(p, key, term, start * MS, start * MS + MS // 2, ttl_ms=TTL)
    h.enter(p, key, term, start * MS + MS)
    if end is not None:
        h.exit(p, key, term, end * MS)
        h.release(p, key, term, end * MS + 1, end * MS + MS // 2)
    return h


def check(ops: list[Op], **kw: Any) -> dict[str, Any]:
    return check_leadership(ops, CheckOptions(workload="leader", ttl_ms=TTL, **kw))


def one_after_another() -> H:
    h = lead(H(), 0, 1, 0, 500)
    act(h, 0, 1, 100 * MS, 101 * MS, seq=1)
    act(h, 0, 1, 400 * MS, 401 * MS, seq=2, max_term=1)
    lead(h, 1, 2, 600, 900)
    act(h, 1, 2, 700 * MS, 701 * MS, seq=3, max_term=1)
    return h


def test_leaders_one_after_another_are_valid() -> None:
    r = check(one_after_another().ops())
    assert r["valid"] is True, r
    assert r["leadership_changes"] == 1 and r["actions"] == 3
    assert r["leaderless_ms"] == 101.0  # from 500 ms to the next enter at 601 ms


def test_no_action_abstains() -> None:
    r = check(lead(H(), 0, 1, 0, 500).ops())
    assert r["valid"] == "unknown" and r["nothing_checked"]


def paused_leader(accepted: bool) -> H:
    """Leader 0 (term 1) renews at 100 ms and is paused; its lease is over by ~1110 ms;
    leader 1 (term 2) is elected at 1200 ms and acts; leader 0 wakes at 2200 ms and acts
    once more with term 1."""
    h = lead(H(), 0, 1, 0, None)
    h.renew(0, "e", 1, 100 * MS, 101 * MS, ttl_ms=TTL)
    act(h, 0, 1, 50 * MS, 51 * MS, seq=1)
    lead(h, 1, 2, 1200, 3000)
    act(h, 1, 2, 1300 * MS, 1301 * MS, seq=2, max_term=1)
    act(h, 0, 1, 2200 * MS, 2201 * MS, accepted=accepted, seq=3, max_term=2)
    h.exit(0, "e", 1, 2202 * MS, reason="lease-expired")
    return h


def test_a_deposed_leaders_accepted_action_is_caught() -> None:
    r = check(paused_leader(accepted=True).ops())
    assert r["valid"] is False
    assert r["deposed_accepted_count"] == 1 and r["deposed_count"] == 1
    d = r["deposed"][0]
    assert d["process"] == 0 and d["term"] == 1 and d["successor"]["term"] == 2
    # the same action also makes two leaders act in one interval, and a term go back
    assert r["split_brain_count"] == 1 and r["backwards_accepted_count"] == 1
    assert r["stale_accepted"] == 1 and r["stale_refused"] == 0
    # no leader from the paused one's lease end (101 ms + 1 s / 0.99) to the next enter
    assert abs(r["leaderless_ms"] - (1201 - 101 - 1000 / 0.99)) < 0.01


def test_a_deposed_leaders_refused_action_is_a_save() -> None:
    r = check(paused_leader(accepted=False).ops())
    assert r["valid"] is True, r
    assert r["deposed_count"] == 1 and r["deposed_refused_count"] == 1
    assert r["split_brain_count"] == 0 and r["backwards_accepted_count"] == 0
    assert r["stale_refused"] == 1


def test_an_action_within_the_lease_is_not_deposed() -> None:
    # leader 1 was granted while leader 0's lease was still valid (a broken lock): both
    # act at once; that is split brain, not a deposed leader
    h = lead(H(), 0, 1, 0, 900)
    lead(h, 1, 2, 200, 900)
    act(h, 1, 2, 300 * MS, 310 * MS, seq=1)
    act(h, 0, 1, 305 * MS, 320 * MS, seq=2, max_term=2)
    r = check(h.ops())
    assert r["deposed_count"] == 0
    assert r["split_brain_count"] == 1 and r["valid"] is False


def test_an_unknown_deposed_action_is_counted_apart() -> None:
    h = paused_leader(accepted=True)
    ops = [o for o in h.ops() if not (o.f == "act" and o.time == 2201 * MS)]
    r = check(ops)
    assert r["deposed_unknown_count"] == 1 and r["deposed_accepted_count"] == 0
    assert r["split_brain_count"] == 1  # it may have taken effect


def test_a_leader_elected_with_a_lower_term_is_a_regression() -> None:
    h = lead(H(), 0, 5, 0, 500)
    act(h, 0, 5, 100 * MS, 101 * MS, seq=1)
    lead(h, 1, 3, 600, 900)
    act(h, 1, 3, 700 * MS, 701 * MS, accepted=False, seq=2, max_term=5)
    r = check(h.ops())
    assert r["valid"] is False and r["term_regression_count"] == 1
    assert r["term_regressions"][0]["previous"]["term"] == 5
    assert r["backwards_accepted_count"] == 0 and r["stale_refused"] == 1


def test_summary_counts_leaders_per_election() -> None:
    h = one_after_another()
    lead(h, 2, 1, 0, 100, key="other")
    act(h, 2, 1, 50 * MS, 51 * MS, key="other")
    lead(h, 3, 2, 2000, 2100)  # the recovery phase: a leader that never acted
    s = leadership_summary(h.ops())
    assert s["leaders"] == 3 and s["leadership_changes"] == 1
    assert s["leaderless_ms"] == 101.0  # only between the first action and the last


# -- against a brute-force oracle -------------------------------------------------------


def _oracle_split(acts: list[tuple[int, int, int, int]]) -> int:
    """Pairs of leaders whose effective actions' hulls overlap, by brute force:
    (leader, invoke, complete, accepted)."""
    hull: dict[int, tuple[int, int]] = {}
    for who, t0, t1, ok in acts:
        if ok:
            lo, hi = hull.get(who, (t0, t1))
            hull[who] = (min(lo, t0), max(hi, t1))
    ws = sorted(hull)
    return sum(1 for i, a in enumerate(ws) for b in ws[i + 1:]
               if max(hull[a][0], hull[b][0]) < min(hull[a][1], hull[b][1]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(1, 10),
                          st.booleans()), min_size=1, max_size=12))
def test_split_brain_matches_a_brute_force_oracle(
        raw: list[tuple[int, int, int, bool]]) -> None:
    h = H()
    acts = []
    free = dict.fromkeys(range(4), 0)  # a process has one op in flight at a time
    for who, gap, length, ok in raw:
        t0 = free[who] + gap * MS
        t1 = free[who] = t0 + length * MS
        # leader `who` is process `who` with term `who + 1`
        act(h, who, who + 1, t0, t1, accepted=ok)
        acts.append((who, t0, t1, int(ok)))
    r = check(h.ops())
    assert r["split_brain_count"] == _oracle_split(acts)
