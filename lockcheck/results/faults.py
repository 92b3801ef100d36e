"""Fault windows: when each fault the nemesis injected was in effect, and on whom.

A nemesis `info` completion of a start f opens a window; the next `info` of the
matching stop f closes it. New histories name the fault and its targets in the value
(`{"fault": "partition", "targets": [...]}`), and faults may overlap, so windows are
paired by that name when it is there, and by the f table below for older histories.
A fault name this module has never heard of is still shown, generically: an f of the
form `start-X`/`stop-X` pairs by itself, a known stop word closes the open window of
its fault, and anything else is a zero-length window (an instant event), as is a start
that failed (its value carries `error`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lockcheck.history import Op

# f -> (fault, role) for histories that do not carry "fault" in the value
LEGACY = {
    "start-partition": ("partition", "start"),
    "stop-partition": ("partition", "stop"),
    "kill": ("kill", "start"),
    "restart": ("kill", "stop"),
    "pause": ("pause", "start"),
    "resume": ("pause", "stop"),
}
STOP_WORDS = frozenset({"restart", "resume", "heal", "recover", "stop", "reset", "end"})


@dataclass(frozen=True, slots=True)
class FaultWindow:
    fault: str  # the nemesis name: partition, kill, pause, client-pause, ...
    start: int  # ns since test start (the start's info completion)
    end: int  # ns; the end of the history when it was never stopped
    targets: tuple[str, ...]
    detail: str  # a short human description of what was done to whom
    closed: bool = True

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / 1e9

    def to_json(self) -> dict[str, Any]:
        return {"fault": self.fault, "start": self.start, "end": self.end,
                "targets": list(self.targets), "detail": self.detail, "closed": self.closed}


def _names(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else []


def _targets(value: Any) -> tuple[tuple[str, ...], str]:
    """(targets, detail) from a nemesis completion's value, old or new shape."""
    if not isinstance(value, dict):
        return (), "" if value is None else str(value)[:80]
    sides = value.get("sides")
    targets = _names(value.get("targets")) or _names(value.get("nodes"))
    parts: list[str] = []
    if isinstance(sides, list) and sides:
        side_names = [_names(s) for s in sides]
        targets = targets or [n for s in side_names for n in s]
        parts.append(" | ".join(" ".join(s) for s in side_names))
    elif targets:
        parts.append(" ".join(targets))
    for k, v in value.items():
        if k in ("fault", "targets", "nodes", "sides") or isinstance(v, (dict, list)):
            continue
        parts.append(f"{k} {v}")
    return tuple(targets), ", ".join(parts)


def classify(op: Op) -> tuple[str, str]:
    """(fault name, role) of a nemesis completion; role is start, stop or instant."""
    v = op.value if isinstance(op.value, dict) else {}
    named = v.get("fault") if isinstance(v.get("fault"), str) else None
    if op.f in LEGACY:
        fault, role = LEGACY[op.f]
        return named or fault, role
    if op.f.startswith("start-"):
        return named or op.f[6:], "start"
    if op.f.startswith("stop-"):
        return named or op.f[5:], "stop"
    if named is not None:
        return named, "stop" if op.f in STOP_WORDS else "toggle"
    return op.f, "instant"


def fault_windows(ops: Iterable[Op]) -> list[FaultWindow]:
    """Every fault window of a history, ordered by start."""
    ops = list(ops)
    end_of_history = max((o.time for o in ops), default=0)
    nemesis = sorted((o for o in ops if o.process == "nemesis" and o.type == "info"),
                     key=lambda o: (o.time, o.index))
    open_: dict[str, list[Op]] = {}  # fault -> its open starts, oldest first
    out: list[FaultWindow] = []

    def close(start: Op, end: int, fault: str, closed: bool) -> None:
        targets, detail = _targets(start.value)
        out.append(FaultWindow(fault, start.time, max(end, start.time), targets, detail, closed))

    for op in nemesis:
        fault, role = classify(op)
        if role == "toggle":
            role = "stop" if open_.get(fault) else "start"
        if role == "start" and isinstance(op.value, dict) and "error" in op.value:
            role = "instant"  # a start that failed opened nothing
        if role == "start":
            open_.setdefault(fault, []).append(op)
        elif role == "stop":
            starts = open_.get(fault)
            if starts:
                close(starts.pop(0), op.time, fault, True)
        else:
            close(op, op.time, fault, True)
    for fault, starts in open_.items():
        for s in starts:
            close(s, end_of_history, fault, False)
    out.sort(key=lambda w: (w.start, w.end, w.fault))
    return out


def merged(windows: Iterable[FaultWindow]) -> list[tuple[int, int]]:
    """The union of windows as sorted, disjoint [start, end) intervals (instants dropped)."""
    spans = sorted((w.start, w.end) for w in windows if w.end > w.start)
    out: list[tuple[int, int]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out
