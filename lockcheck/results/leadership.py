"""The leadership metrics of a run (the `leader` workload), for the run report and
`compare`: how often the leader changed, how long the election had none, and how
many stale actions (a term below the highest the store had seen) it accepted or
refused. Counted by the leadership checker's own reading of the history
(`checker/leadership.py:leadership_summary`), so the metrics and the verdict agree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockcheck.checker.leadership import ACT, leadership_summary
from lockcheck.history import Op


def leadership_metrics(ops: Sequence[Op]) -> dict[str, Any] | None:
    """None for a history with no leader's action (any other workload)."""
    if not any(o.f == ACT for o in ops):
        return None
    return leadership_summary(ops)


def leadership_rows(m: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report's lines for `m` (a `leadership_metrics` result)."""
    return [
        ("leadership", f"{m.get('leaders', 0):,} terms, {m.get('leadership_changes', 0):,} "
                       f"change(s) of leader, {m.get('leaderless_ms', 0):g} ms without one; "
                       f"{m.get('actions', 0):,} actions"),
        ("stale actions", f"{m.get('stale_accepted', 0):,} accepted, "
                          f"{m.get('stale_refused', 0):,} refused (a term below the "
                          "highest the store had seen)"),
    ]


def leadership_line(changes: float | None, leaderless_ms: float | None,
                    stale_accepted: int, stale_refused: int, runs: int) -> str:
    """One line of a `compare` cell: medians over its runs, stale actions summed."""
    return (f"leader changes {changes:g}, {leaderless_ms:g} ms without a leader (median); "
            f"stale actions {stale_accepted} accepted, {stale_refused} refused "
            f"in {runs} run(s)")
