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

# how long a search-based check may run, by default (a search is never unbounded)
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """What checkers may need besides the history; all of it is plain data."""

    workload: str = "mutex"  # the workload's name (workloads/registry.py)
    resource: str = "fenced"  # the protected resource's mode (the run's --resource)
    ttl_ms: int | None = None  # lease TTL; histories also carry it on acquire/renew invokes
    clock_drift: float = 0.01  # e: clock-rate bound for lease-safety
    timeout_s: float | None = DEFAULT_TIMEOUT_S  # per search-based checker
    html_dir: Path | None = None  # where visualizations of failed checks go
    extra: dict[str, Any] = field(default_factory=dict)


Checker = Callable[[list[Op], CheckOptions], dict[str, Any]]


def options_for(test: dict[str, Any], *, timeout: float | None = None,
                html_dir: Path | None = None) -> CheckOptions:
    """The options of a run's check, from its test.json."""
    return CheckOptions(
        workload=str(test.get("workload", "mutex")),
        resource=str(test.get("resource", "fenced")),
        ttl_ms=test.get("ttl_ms"),
        clock_drift=float(test.get("clock_drift", 0.01)),
        timeout_s=timeout if timeout is not None else DEFAULT_TIMEOUT_S,
        html_dir=html_dir,
        extra=backend_facts(test),
    )


def backend_facts(test: dict[str, Any]) -> dict[str, Any]:
    """What checkers may know of the run's backend: its name and whether its fence
    counts grants one by one (`Backend.fence_counts_grants`). A run with the user's own
    client (`--client`) keeps none of the backend's promises about its client."""
    name = test.get("backend")
    if not isinstance(name, str):
        return {}
    from lockcheck.backends import BACKENDS

    b = BACKENDS.get(name)
    counts = b is not None and b.fence_counts_grants and not test.get("client")
    return {"backend": name, "fence_counts_grants": counts,
            "own_client": bool(test.get("client"))}


def check_safe(name: str, checker: Checker, ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    """Run one checker; an exception becomes "unknown" with the error, and time is recorded."""
    t0 = time.perf_counter()
    try:
        result = dict(checker(ops, opts))
        if result.get("valid") is False:  # name the withheld reply an anomaly followed
            from lockcheck.checker.withheld import annotate_safe

            result = annotate_safe(result, ops)
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
