"""The liveness metrics of a run whose operations take several locks (`transfer`):
throughput and the time lost to deadlock, for the run report and `compare`.

Read from the deadlock checker's sweep of the same history, so the report's numbers and
the checker's verdict cannot disagree. None for a history without such operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockcheck.checker.deadlock import check_deadlock
from lockcheck.history import Op


def liveness_metrics(ops: Sequence[Op]) -> dict[str, Any] | None:
    if not any(o.type == "event" and o.f == "begin" for o in ops):
        return None  # the common case, decided without the sweep
    r = check_deadlock(list(ops))
    if "nothing_checked" in r:
        return None
    span = r["span_s"] or 1e-9
    return {
        "operations": r["operations"],
        "completed": r["completed"],
        "not_completed": r["not_completed"],
        "outcomes": r["outcomes"],
        "throughput_per_s": r["throughput_per_s"],
        "cycles": r["cycle_count"],
        "never_broken": r["never_broken"],
        "broken_by": r["broken_by"],
        "deadlock_s": r["deadlock_s"],
        "deadlocked_s": r["deadlocked_s"],
        "deadlocked_share": round(r["deadlocked_s"] / span, 4),
        "stuck_worker_s": r["stuck_worker_s"],
    }


def liveness_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's lines for `m` (a `liveness_metrics` result)."""
    outcomes = ", ".join(f"{k} {v:,}" for k, v in sorted(m.get("outcomes", {}).items()))
    broken = ", ".join(f"{k} {v:,}" for k, v in sorted(m.get("broken_by", {}).items()))
    return [
        ("operations (several locks each)",
         f"{m.get('completed', 0):,} of {m.get('operations', 0):,} completed, "
         f"{m.get('throughput_per_s', 0):g}/s; {outcomes or '-'}"),
        ("deadlock", f"{m.get('cycles', 0):,} wait-for cycle(s); {m.get('deadlock_s', 0):g} s "
         f"in deadlock ({m.get('deadlocked_share', 0) * 100:.1f}% of the run), "
         f"{m.get('stuck_worker_s', 0):g} worker-seconds lost; broken by: {broken or '-'}"),
    ]
