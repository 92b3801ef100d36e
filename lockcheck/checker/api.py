"""What every lockcheck checker is: a pure function from a history to a result dict.

A checker never raises on a well-formed history; a result always has "valid" in
{True, False, "unknown"} and whatever details explain it. `check_safe` turns an
exception into "unknown" (never into valid).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.history import Op


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """What checkers may need besides the history; all of it is plain data."""

    workload: str = "mutex"  # "mutex" or "fenced"
    resource: str = "fenced"  # the protected resource's mode: "fenced" or "unfenced"
    ttl_ms: int | None = None  # lease TTL; histories also carry it on acquire/renew invokes
    clock_drift: float = 0.01  # e: clock-rate bound for lease-safety
    timeout_s: float | None = 60.0  # per search-based checker
    html_dir: Path | None = None  # where visualizations of failed checks go
    extra: dict[str, Any] = field(default_factory=dict)


Checker = Callable[[list[Op], CheckOptions], dict[str, Any]]


def check_safe(name: str, checker: Checker, ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    """Run one checker; an exception becomes "unknown" with the error, and time is recorded."""
    t0 = time.perf_counter()
    try:
        result = dict(checker(ops, opts))
    except Exception as e:  # a checker bug must never turn into "valid"
        result = {
            "valid": "unknown",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=8),
        }
    result.setdefault("valid", "unknown")
    result["elapsed_s"] = round(time.perf_counter() - t0, 4)
    result["checker"] = name
    return result
