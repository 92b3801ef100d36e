"""Mutual exclusion: no two processes inside the critical section of one key at once.

Sections come from `enter`/`exit` events (intervals.py). Two sections of the same key
overlap when the later start is strictly before the earlier end. A sweep per key keeps
the sections still inside in a heap by end time plus per-process/per-worker counters,
so the number of overlapping pairs is counted in O(n log n) even when it is quadratic;
only the first MAX_EXAMPLES pairs are materialized.

Pairs of sections of the same process are never reported (they cannot overlap by
construction). Pairs of different processes of the same `worker` (one OS process
that changed id after an `info`) cannot overlap in practice; if they do it is a
history artefact, reported as `self_overlaps` without failing the check.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Hashable
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.intervals import Section, critical_sections, group_by_key
from lockcheck.history import Op

MAX_EXAMPLES = 100


def overlap_record(a: Section, b: Section) -> dict[str, Any]:
    """A reported overlap; `a` entered first. Lists are [a, b]."""
    return {
        "key": b.key,
        "start": max(a.start, b.start),
        "end": min(a.end, b.end),
        "processes": [a.process, b.process],
        "workers": [a.worker, b.worker],
        "fences": [a.fence, b.fence],
        "exit_reasons": [a.exit_reason, b.exit_reason],
        "open": [a.open, b.open],
        "sections": [[a.start, a.end], [b.start, b.end]],
    }


def _same_worker(a: Section, b: Section) -> bool:
    return a.worker is not None and a.worker == b.worker


class _Sweep:
    """Overlapping pairs among the sections of one key, in (start, index) order."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.count = 0
        self.self_count = 0
        self.examples: list[dict[str, Any]] = []
        self.self_examples: list[dict[str, Any]] = []

    def run(self, sections: list[Section]) -> int:
        """Sweep one key's sections (sorted by start); returns this key's violation count."""
        before = self.count
        heap: list[tuple[int, int, Section]] = []
        active: dict[int, Section] = {}  # insertion order = start order
        by_p: Counter[Hashable] = Counter()
        by_w: Counter[Hashable] = Counter()
        by_pw: Counter[Hashable] = Counter()
        for n, s in enumerate(sections):
            while heap and heap[0][0] <= s.start:
                _, j, old = heapq.heappop(heap)
                del active[j]
                by_p[old.process] -= 1
                by_w[old.worker] -= 1
                by_pw[(old.process, old.worker)] -= 1
            if s.end <= s.start:
                continue  # an empty interval overlaps nothing
            # every active section started no later than s and ends after s.start
            same_p = by_p[s.process]
            if s.worker is not None:
                same_pw = by_pw[(s.process, s.worker)]
                n_self = by_w[s.worker] - same_pw
                n_viol = len(active) - (same_p + n_self)
            else:
                n_self = 0
                n_viol = len(active) - same_p
            self.count += n_viol
            self.self_count += n_self
            if (n_viol and len(self.examples) < self.cap) or (
                n_self and len(self.self_examples) < self.cap
            ):
                self._collect(active, s)
            heapq.heappush(heap, (s.end, n, s))
            active[n] = s
            by_p[s.process] += 1
            by_w[s.worker] += 1
            by_pw[(s.process, s.worker)] += 1
        return self.count - before

    def _collect(self, active: dict[int, Section], s: Section) -> None:
        for a in active.values():
            if a.process == s.process:
                continue
            if _same_worker(a, s):
                if len(self.self_examples) < self.cap:
                    self.self_examples.append(overlap_record(a, s))
            elif len(self.examples) < self.cap:
                self.examples.append(overlap_record(a, s))


def check_mutual_exclusion(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    """Check that no two processes were ever inside the same key's critical section.

    Result: {"valid", "sections", "open_sections", "violation_count", "violations"
    (first 100, see overlap_record), "keys" ({key: violations} for keys with any),
    "self_overlap_count", "self_overlaps" (first 100)}; plus "note" with no sections.
    """
    del opts  # nothing configurable
    sections = critical_sections(ops)
    sweep = _Sweep(MAX_EXAMPLES)
    keys: dict[str, int] = {}
    for key, secs in group_by_key(sections).items():
        n = sweep.run(secs)
        if n:
            keys["null" if key is None else key] = n
    result: dict[str, Any] = {
        "valid": sweep.count == 0,
        "sections": len(sections),
        "open_sections": sum(1 for s in sections if s.open),
        "violation_count": sweep.count,
        "violations": sweep.examples,
        "keys": keys,
        "self_overlap_count": sweep.self_count,
        "self_overlaps": sweep.self_examples,
    }
    if not sections:  # nothing was checked: that is not a pass
        why = "no critical sections (enter/exit events) in the history"
        result.update(valid="unknown", note=why, nothing_checked=why)
    return result
