"""Critical sections: the intervals during which a process believed it held a lock.

Built from the `enter`/`exit` events of the history (docs/history-format.md). Shared by
the mutual-exclusion and fencing checkers. Pure and O(n log n).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockcheck.history import Op, Process, sort_by_time


@dataclass(frozen=True, slots=True)
class Section:
    """One critical section of one process on one key.

    `[start, end]` in ns. `open` is True when no `exit` closed it: it then lasts until
    the process's last record in the history (or until the process entered the same
    key again), and `exit_reason` is None. `start_index`/`end_index` are the history
    indexes of the records that bound it (ties between equal times are broken by them).
    """

    process: Process
    worker: int | None
    key: str | None
    fence: int | None
    start: int
    end: int
    exit_reason: str | None
    open: bool
    start_index: int = -1
    end_index: int = -1

    def overlaps(self, other: Section) -> bool:
        """Strict overlap: touching intervals (one ends when the other starts) do not."""
        return max(self.start, other.start) < min(self.end, other.end)


def _worker(op: Op) -> int | None:
    return op.worker


def _reason(op: Op) -> str | None:
    v = op.value
    if isinstance(v, dict):
        r = v.get("reason")
        return r if isinstance(r, str) else None
    return None


def _section(enter: Op, end: int, end_index: int, reason: str | None, is_open: bool) -> Section:
    return Section(
        process=enter.process,
        worker=_worker(enter),
        key=enter.key,
        fence=enter.fence,
        start=enter.time,
        end=max(end, enter.time),
        exit_reason=reason,
        open=is_open,
        start_index=enter.index,
        end_index=end_index,
    )


def critical_sections(ops: Iterable[Op]) -> list[Section]:
    """Pair `enter`/`exit` events per (process, key) into sections, ordered by (start, index).

    - an `exit` without a pending `enter` is ignored;
    - an `enter` while the same (process, key) is already inside closes the earlier
      section at the new `enter` (open, no reason): the process never said it left;
    - an `enter` never followed by an `exit` lasts until the process's last record
      (any op of that process), `open=True`.
    """
    ordered = sort_by_time(ops)
    last: dict[Process, tuple[int, int]] = {}
    for op in ordered:  # time order, so the last assignment is the latest record
        last[op.process] = (op.time, op.index)

    pending: dict[tuple[Process, str | None], Op] = {}
    out: list[Section] = []
    for op in ordered:
        if op.type != "event":
            continue
        k = (op.process, op.key)
        if op.f == "enter":
            prev = pending.get(k)
            if prev is not None:
                out.append(_section(prev, op.time, op.index, None, True))
            pending[k] = op
        elif op.f == "exit":
            prev = pending.pop(k, None)
            if prev is not None:
                out.append(_section(prev, op.time, op.index, _reason(op), False))
    for (process, _key), enter in pending.items():
        t, i = last[process]
        out.append(_section(enter, t, i, None, True))
    out.sort(key=lambda s: (s.start, s.start_index))
    return out


def group_by_key(sections: Iterable[Section]) -> dict[str | None, list[Section]]:
    """Sections per key, each list keeping the input order; keys in a stable order."""
    groups: dict[str | None, list[Section]] = {}
    for s in sections:
        groups.setdefault(s.key, []).append(s)
    return {k: groups[k] for k in sorted(groups, key=lambda k: (k is None, k or ""))}
