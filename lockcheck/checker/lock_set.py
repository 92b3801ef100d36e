"""lock-set: is every acknowledged add in the final set? (Jepsen's set checker.)

The `lock-set` workload adds one element per critical section to an unprotected set,
by reading it, holding the lock, and writing it back with the element added
(`workloads/lock_set.py`). The store's last word decides: the `final-state` event it
records when it stops, after every client has stopped, with each set's elements:

* an `ok` add whose element is missing is **lost** (a violation): another holder's
  write, based on a read taken before this add applied, replaced the set. Each lost
  element is named with its add (index, process) and, when the store's versions show
  it, the add that erased it: the first acknowledged write after it that had read an
  older version.
* an add whose outcome is unknown (`info`, or never completed) may or may not be
  there; either is fine (counted as `indeterminate`, and how many of them made it).
* an element in the final set that no add ever tried, or whose add certainly failed
  (`fail`), is **unexpected** (a violation: the store invented or kept what it was
  told was refused).

No final state (the run was killed before the store could stop): unknown, never valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.history import Op, Pair, pair_ops

MAX_EXAMPLES = 100


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class _Add:
    element: Any
    pair: Pair

    @property
    def type(self) -> str:
        return self.pair.type

    @property
    def version(self) -> int | None:
        return _int(_get(self.pair.complete.value, "version")) if self.pair.complete else None

    @property
    def read_version(self) -> int | None:
        return _int(_get(self.pair.invoke.value, "read_version"))

    def describe(self) -> dict[str, Any]:
        c = self.pair.complete
        return {"element": self.element, "process": self.pair.invoke.process,
                "index": (c or self.pair.invoke).index, "time": (c or self.pair.invoke).time,
                "version": self.version, "read_version": self.read_version}


def _eraser(lost: _Add, adds: list[_Add]) -> _Add | None:
    """The first acknowledged write after `lost` (by version) that had read a version
    older than the one `lost` wrote: it replaced the set without `lost`'s element."""
    v = lost.version
    if v is None:
        return None
    later = [a for a in adds if a.type == "ok" and a.version is not None and a.version > v
             and a.read_version is not None and a.read_version < v]
    return min(later, key=lambda a: a.version or 0) if later else None


def check_lock_set(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    adds: dict[str, list[_Add]] = {}
    for pair in pair_ops(ops):
        inv, key = pair.invoke, pair.invoke.key
        if key is not None and inv.f == "add":
            adds.setdefault(key, []).append(_Add(_get(inv.value, "element"), pair))
    finals: dict[str, list[Any]] | None = None  # None: the store never said
    for o in ops:  # the last final state counts; a name it does not list was never written
        sets = _get(o.value, "sets") if o.type == "event" and o.f == "final-state" else None
        if isinstance(sets, dict):
            finals = {k: v["elements"] for k, v in sets.items()
                      if isinstance(v, dict) and isinstance(v.get("elements"), list)}
    lost: list[dict[str, Any]] = []
    unexpected: list[dict[str, Any]] = []
    unread = sorted(k for k, a in adds.items() if a) if finals is None else []
    counts = {"acknowledged": 0, "indeterminate": 0, "indeterminate_present": 0, "failed": 0}
    per_key: dict[str, dict[str, int]] = {}
    for key in sorted(set(adds) | set(finals or {})):
        key_adds = adds.get(key, [])
        present = set(map(_hashable, finals.get(key, []))) if finals is not None else None
        k_lost = 0
        for a in key_adds:
            if a.type == "ok":
                counts["acknowledged"] += 1
                if present is not None and _hashable(a.element) not in present:
                    k_lost += 1
                    erased_by = _eraser(a, key_adds)
                    lost.append({"key": key, **a.describe(),
                                 "erased_by": erased_by.describe() if erased_by else None})
            elif a.type == "fail":
                counts["failed"] += 1
            else:
                counts["indeterminate"] += 1
                if present is not None and _hashable(a.element) in present:
                    counts["indeterminate_present"] += 1
        if present is not None:
            tried = {_hashable(a.element) for a in key_adds if a.type != "fail"}
            for e in sorted(present - tried, key=repr):
                why = ("its add failed" if e in {_hashable(a.element) for a in key_adds}
                       else "never added")
                unexpected.append({"key": key, "element": e, "why": why})
        per_key[key] = {"adds": len(key_adds), "lost": k_lost,
                        "final_size": len(present) if present is not None else -1}
    if lost or unexpected:
        valid: object = False
    elif unread:
        valid = "unknown"
    else:
        valid = True
    result: dict[str, Any] = {
        "valid": valid, **counts, "lost_count": len(lost), "lost": lost[:MAX_EXAMPLES],
        "unexpected_count": len(unexpected), "unexpected": unexpected[:MAX_EXAMPLES],
        "keys": per_key, "unread_keys": unread,
    }
    result["summary"] = summary(result)
    return result


def _hashable(e: Any) -> Any:
    return e if not isinstance(e, (list, dict)) else repr(e)


def summary(r: dict[str, Any]) -> str:
    if r["lost_count"] or r["unexpected_count"]:
        parts = []
        if r["lost_count"]:
            ex = r["lost"][0]
            by = ex.get("erased_by")
            how = (f", erased by process {by['process']}'s add (index {by['index']}) "
                   f"that had read version {by['read_version']}") if by else ""
            parts.append(f"lost updates: {r['lost_count']} of {r['acknowledged']} "
                         f"acknowledged adds lost "
                         f"(first: {ex['key']} element {ex['element']!r} of process "
                         f"{ex['process']}, index {ex['index']}{how})")
        if r["unexpected_count"]:
            parts.append(f"{r['unexpected_count']} unexpected elements in the final sets")
        return "; ".join(parts)
    if r["unread_keys"]:
        return ("no final state of the sets (the store never stopped?): cannot tell "
                "what was lost")
    if not r["acknowledged"]:
        return "no add was acknowledged"
    return (f"set intact: all {r['acknowledged']} acknowledged adds present; "
            f"{r['indeterminate_present']} of {r['indeterminate']} uncertain adds made it")
