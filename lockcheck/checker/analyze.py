"""Checking a stored run or a history file: what `lockcheck check` and a run's end call."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lockcheck.checker.api import check_safe, options_for
from lockcheck.errors import BadInput
from lockcheck.history import Op, read_history_full
from lockcheck.results.store import load_results, load_test, resolve_history


def analyze(ops: list[Op], test: dict[str, Any], *, timeout: float | None = None,
            html_dir: Path | None = None, metrics: bool = True) -> dict[str, Any]:
    """Run the test's checkers over a history and combine them into one verdict."""
    from lockcheck.checker.registry import CHECKERS, checkers_of
    from lockcheck.checker.verdict import run_verdict
    from lockcheck.results.metrics import safe_metrics

    opts = options_for(test, timeout=timeout, html_dir=html_dir)
    names = checkers_of(test, opts.workload)
    unknown = [n for n in names if n not in CHECKERS]
    if unknown:
        raise BadInput(f"unknown checker(s) {', '.join(unknown)}; known: {', '.join(CHECKERS)}")
    results = {n: check_safe(n, CHECKERS[n], ops, opts) for n in names}
    valid, why = run_verdict(opts.workload, results)
    if valid is not False and not any(o.f == "acquire" and o.type == "ok" for o in ops):
        # nothing was ever held, so nothing was tested: that is not a pass
        from lockcheck.checker.never_held import never_held

        valid, why = "unknown", never_held(ops)
    out = {"valid": valid, "summary": why, "workload": opts.workload, "ops": len(ops),
           "checkers": results, "metrics": safe_metrics(ops, test) if metrics else {}}
    if test.get("client"):  # a run with --client: its fences and unmapped errors
        from lockcheck.checker.client_notes import client_notes

        out["client"] = notes = client_notes(ops, test)
        if notes["unmapped_errors"]:
            out["summary"] = f"{why}; {notes['notes'][-1]}"
    return out


def check_path(path: Path, *, model: str | None = None, fmt: str | None = None,
               timeout: float | None = None, html_dir: Path | None = None,
               allow_truncated: bool = False, initial: Any = None) -> dict[str, Any]:
    """Check one run directory or history file. Raises HistoryError/BadInput on bad input.
    ``initial`` (register models) is the registers' initial value."""
    t0 = time.perf_counter()
    lockcheck_history = path.name.endswith((".jsonl", ".jsonl.gz", ".jsonl.xz"))
    if fmt is None and path.is_file() and not lockcheck_history:
        from lockcheck.checker.external import infer_format

        fmt = infer_format(path)
    if model is not None or initial is not None or (fmt is not None and fmt != "lockcheck"):
        from lockcheck.checker.external import check_external

        return check_external(path, model=model, fmt=fmt, timeout=timeout, html_dir=html_dir,
                              allow_truncated=allow_truncated, initial=initial)
    history = resolve_history(path)
    test = load_test(path)
    read = read_history_full(history, allow_truncated=allow_truncated)
    result = analyze(read.ops, test, timeout=timeout, html_dir=html_dir)
    if path.is_dir():
        from lockcheck.checker.verdict import carry_run_facts

        carry_run_facts(result, load_results(path) or {})
    out: dict[str, Any] = {"path": str(path), "valid": result["valid"],
                           "summary": result["summary"], **result}
    if read.truncated_line is not None:
        out["truncated_line"] = read.truncated_line
    out["elapsed_s"] = round(time.perf_counter() - t0, 4)
    return out
