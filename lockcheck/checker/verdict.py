"""The run's verdict: one of True, False, "unknown", and a one-line explanation.

Each workload names its rule (`Workload.verdict`, workloads/registry.py); the rules are:

- `lock_verdict` (the lock is on trial, `mutex`): every checker decides (Jepsen's
  merge-valid: False beats "unknown" beats True).
- `fenced_verdict` (the lock and the protected resource are both on trial, `fenced`):
  a lock checker (mutual exclusion, lease safety, linearizable, hidden grants) that
  failed makes the run invalid, and the text says whether the lock alone failed (the
  resource held: no stale write accepted) or the lock and the resource. The resource
  alone decides when the lock checkers passed or could not decide: corrupted is
  invalid, protected is valid, no fencing result or no write at it is "unknown". A
  backend that issues no fence is said so ("no fence: the resource cannot refuse") and
  the lock checkers decide. A *save* is a write refused from a holder that had lost
  the lock; a write of a current holder refused because the fences went backwards is
  a *fence regression*, counted apart (it is lost work, not a rescue).
- `transfer_verdict` (liveness on trial): a deadlock cycle fails the run; the lock's
  checkers judge safety as under `lock_verdict`, and the text names both.
- `lock_set_verdict`, `settlement_verdict`, `leader_verdict` (the resource is on
  trial): its checker decides (lock-set, as in Jepsen's etcd lock-set: an
  acknowledged add missing from the final set is a lost update; leadership: two
  leaders acting at once, a deposed leader's action accepted, a term gone
  backwards); overlapping critical sections are reported as the
  cause.

Under `lock_verdict`, a checker that could not decide ("unknown") makes the verdict
"unknown" unless another is False; under `fenced_verdict`, only the fencing checker can.
A checker that found nothing of its kind to check (``nothing_checked``: no critical
sections, no fences) abstains, and the others decide; when every checker abstains, or
there are no results at all, the verdict is "unknown". Nothing checked is never valid:
under `fenced_verdict`, a run in which no write reached the resource is "unknown" too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lockcheck.exitcodes import merge_valid
from lockcheck.registry import load
from lockcheck.workloads.registry import WORKLOADS

Verdict = Callable[[dict[str, dict[str, Any]]], tuple[object, str]]

MUTEX = "mutual-exclusion"
FENCING = "fencing"
LEASE = "lease-safety"
LINEARIZABLE = "linearizable"
HIDDEN_GRANTS = "hidden-grants"
# the checkers of the lock itself: any of them failing is a failure of the lock
LOCK_CHECKERS = (MUTEX, LEASE, LINEARIZABLE, HIDDEN_GRANTS)
LOCK_SET = "lock-set"
DEADLOCK = "deadlock"


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


def lock_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
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


def _lock_failures(results: dict[str, dict[str, Any]]) -> list[str]:
    """What each failed lock checker found (mutual exclusion, lease safety,
    linearizability): any of them failing makes a fenced run invalid too."""
    return [_failure(n, results[n]) for n in LOCK_CHECKERS
            if n in results and results[n].get("valid") is False]


def refusals(fe: dict[str, Any]) -> tuple[int, int]:
    """(saves, fence regressions): writes refused from a holder that had lost the lock,
    and writes of a current holder refused because the fences went backwards. Results
    written before the split count every refusal as a save."""
    saves = _count(fe, "saves")
    if "saves_stale_holder" in fe:
        return _count(fe, "saves_stale_holder"), _count(fe, "saves_regressed_fence")
    return saves, 0


def _resource_held(fe: dict[str, Any]) -> str:
    stale = _count(fe, "stale_accepted_count", "stale_accepted")
    saves, regressed = refusals(fe)
    text = (f"{_n(stale, 'stale write')} accepted, "
            f"{_n(saves, 'save')} (writes refused from a holder that had lost the lock)")
    if regressed:
        text += (f", {_n(regressed, 'fence regression')} (writes of a current holder "
                 "refused because the fence went backwards: lost work)")
    return text


def fenced_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    """The lock and the resource are both on trial: a lock checker that failed makes the
    run invalid, and the text says whether the resource held, failed too or could not
    refuse (no fence)."""
    lock = _lock_failures(results)
    lock_text = "; ".join(lock)
    fe = results.get(FENCING)
    if fe is None:
        if lock:
            return False, f"the lock failed (the resource was not checked): {lock_text}"
        return "unknown", "unknown: no fencing result, so nothing is known about the resource"
    context = [c for c in (None if lock else _overlaps(results.get(MUTEX)), _dups(fe)) if c]
    tail = "; " + "; ".join(context) if context else ""
    decisive = fe.get("resource_valid") if fe.get("valid") in (True, False) else "unknown"
    if decisive is False:
        if lock:
            return False, f"the lock and the resource failed: {lock_text}; " \
                          f"{_corruption(fe)}{tail}"
        return False, f"the resource failed: {_corruption(fe)}{tail}"
    accepted, saves = _count(fe, "accepted"), _count(fe, "saves")
    no_fence = not accepted and not saves and _count(fe, "unfenced_rejections") > 0
    if no_fence:
        nf = (f"no fence: the resource cannot refuse (it refused all "
              f"{_n(_count(fe, 'unfenced_rejections'), 'write')}, none carried a fence)")
        if lock:
            return False, f"the lock failed; {nf}: {lock_text}{tail}"
        valid, text = lock_verdict({n: r for n, r in results.items() if n != FENCING})
        return valid, f"{text}; {nf}"
    if decisive is not True:
        if lock:
            return False, f"the lock failed (the resource could not be checked): {lock_text}"
        return "unknown", _unknown_reason({FENCING: fe})
    if not accepted and not saves:
        if lock:
            return False, f"the lock failed (no write reached the resource): {lock_text}"
        return "unknown", "unknown: no write reached the resource, so it was not tested" + tail
    if lock:
        return False, f"the lock failed, the resource held: {lock_text}; " \
                      f"{_resource_held(fe)}{tail}"
    return True, f"resource safe: {_resource_held(fe)}{tail}"


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


def lock_set_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    return _decided_by(LOCK_SET, results)


def settlement_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    return _decided_by("settlement", results)


def leader_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    """The leader workload: the leadership checker decides (two leaders acting at once,
    a deposed leader's action accepted, a term gone backwards); overlapping critical
    sections are context (a leader paused past its lease is what elections must
    survive)."""
    return _decided_by("leadership", results)


def transfer_verdict(results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    """The transfer workload: liveness is what it puts on trial, so a deadlock cycle
    fails the run; the lock's checkers still decide safety on their own, and the text
    keeps the two apart (a deadlocked run whose locks were safe says so)."""
    dl = results.get(DEADLOCK)
    valid, text = lock_verdict({n: r for n, r in results.items() if n != DEADLOCK})
    if dl is None or dl.get("valid") not in (True, False):
        return valid, text
    if dl["valid"] is False:
        safety = "safety: " + text if valid is not False else text
        return False, f"deadlock (liveness): {dl.get('summary', 'a wait-for cycle')}; {safety}"
    return valid, f"{text}; {dl.get('summary', 'no deadlock')}"


def run_verdict(workload: str, results: dict[str, dict[str, Any]]) -> tuple[object, str]:
    """Combine checker results (by checker name) into (valid, one-line explanation), by
    the rule the workload names."""
    if not results:
        return "unknown", "unknown: no checker results"
    w = WORKLOADS.get(workload)
    if w is None:
        valid, text = lock_verdict(results)
        return valid, f"{text} (unknown workload {workload!r}: all checkers decide)"
    rule: Verdict = load(w.verdict)
    return rule(results)


def cut_short(results: dict[str, Any], why: str) -> None:
    """A run whose clients stopped before its end tried too little to show the lock
    safe: no violation found means unknown, not valid (a violation found stands). The
    reason is kept in the results (`cut_short`), so that a later `lockcheck check` of
    the run folder, which sees only the history, comes to the same verdict."""
    results["cut_short"] = why
    if results["valid"] is True:
        results["valid"] = "unknown"
        results["summary"] = f"{why}, so nothing is shown ({results['summary']} until then)"


def harness_failed(results: dict[str, Any], failure: str) -> None:
    """A run cut short by a harness error proves nothing: valid becomes unknown (a
    violation found before it stands). Kept as `failure` in the results."""
    results["failure"] = failure
    if results["valid"] is True:
        results["valid"] = "unknown"


def carry_run_facts(result: dict[str, Any], stored: dict[str, Any]) -> None:
    """What a run's controller knew and its history does not say (its clients all
    stopped early, the harness failed), from the run's stored results, applied to a
    new check of its history: `lockcheck check` of a run folder agrees with the run."""
    why = stored.get("cut_short")
    if isinstance(why, str):
        cut_short(result, why)
    failure = stored.get("failure")
    if isinstance(failure, str):
        harness_failed(result, failure)
