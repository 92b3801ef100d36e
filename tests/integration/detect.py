"""`first_showing`: the one way a test makes up to N runs of a probabilistic scenario.

A finding that depends on timing (a rival asking inside a fault's window, a pause
landing on a holder) does not show in every run. A test takes the first of up to
`tries` runs that shows it, and every try is appended as one JSON line to
`detections.jsonl` in the session's base temp (`pytest_terminal_summary` in
tests/conftest.py prints the totals), so a scenario's detection rate is measured
across suite runs instead of guessed from the flakes.

Tests that use it are marked `detection`: tests/conftest.py runs them after every
other test, and each makes its runs one at a time, so no try competes with another
cluster for the machine's cores.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# the session's log, set by tests/conftest.py; in the environment, not a module global,
# so that this module imported under two names (`.detect`, `tests.integration.detect`)
# still writes to it
LOG_ENV = "LOCKCHECK_TESTS_DETECTIONS"
_calls = itertools.count(1)


def log_path() -> Path | None:
    raw = os.environ.get(LOG_ENV)
    return Path(raw) if raw else None


def _shows(shows: Callable[[Any], bool], r: Any) -> tuple[bool, str | None]:
    """The predicate's answer; a run without the files it reads (a harness error,
    exit 2) did not show it, and says why in the log and the failure."""
    try:
        return bool(shows(r)), None
    except (OSError, KeyError, IndexError, TypeError, ValueError, AssertionError) as e:
        return False, f"{type(e).__name__}: {e}"


def record(entry: dict[str, Any]) -> None:
    path = log_path()
    if path is None:
        return
    with path.open("a") as fh:
        fh.write(json.dumps(entry) + "\n")


def first_showing(cli: Any, argv: Sequence[str], shows: Callable[[Any], bool],
                  tries: int = 3, timeout: float = 240.0) -> Any:
    """The first of up to `tries` runs of `lockcheck test *argv` for which `shows(result)`
    holds, or the last one. Each run leaves nothing behind (checked after it), and
    the result's `explain()` names the tries before it."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    call = f"{os.getpid()}-{next(_calls)}"  # the tries of one call, in the log
    tried: list[str] = []
    for n in range(1, tries + 1):
        started = time.monotonic()
        r = cli("test", *argv, timeout=timeout)
        shown, why = _shows(shows, r)
        record({"test": test, "call": call, "try": n, "argv": list(argv), "exit": r.code,
                "shown": shown, "seconds": round(time.monotonic() - started, 1),
                **({"error": why} if why else {})})
        for rid in r.traces:
            cli.assert_no_leftovers(rid)
        if shown:
            break
        tried.append(f"{r.run_dir}: exit {r.code}" + (f" ({why})" if why else ""))
    r.tried = tuple(tried)
    return r


def summary(path: Path) -> str | None:
    """"detection tries: N runs, k needed a retry" for the session's log, if any."""
    if not path.is_file():
        return None
    entries = [json.loads(line) for line in path.read_text().splitlines() if line]
    calls: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        calls.setdefault(e["call"], []).append(e)
    retried = sum(len(es) > 1 for es in calls.values())
    missed = sum(not any(e["shown"] for e in es) for es in calls.values())
    return (f"detection tries: {len(entries)} runs, {retried} needed a retry, "
            f"{missed} never showed ({path})")
