"""The run's verdict: one of True, False, "unknown", and a one-line explanation.

- `mutex` workload: the lock itself is on trial. Every checker decides (Jepsen's
  merge-valid: False beats "unknown" beats True).
- `fenced` workload: the protected resource is on trial. `fencing.resource_valid`
  decides; overlapping critical sections and duplicate fences are reported but do not
  decide (they are why fencing exists). No fencing result means "unknown".
- `lock-set` and `settlement` workloads: the resource is on trial, and its checker
  decides (lock-set, as in Jepsen's etcd lock-set: an acknowledged add missing from
  the final set is a lost update); overlapping critical sections are reported as the
  cause.

In `mutex`, a checker that could not decide ("unknown") makes the verdict "unknown"
unless another is False; in `fenced`, only the fencing checker can. A checker that
found nothing of its kind to check (``nothing_checked``: no critical sections, no
fences) abstains, and the others decide; when every checker abstains, or there are
no results at all, the verdict is "unknown". Nothing checked is never valid: in
`fenced`, a run in which no write reached the resource is "unknown" too.
"""

from __future__ import annotations

from typing import Any

from lockcheck.exitcodes import merge_valid

MUTEX = "mutual-exclusion"
FENCING = "fencing"
LOCK_SET = "lock-set"


def _n(count: int, singular: str, plural: str | None = None) -> str:
    return f"{count} {singular if count == 1 else (plural or singular + 's')}"


def _count(result: dict[str, Any], name: str, fallback_list: str | None = None) -> int:
    v = result.get(name)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if fallback_list is not None and isinstance(result.get(fallback_list), list):
        return len(result[fallback_list])
    return 0


def _overlaps(me: dict[str, Any] | None) -> str | None:
    """'3 overlapping critical sections on 2 keys', or None without a usable result."""
    if me is None or me.get("valid") not in (True, False):
        return None
    n = _count(me, "violation_count", "violations")
    if n == 0:
        return "no overlapping critical sections"
    keys = me.get("keys")
    n_keys = len(keys) if isinstance(keys, dict) else 0
    on = f" on {_n(n_keys, 'key')}" if n_keys else ""
    return f"{_n(n, 'overlapping critical section')}{on}"


def _dups(fe: dict[str, Any]) -> str | None:
    n = _count(fe, "duplicate_fence_count", "duplicate_fences")
    return f"{_n(n, 'duplicate fence token')} granted" if n else None


def _corruption(fe: dict[str, Any]) -> str:
    parts = []
    n_inter = _count(fe, "interleaved_write_count") or _count(
        fe, "interleaved_count", "interleaved_writes"
    )
    if n_inter:
        parts.append(f"{_n(n_inter, 'write')} accepted from an overlapping older holder")
    n_stale = _count(fe, "stale_accepted_count", "stale_accepted")
    if n_stale:
        parts.append(f"{_n(n_stale, 'stale write')} accepted (fence not above the highest)")
    return "resource corrupted: " + ("; ".join(parts) or "see the fencing checker")


def _unknown_reason(results: dict[str, dict[str, Any]]) -> str:
    parts = []
    for name, r in results.items():
        if r.get("valid") not in (True, False):
            why = r.get("error") or r.get("note") or "could not decide"
            parts.append(f"{name}: {why}")
    return "unknown: " + "; ".join(parts)


def _failure(name: str, r: dict[str, Any]) -> str:
    if name == MUTEX:
        return f"mutual exclusion violated: {_overlaps(r)}"
    if name == FENCING:
        if r.get("resource_valid") is False:
            return _corruption(r)
        return f"fencing violated: {_dups(r) or 'see the fencing checker'}"
    summary = r.get("summary")
    return f"{name}: {summary}" if summary else f"{name} failed"


def _abstains(r: dict[str, Any]) -> bool:
    return bool(r.get("nothing_checked")) and r.get("valid") not in (True, False)


def _mutex_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    idle = {n: r for n, r in results.items() if _abstains(r)}
    results = {n: r for n, r in results.items() if n not in idle}
    if not results:
        return "unknown", "unknown: nothing was checked: " + "; ".join(
            f"{n}: {r['nothing_checked']}" for n, r in idle.items())
    valid = merge_valid([r.get("valid", "unknown") for r in results.values()])
    if valid is False:
        return False, "; ".join(
            _failure(name, r) for name, r in results.items() if r.get("valid") is False
        )
    if valid is not True:  # "unknown"
        return "unknown", _unknown_reason(results)
    me = results.get(MUTEX)
    if me is not None:
        secs = _count(me, "sections")
        text = f"mutual exclusion held: {_n(secs, 'critical section')}, no overlaps"
    else:
        text = "all checkers passed"
    fe = results.get(FENCING)
    if fe is not None and _count(fe, "fenced_acquisitions"):
        text += f"; fence tokens unique ({_n(_count(fe, 'regression_count'), 'regression')})"
    return True, text


def _fenced_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    fe = results.get(FENCING)
    if fe is None:
        return "unknown", "unknown: no fencing result, so nothing is known about the resource"
    context = [c for c in (_overlaps(results.get(MUTEX)), _dups(fe)) if c]
    tail = "; " + "; ".join(context) if context else ""
    decisive = fe.get("resource_valid") if fe.get("valid") in (True, False) else "unknown"
    if decisive is False:
        return False, _corruption(fe) + tail
    if decisive is not True:
        return "unknown", _unknown_reason({FENCING: fe})
    stale = _count(fe, "stale_accepted_count", "stale_accepted")
    saves = _count(fe, "saves")
    accepted = _count(fe, "accepted")
    if not accepted and not saves:
        if _count(fe, "unfenced_rejections"):
            return "unknown", ("unknown: the resource refused every write because none "
                               "carried a fence (the backend issues none), so it was not "
                               "tested" + tail)
        return "unknown", "unknown: no write reached the resource, so it was not tested" + tail
    split = ""
    if saves and "saves_stale_holder" in fe:
        split = (f": {_count(fe, 'saves_stale_holder')} from a holder that had lost the lock, "
                 f"{_count(fe, 'saves_regressed_fence')} from a current holder after the "
                 "fences went backwards")
    return (
        True,
        f"resource safe: {_n(stale, 'stale write')} accepted, "
        f"{_n(saves, 'stale write')} rejected by the fence (saves{split})" + tail,
    )


def _decided_by(name: str, results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    """A workload whose resource is on trial: its checker decides; overlapping critical
    sections are context (they are why the resource's own layers exist)."""
    r = results.get(name)
    if r is None:
        return "unknown", f"unknown: no {name} result"
    context = _overlaps(results.get(MUTEX))
    tail = f"; {context}" if context else ""
    valid = r.get("valid")
    if valid is False:
        return False, f"{name}: {r.get('summary', 'failed')}{tail}"
    if valid is not True:
        why = r.get("summary") or r.get("nothing_checked") or r.get("error") or \
            "could not decide"
        return "unknown", f"unknown: {name}: {why}{tail}"
    return True, f"{r.get('summary', name + ' passed')}{tail}"


def run_verdict(workload: str, results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    """Combine checker results (by checker name) into (valid, one-line explanation)."""
    if not results:
        return "unknown", "unknown: no checker results"
    if workload == "fenced":
        return _fenced_verdict(results)
    if workload in (LOCK_SET, "settlement"):
        return _decided_by(workload, results)
    if workload != "mutex":
        valid, text = _mutex_verdict(results)
        return valid, f"{text} (unknown workload {workload!r}: all checkers decide)"
    return _mutex_verdict(results)
