from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.intervals import Section, critical_sections
from lockcheck.checker.mutual_exclusion import check_mutual_exclusion
from lockcheck.history import Op

from .histories import H

OPTS = CheckOptions()


def check(h: H) -> dict[str, Any]:
    return check_mutual_exclusion(h.ops(), OPTS)


# -- critical_sections ----------------------------------------------------------------


def test_sections_pair_enter_and_exit() -> None:
    ops = (
        H()
        .acquire(0, "k", 1, 0, 5)
        .enter(0, "k", 1, 10)
        .exit(0, "k", 1, 20, "lease-expired")
        .release(0, "k", 1, 21, 22, result="fail")
        .ops()
    )
    [s] = critical_sections(ops)
    assert s == Section(
        process=0,
        worker=0,
        key="k",
        fence=1,
        start=10,
        end=20,
        exit_reason="lease-expired",
        open=False,
        start_index=2,
        end_index=3,
    )


def test_open_section_lasts_until_the_process_last_record() -> None:
    ops = (
        H()
        .enter(0, "k", 1, 10)
        .write(0, "k", 1, 20, 30, seq=1)
        .renew(0, "k", 1, 40, 90, result="info")  # last record of process 0 at t=90
        .section(1, "k", 2, 50, 60)
        .ops()
    )
    s0 = critical_sections(ops)[0]
    assert (s0.process, s0.start, s0.end, s0.open, s0.exit_reason) == (0, 10, 90, True, None)


def test_open_section_whose_enter_is_the_last_record_is_empty() -> None:
    [s] = critical_sections(H().acquire(0, "k", 1, 0, 5).enter(0, "k", 1, 10).ops())
    assert (s.start, s.end, s.open) == (10, 10, True)


def test_exit_without_enter_is_ignored_and_keys_are_separate() -> None:
    ops = (
        H()
        .exit(0, "a", 1, 5)
        .enter(0, "a", 1, 10)
        .enter(0, "b", 2, 11)
        .exit(0, "b", 2, 12)
        .exit(0, "a", 1, 30)
        .ops()
    )
    secs = critical_sections(ops)
    assert [(s.key, s.start, s.end) for s in secs] == [("a", 10, 30), ("b", 11, 12)]


def test_reenter_without_exit_closes_the_earlier_section() -> None:
    ops = H().enter(0, "k", 1, 10).enter(0, "k", 2, 20).exit(0, "k", 2, 30).ops()
    secs = critical_sections(ops)
    assert [(s.fence, s.start, s.end, s.open) for s in secs] == [
        (1, 10, 20, True),
        (2, 20, 30, False),
    ]


def test_sections_ordered_by_time_then_index_whatever_the_file_order() -> None:
    ops = (
        H()
        .section(1, "k", 2, 50, 60)
        .section(0, "k", 1, 10, 20)
        .section(2, "k", 3, 50, 55)
        .ops(sort=False)
    )
    assert [s.process for s in critical_sections(ops)] == [0, 1, 2]


# -- check_mutual_exclusion -------------------------------------------------------------


def test_sequential_holders_are_valid() -> None:
    h = H().section(0, "k", 1, 10, 20).section(1, "k", 2, 30, 40).section(0, "k", 3, 50, 60)
    r = check(h)
    assert r["valid"] is True
    assert r["sections"] == 3
    assert r["violation_count"] == 0
    assert r["violations"] == [] and r["keys"] == {}


def test_touching_intervals_do_not_overlap() -> None:
    r = check(H().section(0, "k", 1, 10, 20).section(1, "k", 2, 20, 30))
    assert r["valid"] is True


def test_overlap_is_reported_with_both_sides() -> None:
    h = H().section(0, "k", 1, 10, 40, "lease-expired").section(1, "k", 2, 30, 50, "done")
    r = check(h)
    assert r["valid"] is False
    assert r["violation_count"] == 1
    assert r["keys"] == {"k": 1}
    assert r["violations"] == [
        {
            "key": "k",
            "start": 30,
            "end": 40,
            "processes": [0, 1],
            "workers": [0, 1],
            "fences": [1, 2],
            "exit_reasons": ["lease-expired", "done"],
            "open": [False, False],
            "sections": [[10, 40], [30, 50]],
        }
    ]


def test_same_key_only() -> None:
    r = check(H().section(0, "a", 1, 10, 40).section(1, "b", 1, 20, 50))
    assert r["valid"] is True


def test_open_section_overlaps_a_later_holder() -> None:
    h = (
        H()
        .acquire(0, "k", 1, 0, 5)
        .enter(0, "k", 1, 10)  # never exits: the worker was paused then killed
        .section(1, "k", 2, 100, 200)
        .write(0, "k", 1, 150, 300, result="info")  # process 0 still around at t=300
    )
    r = check(h)
    assert r["valid"] is False
    [v] = r["violations"]
    assert v["open"] == [True, False]
    assert v["exit_reasons"] == [None, "done"]
    assert (v["start"], v["end"]) == (100, 200)
    assert r["open_sections"] == 1


def test_nested_and_chained_overlaps_counted_per_pair_and_key() -> None:
    h = (
        H()
        .section(0, "a", 1, 0, 100)
        .section(1, "a", 2, 10, 20)
        .section(2, "a", 3, 15, 30)  # overlaps 0 and 1
        .section(3, "a", 4, 100, 120)  # touches 0: no overlap
        .section(0, "b", 1, 0, 10)
        .section(1, "b", 2, 5, 10)
    )
    r = check(h)
    assert r["violation_count"] == 4
    assert r["keys"] == {"a": 3, "b": 1}
    pairs = [tuple(v["processes"]) for v in r["violations"]]
    assert pairs == [(0, 1), (0, 2), (1, 2), (0, 1)]
    assert r["violations"][2]["start"] == 15 and r["violations"][2]["end"] == 20


def test_same_worker_under_a_new_process_id_is_a_self_overlap_not_a_violation() -> None:
    # concurrency 3: worker 0 runs process 0, then (after an info) process 3
    h = H(concurrency=3).section(0, "k", 1, 10, 50).section(3, "k", 2, 40, 60)
    r = check(h)
    assert r["valid"] is True
    assert r["violation_count"] == 0
    assert r["self_overlap_count"] == 1
    assert r["self_overlaps"][0]["workers"] == [0, 0]
    assert r["self_overlaps"][0]["processes"] == [0, 3]


def test_self_overlaps_and_violations_mixed() -> None:
    h = (
        H(concurrency=3)
        .section(0, "k", 1, 10, 50)
        .section(1, "k", 2, 20, 60)
        .section(3, "k", 3, 30, 70)
    )
    r = check(h)
    assert (r["violation_count"], r["self_overlap_count"]) == (2, 1)
    assert [v["processes"] for v in r["violations"]] == [[0, 1], [1, 3]]


def test_missing_worker_field_is_not_a_self_overlap() -> None:
    ops = [
        Op(process=0, type="event", f="enter", key="k", value={"fence": 1}, time=1, index=0),
        Op(process=3, type="event", f="enter", key="k", value={"fence": 2}, time=2, index=1),
        Op(process=0, type="event", f="exit", key="k", value={"fence": 1}, time=5, index=2),
        Op(process=3, type="event", f="exit", key="k", value={"fence": 2}, time=6, index=3),
    ]
    r = check_mutual_exclusion(ops, OPTS)
    assert r["violation_count"] == 1
    assert r["violations"][0]["workers"] == [None, None]


def test_examples_capped_but_count_exact() -> None:
    h = H()
    for p in range(30):  # 30 sections all overlapping: 435 pairs
        h.section(p, "k", p + 1, p, 1000)
    r = check(h)
    assert r["violation_count"] == 30 * 29 // 2
    assert len(r["violations"]) == 100
    assert r["keys"] == {"k": 435}


def test_zero_length_sections_never_overlap() -> None:
    r = check(H().section(0, "k", 1, 0, 100).section(1, "k", 2, 50, 50))
    assert r["valid"] is True


def test_no_sections_is_unknown_with_a_note() -> None:
    r = check(H().acquire(0, "k", None, 0, 10).release(0, "k", None, 20, 30))
    assert r["valid"] == "unknown" and r["nothing_checked"]
    assert r["sections"] == 0
    assert "note" in r


# -- property: the sweep agrees with a brute-force oracle ------------------------------

N_WORKERS = 4
# a process's timeline: a list of (key, gap before enter, duration, has_exit)
_step = st.tuples(
    st.sampled_from(["a", "b"]),
    st.integers(0, 20),
    st.integers(0, 30),
    st.booleans(),
)
_timeline = st.tuples(
    st.integers(0, 40),  # start offset
    st.lists(_step, max_size=5),
    st.integers(0, 20),  # tail after the last section (a final record)
)


def _build(
    timelines: list[tuple[int, list[tuple[str, int, int, bool]], int]],
) -> tuple[H, list[tuple[int, int, str, int, int]]]:
    """History plus the intended sections (process, worker, key, start, end)."""
    h = H(concurrency=N_WORKERS)
    intended = []
    for p, (offset, steps, tail) in enumerate(timelines):
        t = offset
        for i, (key, gap, dur, has_exit) in enumerate(steps):
            t += gap
            start = t
            h.enter(p, key, i, start)
            last = i == len(steps) - 1
            if has_exit or not last:
                # only the process's last section may be open; others always exit
                t += dur
                h.exit(p, key, i, t)
                intended.append((p, p % N_WORKERS, key, start, t))
            else:
                t += tail
                h.renew(p, key, i, t, t, result="info")  # the final record
                intended.append((p, p % N_WORKERS, key, start, t))
            t += 1
    return h, intended


def _oracle(intended: list[tuple[int, int, str, int, int]]) -> tuple[set[Any], int]:
    viol, selfs = set(), 0
    for i, (p1, w1, k1, s1, e1) in enumerate(intended):
        for p2, w2, k2, s2, e2 in intended[i + 1 :]:
            if k1 != k2 or p1 == p2 or not max(s1, s2) < min(e1, e2):
                continue
            if w1 == w2:
                selfs += 1
            else:
                viol.add((k1, frozenset([(p1, s1), (p2, s2)]), max(s1, s2), min(e1, e2)))
    return viol, selfs


@settings(max_examples=300, deadline=None)
@given(st.lists(_timeline, min_size=1, max_size=10))
def test_sweep_matches_brute_force(timelines: list[Any]) -> None:
    h, intended = _build(timelines)
    viol, selfs = _oracle(intended)
    r = check(h)
    assert r["violation_count"] == len(viol)
    assert r["self_overlap_count"] == selfs
    assert r["valid"] is (not viol) if intended else r["valid"] == "unknown"
    assert r["sections"] == len(intended)
    if len(viol) <= 100:
        got = {
            (
                v["key"],
                frozenset(zip(v["processes"], [s[0] for s in v["sections"]], strict=True)),
                v["start"],
                v["end"],
            )
            for v in r["violations"]
        }
        assert got == viol
    per_key: dict[str, int] = {}
    for k, *_ in viol:
        per_key[k] = per_key.get(k, 0) + 1
    assert r["keys"] == per_key
