"""LiveStats (the online counts behind the progress line) and the summary output."""

from __future__ import annotations

import io
import threading
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lockcheck.results.progress import (
    LiveStats,
    Progress,
    checker_detail,
    summary_table,
    table,
    verdict_word,
)


def ev(p: Any, f: str, t: int, key: str | None = "k") -> dict[str, Any]:
    return {"process": p, "type": "event", "f": f, "key": key, "time": t, "value": None}


def wr(p: Any, typ: str, fence: Any, max_fence: Any, key: str = "k") -> dict[str, Any]:
    return {"process": p, "type": typ, "f": "write", "key": key,
            "value": {"fence": fence, "accepted": typ == "ok", "seq": 1, "max_fence": max_fence}}


def feed(*ops: dict[str, Any]) -> LiveStats:
    s = LiveStats()
    for op in ops:
        s.observe(op)
    return s


def test_counts_by_type() -> None:
    s = feed({"type": "invoke", "f": "acquire", "key": "k", "process": 0},
             {"type": "ok", "f": "acquire", "key": "k", "process": 0},
             {"type": "invoke", "f": "kill", "key": None, "process": "nemesis"},
             {"type": "info", "f": "kill", "key": None, "process": "nemesis"},
             {"f": "weird"})
    assert s.ops == 5
    assert s.by_type == {"invoke": 2, "ok": 1, "info": 1, "?": 1}
    assert s.violations == 0


def test_overlapping_sections_count_when_they_close() -> None:
    s = feed(ev(0, "enter", 10), ev(1, "enter", 20))
    assert s.overlaps == 0  # nothing closed yet
    s.observe(ev(0, "exit", 30))
    s.observe(ev(1, "exit", 40))
    assert s.overlaps == 1 and s.violations == 1
    s.observe(ev(2, "enter", 25))  # a third holder overlapping both, arriving late
    s.observe(ev(2, "exit", 26))
    assert s.overlaps == 3


def test_overlaps_are_judged_by_recorded_times_not_arrival_order() -> None:
    # lines from different pipes arrive out of time order: 1's section is after 0's
    s = feed(ev(1, "enter", 50), ev(0, "enter", 10), ev(0, "exit", 40), ev(1, "exit", 60))
    assert s.overlaps == 0


def test_sequential_touching_and_other_key_sections_do_not_overlap() -> None:
    s = feed(ev(0, "enter", 0), ev(1, "enter", 5, key="j"), ev(0, "exit", 10),
             ev(2, "enter", 10), ev(2, "exit", 20), ev(1, "exit", 30, key="j"))
    assert s.overlaps == 0


def test_same_process_is_never_counted_against_itself() -> None:
    s = feed(ev(0, "enter", 0), ev(0, "exit", 10), ev(0, "enter", 5), ev(0, "exit", 15))
    assert s.overlaps == 0


def test_exit_without_enter_and_nemesis_records_are_harmless() -> None:
    s = feed(ev(0, "exit", 5), ev("nemesis", "enter", 1, key=None), ev(1, "enter", 0),
             ev(1, "exit", 10))
    assert s.overlaps == 0


def test_only_recent_sections_are_compared() -> None:
    s = LiveStats()
    s.observe(ev(0, "enter", 0))
    s.observe(ev(0, "exit", 10**9))  # a long section...
    for i in range(LiveStats.RECENT):  # ...pushed out by many short later ones
        s.observe(ev(1, "enter", 2 * 10**9 + i * 10))
        s.observe(ev(1, "exit", 2 * 10**9 + i * 10 + 5))
    s.observe(ev(2, "enter", 5))
    s.observe(ev(2, "exit", 6))
    assert s.overlaps == 0  # an estimate: the checkers give the real answer


def overlaps_by_brute_force(sections: list[tuple[str, int, int, int]]) -> int:
    """The estimate's rule, counted the slow way: as each section (key, process, start,
    end) closes, the other processes' sections among the `RECENT` of its key that end
    latest (ties: the earlier closed first) which ended after it began and began before
    it ended."""
    closed: dict[str, list[tuple[int, int, int, int]]] = {}
    n = 0
    for order, (key, p, start, end) in enumerate(sections):
        recent = sorted(closed.get(key, []))[-LiveStats.RECENT:]
        n += sum(1 for e, _, s, q in recent if e > start and q != p and s < end)
        closed[key] = [*recent, (end, order, start, p)]
    return n


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3),
                          st.integers(0, 40), st.integers(-3, 40)), max_size=90))
# one that ends before it begins, right after another: it must not be kept out of order
@example([("a", 0, 0, 10), ("a", 1, 12, -4), ("a", 2, 9, 11)])
def test_the_overlap_estimate_is_the_rule_counted_the_slow_way(
        raw: list[tuple[str, int, int, int]]) -> None:
    """Sections in any order (as workers' lines arrive), touching, nested, one that ends
    before it begins (a clock stepped back), more of one key than are remembered."""
    sections = [(k, p, s, s + d) for k, p, s, d in raw]
    rows = []
    for i, (k, p, s, e) in enumerate(sections):
        rows += [(2 * i, s, p, "enter", k, 0, "null"), (2 * i + 1, e, p, "exit", k, 0, "null")]
    stats = LiveStats()
    stats.events(rows)
    assert stats.overlaps == overlaps_by_brute_force(sections)


def test_writes_stale_accepted_and_saves() -> None:
    s = feed(wr(0, "ok", 3, None), wr(0, "ok", 4, 3),
             wr(1, "ok", 2, 4),   # accepted though not above the max: stale
             wr(1, "ok", 4, 4),   # equal counts as stale
             wr(2, "fail", 1, 4),  # rejected by the fence: a save
             wr(3, "info", 5, None),
             {"process": 4, "type": "ok", "f": "write", "key": "k", "value": None})
    assert s.stale_accepted == 2
    assert s.saves == 1
    assert s.violations == 2


def test_violations_add_overlaps_and_stale_writes() -> None:
    s = feed(ev(0, "enter", 0), ev(1, "enter", 1), ev(0, "exit", 3), ev(1, "exit", 4),
             wr(1, "ok", 1, 2))
    assert (s.overlaps, s.stale_accepted, s.violations) == (1, 1, 2)


def test_observe_is_thread_safe() -> None:
    s = LiveStats()

    def go(p: int) -> None:
        for _ in range(500):
            s.observe({"process": p, "type": "invoke", "f": "acquire", "key": "k"})

    ts = [threading.Thread(target=go, args=(p,)) for p in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert s.ops == 3000 and s.by_type == {"invoke": 3000}


# -- what the user sees -----------------------------------------------------------------


def test_progress_on_a_pipe_prints_plain_lines_at_most_every_interval() -> None:
    out = io.StringIO()
    p = Progress(out, every=100)
    p.update("one")
    p.update("two")  # too soon: dropped
    p.update("three", force=True)
    p.done()
    assert out.getvalue() == "one\nthree\n"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_rewrites_one_line() -> None:
    out = Tty()
    p = Progress(out, every=0)
    p.update("a long line")
    p.update("short")
    p.done()
    assert out.getvalue() == "\ra long line\rshort      \n"


@pytest.mark.parametrize(("valid", "word"), [(True, "valid"), (False, "INVALID"),
                                             ("unknown", "unknown"), (None, "unknown")])
def test_verdict_word(valid: object, word: str) -> None:
    assert verdict_word(valid) == word


def test_table_aligns_columns() -> None:
    t = table([("a", "1"), ("long", "22")], ("name", "n"))
    assert t.splitlines() == ["name  n", "----  --", "a     1", "long  22"]  # no trailing blanks


def test_checker_details() -> None:
    assert checker_detail("mutual-exclusion", {"violation_count": 2, "sections": 9}) == \
        "2 overlaps in 9 critical sections"
    fe = {"resource_valid": True, "accepted": 5, "stale_accepted_count": 0, "saves": 4,
          "duplicate_fence_count": 2, "regression_count": 3}
    assert checker_detail("fencing", fe) == \
        ("resource safe: 0 stale accepted, 4 saves (stale holder refused), 0 refused after the "
         "fence went backwards; tokens: 2 dup, 3 regressions")
    split = dict(fe, saves_stale_holder=1, saves_regressed_fence=3)
    assert "1 saves (stale holder refused), 3 refused after the fence went backwards" in \
        checker_detail("fencing", split)
    bad = dict(fe, resource_valid=False, stale_accepted_count=1)
    assert checker_detail("fencing", bad).startswith("RESOURCE CORRUPTED: 1 stale accepted")
    assert checker_detail("fencing", {"duplicate_fence_count": 1}) == \
        "no resource writes; tokens: 1 dup, 0 regressions"
    assert checker_detail("other", {"error": "boom"}) == "boom"
    assert checker_detail("other", {"note": "n"}) == "n"
    assert checker_detail("other", {}) == ""


def test_summary_table_lists_every_checker() -> None:
    text = summary_table({"checkers": {
        "mutual-exclusion": {"valid": False, "elapsed_s": 0.5, "violation_count": 1,
                             "sections": 3},
        "fencing": {"valid": "unknown", "error": "TypeError: x"},
    }})
    lines = text.splitlines()
    assert lines[0].split() == ["checker", "verdict", "time", "details"]
    assert "INVALID" in lines[2] and "0.50s" in lines[2] and "1 overlaps" in lines[2]
    assert "unknown" in lines[3] and "TypeError: x" in lines[3]
