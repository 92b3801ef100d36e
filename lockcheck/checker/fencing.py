"""Fencing: are tokens unique, and did the protected resource ever take a stale write?

Three questions, per key:

1. Tokens. Among `ok` acquires (by completion time), the same non-null fence granted
   twice is a violation (`duplicate_fences`). A fence lower than one already granted
   is a `regression` (what a lock server that lost its counter looks like): counted,
   not a violation by itself.
2. Resource writes, in the resource's own apply order (`seq`; completion time when a
   key's writes lack it). The highest accepted fence is recomputed here (the
   resource's `max_fence` is not trusted). An accepted write whose fence is not above
   it is `stale_accepted` (a violation); a rejected one is a `save` (the fence did its
   job). Saves are split by who was refused: a holder that had been superseded (another
   process entered the key's critical section after it, before the write:
   `saves_stale_holder`), or a holder nobody had superseded, refused because the lock
   service's fences went backwards (`saves_regressed_fence`: safe, but that work is lost).
3. Interleaved writes. For two overlapping critical sections of one key in different
   processes, A entered first and B (the newer holder) later: if A has an accepted
   write applied after one of B's accepted writes, the older holder overwrote the
   newer one (`interleaved_writes`, a violation). This catches lost updates even when
   there are no fences to compare.

`resource_valid` = no stale accepted writes and no interleaved writes;
`valid` = `resource_valid` and no duplicate fences.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.intervals import Section, critical_sections, group_by_key
from lockcheck.history import Op, Process, pair_ops

MAX_EXAMPLES = 100


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


@dataclass(slots=True)
class _Acquire:
    process: Process
    key: str | None
    fence: int
    time: int  # completion
    index: int
    invoke_time: int


@dataclass(slots=True)
class _Write:
    process: Process
    key: str | None
    fence: int | None
    seq: int | None
    reported_max: int | None
    accepted: bool
    invoke_time: int
    invoke_index: int
    time: int  # completion
    index: int
    rank: int = -1  # position in the key's apply order


@dataclass(slots=True)
class _Examples:
    cap: int = MAX_EXAMPLES
    count: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    all_refs: list[_Write] = field(default_factory=list)  # saves only: every write, uncapped

    def add(self, item: dict[str, Any]) -> None:
        self.count += 1
        if len(self.items) < self.cap:
            self.items.append(item)


@dataclass(slots=True)
class _Held:
    """A critical section with the ranks (apply order) of its accepted writes, sorted."""

    section: Section
    ranks: list[int]
    writes: list[_Write]


def _check_tokens(
    acquires: dict[str | None, list[_Acquire]], dups: _Examples, regressions: _Examples
) -> None:
    for key, acqs in acquires.items():
        acqs.sort(key=lambda a: (a.time, a.index))
        by_fence: dict[int, _Acquire] = {}
        top: _Acquire | None = None
        for a in acqs:
            prev = by_fence.get(a.fence)
            if prev is not None:
                dups.add(
                    {
                        "key": key,
                        "fence": a.fence,
                        "processes": [prev.process, a.process],
                        "times": [prev.time, a.time],
                        "invoke_times": [prev.invoke_time, a.invoke_time],
                    }
                )
            if top is not None and a.fence < top.fence:
                regressions.add(
                    {
                        "key": key,
                        "fence": a.fence,
                        "previous_max": top.fence,
                        "previous_process": top.process,
                        "process": a.process,
                        "time": a.time,
                    }
                )
            by_fence[a.fence] = a
            if top is None or a.fence > top.fence:
                top = a


def _order_writes(writes: list[_Write]) -> bool:
    """Sort one key's writes into the resource's apply order; True if by seq."""
    by_seq = all(w.seq is not None for w in writes)
    if by_seq:
        writes.sort(key=lambda w: (w.seq or 0, w.time, w.index))
    else:
        writes.sort(key=lambda w: (w.time, w.index))
    for rank, w in enumerate(writes):
        w.rank = rank
    return by_seq


def _write_ref(w: _Write) -> dict[str, Any]:
    return {"process": w.process, "fence": w.fence, "seq": w.seq, "time": w.time}


def _attribute(accepted: list[_Write], sections: list[Section]) -> tuple[dict[int, _Held], int]:
    """Attach accepted writes to the section of their process and key that contains the
    write's invoke. Returns {id(section): _Held} and the number of writes outside."""
    starts: dict[tuple[Process, str | None], list[tuple[int, int]]] = {}
    secs: dict[tuple[Process, str | None], list[Section]] = {}
    for s in sections:  # already in (start, index) order
        k = (s.process, s.key)
        starts.setdefault(k, []).append((s.start, s.start_index))
        secs.setdefault(k, []).append(s)
    held: dict[int, _Held] = {}
    outside = 0
    for w in accepted:
        k = (w.process, w.key)
        i = bisect_right(starts.get(k, []), (w.invoke_time, w.invoke_index)) - 1
        if i < 0 or w.invoke_time > secs[k][i].end:
            outside += 1
            continue
        s = secs[k][i]
        h = held.get(id(s))
        if h is None:
            h = held[id(s)] = _Held(s, [], [])
        h.writes.append(w)
    for h in held.values():
        h.writes.sort(key=lambda w: w.rank)
        h.ranks = [w.rank for w in h.writes]
    return held, outside


def _superseded(refused: list[_Write], sections: list[Section]) -> int:
    """How many refused writes came from a holder someone else had since replaced.

    The writer's section is the one of its process and key that contains the write's
    invoke; it was superseded if another process entered the key's critical section
    after that section began and no later than the write.
    """
    mine: dict[tuple[Process, str | None], list[Section]] = {}
    by_key: dict[str | None, list[Section]] = {}
    for s in sections:  # in (start, index) order
        mine.setdefault((s.process, s.key), []).append(s)
        by_key.setdefault(s.key, []).append(s)
    starts = {k: [s.start for s in v] for k, v in by_key.items()}
    own_starts = {k: [s.start for s in v] for k, v in mine.items()}
    count = 0
    for w in refused:
        own = mine.get((w.process, w.key), [])
        i = bisect_right(own_starts.get((w.process, w.key), []), w.invoke_time) - 1
        if i < 0:
            continue
        begin = own[i].start
        ks = starts.get(w.key, [])
        lo, hi = bisect_right(ks, begin), bisect_right(ks, w.invoke_time)
        if any(s.process != w.process for s in by_key[w.key][lo:hi]):
            count += 1
    return count


def _check_interleaved(sections: list[Section], held: dict[int, _Held], out: _Examples) -> int:
    """Sweep each key's sections that hold accepted writes; returns the number of
    distinct writes an older holder got accepted after a newer holder's write."""
    late_after: dict[int, int] = {}  # id(older section) -> lowest newer first rank
    for _key, secs in group_by_key(s for s in sections if id(s) in held).items():
        heap: list[tuple[int, int, _Held]] = []
        active: dict[int, _Held] = {}
        for n, s in enumerate(secs):
            while heap and heap[0][0] <= s.start:
                _, j, _old = heapq.heappop(heap)
                del active[j]
            b = held[id(s)]
            if s.end > s.start:
                first = b.ranks[0]
                for a in active.values():
                    sa = a.section
                    if sa.process == s.process or a.ranks[-1] <= first:
                        continue
                    late = a.writes[bisect_right(a.ranks, first)]
                    newer = b.writes[0]
                    out.add(
                        {
                            "key": s.key,
                            "processes": [sa.process, s.process],
                            "fences": [sa.fence, s.fence],
                            "seqs": [late.seq, newer.seq],
                            "late_writes": len(a.ranks) - bisect_right(a.ranks, first),
                            "older_write": _write_ref(late),
                            "newer_write": _write_ref(newer),
                            "overlap": [max(sa.start, s.start), min(sa.end, s.end)],
                        }
                    )
                    k = id(sa)
                    late_after[k] = min(late_after.get(k, first), first)
                heapq.heappush(heap, (s.end, n, b))
                active[n] = b
    return sum(len(held[k].ranks) - bisect_right(held[k].ranks, r) for k, r in late_after.items())


def check_fencing(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    """Check fence tokens and the protected resource's writes. See the module doc.

    Result: {"valid", "resource_valid", "stale_accepted", "stale_accepted_count",
    "interleaved_writes", "interleaved_count", "interleaved_write_count",
    "duplicate_fences", "duplicate_fence_count", "regressions", "regression_count",
    "saves", "save_examples", "accepted", "rejected", "unknown_writes",
    "failed_writes", "unexplained_rejections", "unfenced_rejections",
    "writes_outside_sections",
    "max_fence_mismatches", "keys_ordered_by_time", "acquisitions",
    "fenced_acquisitions"} (+ "note" when there is nothing to check). Lists hold at
    most 100 examples; the *_count / count fields are exact.
    """
    del opts  # the resource's mode is visible in the history itself
    acquires: dict[str | None, list[_Acquire]] = {}
    writes: dict[str | None, list[_Write]] = {}
    n_acq = n_unknown = n_failed = n_write_ops = 0
    for pair in pair_ops(ops):
        inv, done = pair.invoke, pair.complete
        if inv.f == "acquire":
            if done is not None and done.type == "ok":
                n_acq += 1
                fence = done.fence
                if fence is not None:
                    acquires.setdefault(inv.key, []).append(
                        _Acquire(inv.process, inv.key, fence, done.time, done.index, inv.time)
                    )
        elif inv.f == "write":
            n_write_ops += 1
            if done is None or done.type == "info":
                n_unknown += 1
                continue
            if done.type == "ok":
                accepted = True
            elif _get(done.value, "accepted") is False:
                accepted = False
            else:  # a fail that never reached the resource
                n_failed += 1
                continue
            fence = done.fence if done.fence is not None else inv.fence
            writes.setdefault(inv.key, []).append(
                _Write(
                    process=inv.process,
                    key=inv.key,
                    fence=fence,
                    seq=_int(_get(done.value, "seq")),
                    reported_max=_int(_get(done.value, "max_fence")),
                    accepted=accepted,
                    invoke_time=inv.time,
                    invoke_index=inv.index,
                    time=done.time,
                    index=done.index,
                )
            )

    dups, regressions = _Examples(), _Examples()
    _check_tokens(acquires, dups, regressions)

    stale, saves, interleaved = _Examples(), _Examples(), _Examples()
    n_accepted = n_rejected = unexplained = unfenced_rejected = mismatches = 0
    by_time: list[str | None] = []
    all_accepted: list[_Write] = []
    for key in sorted(writes, key=lambda k: (k is None, k or "")):
        ws = writes[key]
        if not _order_writes(ws):
            by_time.append(key)
        top: _Write | None = None  # the accepted write with the highest fence so far
        for w in ws:
            max_f = top.fence if top is not None else None
            if w.reported_max != max_f:
                mismatches += 1
            is_stale = max_f is not None and (w.fence is None or w.fence <= max_f)
            if w.accepted:
                n_accepted += 1
                all_accepted.append(w)
                if is_stale and top is not None:
                    stale.add(
                        {
                            "key": key,
                            **_write_ref(w),
                            "max_accepted": max_f,
                            "max_accepted_by": _write_ref(top),
                        }
                    )
                if w.fence is not None and (max_f is None or w.fence > max_f):
                    top = w
            else:
                n_rejected += 1
                if w.fence is None:
                    unfenced_rejected += 1  # a fenced resource refuses fence-less writes
                elif is_stale:
                    saves.add({"key": key, **_write_ref(w), "max_accepted": max_f})
                    saves.all_refs.append(w)
                else:
                    unexplained += 1

    sections = critical_sections(ops)
    superseded = _superseded(saves.all_refs, sections)
    held, outside = _attribute(all_accepted, sections)
    n_interleaved_writes = _check_interleaved(sections, held, interleaved)

    resource_valid = stale.count == 0 and interleaved.count == 0
    result: dict[str, Any] = {
        "valid": resource_valid and dups.count == 0,
        "resource_valid": resource_valid,
        "stale_accepted": stale.items,
        "stale_accepted_count": stale.count,
        "interleaved_writes": interleaved.items,
        "interleaved_count": interleaved.count,
        "interleaved_write_count": n_interleaved_writes,
        "duplicate_fences": dups.items,
        "duplicate_fence_count": dups.count,
        "regressions": regressions.items,
        "regression_count": regressions.count,
        "saves": saves.count,
        "saves_stale_holder": superseded,
        "saves_regressed_fence": saves.count - superseded,
        "save_examples": saves.items,
        "accepted": n_accepted,
        "rejected": n_rejected,
        "unknown_writes": n_unknown,
        "failed_writes": n_failed,
        "unexplained_rejections": unexplained,
        "unfenced_rejections": unfenced_rejected,
        "writes_outside_sections": outside,
        "max_fence_mismatches": mismatches,
        "keys_ordered_by_time": by_time,
        "acquisitions": n_acq,
        "fenced_acquisitions": sum(len(a) for a in acquires.values()),
    }
    if n_write_ops == 0 and not acquires:  # nothing was checked: that is not a pass
        why = ("no resource writes and no fence tokens in the history: nothing to check "
               "(a backend without fences, or the mutex workload)")
        result.update(valid="unknown", resource_valid="unknown", note=why, nothing_checked=why)
    return result
