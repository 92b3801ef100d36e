"""Hidden grants: a fence number that no acquire was told it got.

Some backends' fences count the grants of each lock name one by one: a counter that
goes up by 1 in the same atomic write as the grant (`Backend.fence_counts_grants`).
On such a backend every fence number from 1 up to the highest one granted went to
some acquire. A number that no `ok` acquire of the name got went to an acquire whose
outcome the history does not know (`info`: it may have been applied) or to one the
client was told had failed (`fail`): a grant nobody knows about. Its fence is used up,
the lock is held by nobody's lease until it expires, and the history says something
that did not happen (a client library that retries a grant whose reply was lost, and
is refused by its own first attempt, says "busy").

Per lock name, a missing fence `f` (below the highest granted one) happened before the
grant of the next fence above it, so it is *explained* by an `info` acquire of that
name invoked before that grant completed; each `info` acquire explains at most one
missing fence. The matching is greedy by deadline (every acquire that can explain a
missing fence can explain every later one, so taking the earliest missing fences first
leaves the fewest unexplained). What is left is a *hidden grant*: named with its gap
(the granted fences around it, the missing numbers) and the `fail` acquires of the name
whose time overlaps the window between those two grants, the suspects.

A fence that repeats or goes backwards is the fencing checker's business, not this
one's: only the distinct fence values granted are compared. A backend that makes no
such promise (or a run with the user's own client, or a history without a backend)
gets `unknown` with `nothing_checked`: the checker abstains, it never passes by default.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.history import Op, Process, pair_ops

MAX_GAPS = 100
MAX_SUSPECTS = 20


def _fence(value: Any) -> int | None:
    v = value.get("fence") if isinstance(value, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(slots=True)
class _Acq:
    process: Process
    invoke_time: int
    time: int | None  # completion; None when the history ended first
    index: int
    error: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"process": self.process, "index": self.index,
                "invoke_time": self.invoke_time, "time": self.time, "error": self.error}


@dataclass(slots=True)
class _Key:
    grants: dict[int, list[_Acq]]  # fence -> the ok acquires that got it
    infos: list[int]  # invoke times of acquires whose outcome is unknown
    fails: list[_Acq]


def _collect(ops: list[Op]) -> dict[str, _Key]:
    keys: dict[str, _Key] = {}
    for p in pair_ops(ops):
        inv, done = p.invoke, p.complete
        if inv.f != "acquire" or not isinstance(inv.key, str) or inv.process == "nemesis":
            continue
        k = keys.setdefault(inv.key, _Key({}, [], []))
        kind = p.type
        if kind == "ok" and done is not None:
            fence = _fence(done.value)
            if fence is not None:
                k.grants.setdefault(fence, []).append(
                    _Acq(inv.process, inv.time, done.time, done.index))
        elif kind == "fail" and done is not None:
            k.fails.append(_Acq(inv.process, inv.time, done.time, done.index, done.error))
        elif kind == "info":
            k.infos.append(inv.time)
    return keys


def _gaps(key: str, k: _Key) -> list[dict[str, Any]]:
    """The unexplained missing fences of one name, grouped by the gap they are in."""
    granted = sorted(f for f in k.grants if f >= 1)
    if not granted:
        return []
    # each missing fence with its deadline (the completion of the grant just above it)
    # and the fences around it
    missing: list[tuple[int, int, int, int]] = []  # (deadline, fence, lower, upper)
    lower = 0
    for f in granted:
        deadline = max(a.time or 0 for a in k.grants[f])
        missing.extend((deadline, m, lower, f) for m in range(lower + 1, f))
        lower = f
    infos = sorted(k.infos)
    used = 0
    hidden: list[tuple[int, int, int]] = []  # (fence, lower, upper)
    for deadline, m, lo, hi in sorted(missing):
        if used < bisect_right(infos, deadline - 1):  # an info invoked before it: explained
            used += 1
        else:
            hidden.append((m, lo, hi))
    out: list[dict[str, Any]] = []
    by_gap: dict[tuple[int, int], list[int]] = {}
    for m, lo, hi in hidden:
        by_gap.setdefault((lo, hi), []).append(m)
    for (lo, hi), fences in sorted(by_gap.items()):
        start = min(a.invoke_time for a in k.grants[lo]) if lo in k.grants else 0
        end = max(a.time or 0 for a in k.grants[hi])
        suspects = [a for a in k.fails
                    if a.invoke_time < end and (a.time is None or a.time > start)]
        suspects.sort(key=lambda a: (a.invoke_time, a.index))
        errors = sorted({a.error or "" for a in suspects})
        out.append({
            "key": key,
            "missing": sorted(fences),
            "unexplained": len(fences),
            "between": [lo or None, hi],
            "window": [start, end],
            "failed_acquire_count": len(suspects),
            "failed_acquires": [a.describe() for a in suspects[:MAX_SUSPECTS]],
            "failed_errors": errors,
            "message": (
                f"key {key!r}: fence{'s' if len(fences) > 1 else ''} "
                f"{', '.join(map(str, sorted(fences)))} granted to no acquire that was told "
                f"ok or may have been applied (between "
                f"{'the start' if not lo else f'fence {lo}'} and fence {hi}); "
                f"{len(suspects)} acquire(s) of {key!r} told failed in that window"
                + (f" ({', '.join(e or '?' for e in errors)})" if suspects else "")
            ),
        })
    return out


def check_hidden_grants(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    backend = opts.extra.get("backend")
    if not opts.extra.get("fence_counts_grants"):
        if not backend:
            why = "no backend known whose fence counts grants one by one"
        elif opts.extra.get("own_client"):
            why = (f"a client of its own on backend {backend}: nothing is known of how its "
                   "fences count grants")
        else:
            why = (f"backend {backend}'s fence does not count grants one by one, so a gap "
                   "in its fences proves nothing")
        return {"valid": "unknown", "summary": why, "nothing_checked": why,
                "applicable": False}
    keys = _collect(ops)
    gaps: list[dict[str, Any]] = []
    checked = 0
    explained = 0
    for key in sorted(keys):
        k = keys[key]
        granted = [f for f in k.grants if f >= 1]
        if not granted:
            continue
        checked += len(granted)
        key_gaps = _gaps(key, k)
        missing_total = max(granted) - len(set(granted))
        explained += missing_total - sum(g["unexplained"] for g in key_gaps)
        gaps.extend(key_gaps)
    count = sum(g["unexplained"] for g in gaps)
    result: dict[str, Any] = {
        "applicable": True,
        "backend": backend,
        "granted_fences": checked,
        "explained_by_info": explained,
        "hidden_grant_count": count,
        "gap_count": len(gaps),
        "gaps": gaps[:MAX_GAPS],
    }
    if count:
        first = gaps[0]
        result["valid"] = False
        result["summary"] = (
            f"{count} hidden grant(s): fences granted to acquires told they failed; first: "
            f"{first['message']}")
    elif not checked:
        why = "no ok acquire with a fence: no fence to count"
        result.update(valid="unknown", summary=why, nothing_checked=why)
    else:
        result["valid"] = True
        result["summary"] = (f"every fence up to the highest granted went to an ok acquire "
                             f"or one whose outcome was unknown ({explained} of those)")
    return result
