"""A run whose client workers all ended before its time limit: a violation found stands,
but no violation found is unknown, never valid (the clients tried too little)."""

from __future__ import annotations

from typing import Any

from lockcheck import exitcodes
from lockcheck.checker.verdict import cut_short


def test_no_violation_from_a_run_cut_short_is_unknown() -> None:
    results: dict[str, Any] = {"valid": True, "summary": "mutual exclusion held: 28 "
                                                          "critical sections, no overlaps"}
    cut_short(results, "every client worker exited before the time limit")
    assert results["valid"] == "unknown"
    assert exitcodes.for_verdict(results["valid"]) == exitcodes.UNKNOWN
    assert results["summary"].startswith("every client worker exited before the time limit")
    assert "28 critical sections" in results["summary"]  # what was seen is still said


def test_a_violation_found_before_the_end_stands() -> None:
    results: dict[str, Any] = {"valid": False, "summary": "mutual exclusion violated"}
    cut_short(results, "every client worker exited before the time limit")
    assert results == {"valid": False, "summary": "mutual exclusion violated",
                       "cut_short": "every client worker exited before the time limit"}
