"""Leadership: did two leaders act at once, did a deposed leader act, did a term go back?

For the `leader` workload (workloads/leader.py): a leader is a critical section (its
`enter` names the election, `key`, and the term, `fence`), and each of its actions is an
`act` op stamped with that term, sent to the term store (workloads/term_resource.py).
Pure, O(n log n) but for the pairs it reports. Per election:

1. Two leaders acting in the same interval (`split_brain`). A leader's acting span runs
   from the invoke of its first action that took effect (accepted, or of unknown
   outcome) to the completion of its last one. Two leaders whose spans overlap
   strictly acted in the same interval, by the history's one clock, as mutual exclusion
   judges critical sections. A refused action did not act, so a store that refuses
   stale terms keeps a deposed leader out of this count.
2. A deposed leader still acting (`deposed`). An action (whatever its outcome) invoked
   after another leader's term began (another process entered the election after this
   leader did) and after this leader's lease had certainly run out: its last ok
   acquire or renew completed at `c`, the service applied it no later, so the lease
   was over by `c + TTL / (1 - e)` (`e`: `CheckOptions.clock_drift`). Accepted ones are
   violations; refused ones are the store's saves; unknown ones are counted apart.
3. A term that went backwards: a leader elected with a lower term than an earlier
   leader of the election (`term_regressions`, by the enters' times), or an action
   accepted, in the store's own order (`seq`; completion time without it), with a term
   lower than one it had accepted before (`backwards_accepted`).

`valid` is False on any split brain, accepted deposed action, term regression or
backwards action; "unknown" (`nothing_checked`) when no action was recorded. Beside
the verdict it counts what reports show (`leadership_summary`): leadership changes,
the time without a leader, stale actions (a term below the store's highest, by the
store's reply) accepted and refused.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.intervals import Section, critical_sections
from lockcheck.history import Op, Process, pair_ops

MAX_EXAMPLES = 100
ACT = "act"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True, slots=True)
class Act:
    process: Process
    key: str | None
    term: int | None
    invoke: int  # ns
    complete: int | None  # ns; None: the history ended first
    accepted: bool | None  # None: unknown outcome (info, or no completion)
    seq: int | None
    max_term: int | None  # the store's highest term before it, as it replied
    index: int  # the invoke's

    def ref(self) -> dict[str, Any]:
        return {"process": self.process, "term": self.term, "invoke": self.invoke,
                "complete": self.complete, "accepted": self.accepted, "index": self.index}


def actions(ops: Iterable[Op]) -> list[Act]:
    """The `act` ops with their outcome; an action the store did not process (an error
    reply, nothing applied) is left out."""
    out = []
    for p in pair_ops(ops):
        inv = p.invoke
        if inv.f != ACT or inv.type != "invoke":
            continue
        c = p.complete
        v = c.value if c is not None and isinstance(c.value, dict) else {}
        term = _int((inv.value or {}).get("term")) if isinstance(inv.value, dict) else None
        if c is not None and c.type == "ok":
            accepted: bool | None = True
        elif c is not None and c.type == "fail":
            if v.get("accepted") is not False:
                continue  # not processed by the store
            accepted = False
        else:
            accepted = None
        out.append(Act(inv.process, inv.key, term, inv.time,
                       c.time if c is not None else None, accepted,
                       _int(v.get("seq")), _int(v.get("max_term")), inv.index))
    out.sort(key=lambda a: (a.invoke, a.index))
    return out


def _lease_ends(ops: Sequence[Op], default_ttl: int | None,
                drift: float) -> dict[tuple[Process, str | None], list[tuple[int, float]]]:
    """Per (process, key): (completion time, time the lease was certainly over) of each
    ok acquire and renew, in time order."""
    ends: dict[tuple[Process, str | None], list[tuple[int, float]]] = {}
    for p in pair_ops(ops):
        inv, c = p.invoke, p.complete
        if inv.f not in ("acquire", "renew") or c is None or c.type != "ok":
            continue
        ttl = _int(inv.value.get("ttl_ms")) if isinstance(inv.value, dict) else None
        ttl = ttl or default_ttl
        if not ttl:
            continue
        ends.setdefault((inv.process, inv.key), []).append(
            (c.time, c.time + ttl * 1e6 / max(1e-9, 1.0 - drift)))
    for v in ends.values():
        v.sort()
    return ends


@dataclass(slots=True)
class _Span:
    leader: tuple[Process, int | None]
    start: int
    end: int


def _split_brain(acts: list[Act], end_of_history: int) -> list[dict[str, Any]]:
    spans: dict[tuple[Process, int | None], _Span] = {}
    for a in acts:
        if a.accepted is False:
            continue
        who = (a.process, a.term)
        end = a.complete if a.complete is not None else end_of_history
        s = spans.get(who)
        if s is None:
            spans[who] = _Span(who, a.invoke, end)
        else:
            s.start, s.end = min(s.start, a.invoke), max(s.end, end)
    found: list[dict[str, Any]] = []
    active: list[_Span] = []
    for s in sorted(spans.values(), key=lambda s: s.start):
        active = [o for o in active if o.end > s.start]
        for o in active:
            found.append({"leaders": [{"process": o.leader[0], "term": o.leader[1]},
                                      {"process": s.leader[0], "term": s.leader[1]}],
                          "from": s.start, "to": min(o.end, s.end)})
        active.append(s)
    return found


def _deposed(acts: list[Act], sections: list[Section],
             leases: dict[tuple[Process, str | None], list[tuple[int, float]]]
             ) -> list[dict[str, Any]]:
    """`sections` of one election, in (start, index) order."""
    starts = [s.start for s in sections]
    own: dict[Process, list[Section]] = {}
    for s in sections:
        own.setdefault(s.process, []).append(s)
    own_starts = {p: [s.start for s in v] for p, v in own.items()}
    cert_times = {k: [c[0] for c in v] for k, v in leases.items()}
    out = []
    for a in acts:
        i = bisect_right(own_starts.get(a.process, []), a.invoke) - 1
        if i < 0:
            continue
        mine = own[a.process][i]
        lo, hi = bisect_right(starts, mine.start), bisect_left(starts, a.invoke)
        successor = next((s for s in sections[lo:hi] if s.process != a.process), None)
        if successor is None:
            continue
        j = bisect_right(cert_times.get((a.process, a.key), []), a.invoke) - 1
        if j < 0:
            continue
        lease_over = leases[(a.process, a.key)][j][1]
        if lease_over >= a.invoke:
            continue
        out.append({**a.ref(), "lease_over_by": int(lease_over),
                    "successor": {"process": successor.process, "term": successor.fence,
                                  "since": successor.start}})
    return out


def _term_regressions(sections: list[Section]) -> list[dict[str, Any]]:
    out = []
    top: Section | None = None
    for s in sections:  # in (start, index) order
        if s.fence is None:
            continue
        if top is not None and top.fence is not None and s.fence < top.fence:
            out.append({"process": s.process, "term": s.fence, "since": s.start,
                        "previous": {"process": top.process, "term": top.fence}})
        if top is None or (top.fence is not None and s.fence > top.fence):
            top = s
    return out


def _backwards(acts: list[Act]) -> list[dict[str, Any]]:
    accepted = [a for a in acts if a.accepted and a.term is not None]
    if all(a.seq is not None for a in accepted):
        accepted.sort(key=lambda a: (a.seq or 0, a.index))
    else:
        accepted.sort(key=lambda a: (a.complete or 0, a.index))
    out = []
    top: int | None = None
    for a in accepted:
        assert a.term is not None
        if top is not None and a.term < top:
            out.append({**a.ref(), "highest_before": top})
        top = a.term if top is None else max(top, a.term)
    return out


def _lease_over(leases: dict[tuple[Process, str | None], list[tuple[int, float]]],
                s: Section) -> int:
    """When the lease of section `s` was certainly over, by its last ok acquire or renew
    before its end (its end when there is none)."""
    certs = leases.get((s.process, s.key), [])
    j = bisect_right([c[0] for c in certs], s.end) - 1
    # its own acquire completed just before its enter, so the last one before its end
    # is one of its own
    return int(certs[j][1]) if j >= 0 else s.end


def _leaderless_ns(sections: list[Section], lo: int, hi: int) -> int:
    """Time in `[lo, hi]` with no leader."""
    gap, reach = 0, lo
    for s in sorted(sections, key=lambda s: s.start):
        if s.start > reach:
            gap += min(s.start, hi) - reach
        reach = max(reach, s.end)
        if reach >= hi:
            return gap
    return gap + max(0, hi - reach)


def leadership_summary(ops: Sequence[Op], drift: float = 0.01) -> dict[str, Any]:
    """The leadership metrics of a history, summed over its elections: terms, changes
    of leader, time without one (ms), actions, and stale actions (a term below the
    store's highest) accepted and refused. Each election is measured from its first
    action to its last, so the run's start and its recovery phase (which takes the
    lock once, acting never) do not count as time without a leader."""
    acts = actions(ops)
    span: dict[str | None, tuple[int, int]] = {}
    for a in acts:
        lo, hi = span.get(a.key, (a.invoke, a.invoke))
        span[a.key] = (min(lo, a.invoke), max(hi, a.complete or a.invoke))
    by_key: dict[str | None, list[Section]] = {}
    for s in critical_sections(ops):
        if s.key in span and s.end > span[s.key][0] and s.start < span[s.key][1]:
            by_key.setdefault(s.key, []).append(s)
    leases = _lease_ends(ops, None, drift)
    changes, leaderless = 0, 0
    for key, (lo, hi) in span.items():
        secs = by_key.get(key, [])
        changes += sum(1 for a, b in pairwise(secs) if a.process != b.process)
        # a leader leads until it steps down or its lease is certainly over, whichever
        # is first: a leader paused past its lease does not fill the gap
        tenures = [replace(s, end=min(s.end, _lease_over(leases, s))) for s in secs]
        leaderless += _leaderless_ns(tenures, lo, hi)
    stale = [a for a in acts if a.term is not None and a.max_term is not None
             and a.term < a.max_term]
    return {"leaders": sum(len(v) for v in by_key.values()),
            "leadership_changes": changes,
            "leaderless_ms": round(leaderless / 1e6, 3),
            "actions": len(acts),
            "stale_accepted": sum(1 for a in stale if a.accepted),
            "stale_refused": sum(1 for a in stale if a.accepted is False)}


def _cap(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return items[:MAX_EXAMPLES]


def check_leadership(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    acts = actions(ops)
    if not acts:
        return {"valid": "unknown", "nothing_checked": "no leader acted"}
    sections = critical_sections(ops)
    leases = _lease_ends(ops, opts.ttl_ms, opts.clock_drift)
    end = max((o.time for o in ops), default=0)
    split, deposed, regress, back = [], [], [], []
    keys = sorted({a.key for a in acts}, key=lambda k: (k is None, k or ""))
    for key in keys:
        k_acts = [a for a in acts if a.key == key]
        k_secs = [s for s in sections if s.key == key]
        split += [{"key": key, **x} for x in _split_brain(k_acts, end)]
        deposed += [{"key": key, **x} for x in _deposed(k_acts, k_secs, leases)]
        regress += [{"key": key, **x} for x in _term_regressions(k_secs)]
        back += [{"key": key, **x} for x in _backwards(k_acts)]
    dep_ok = [d for d in deposed if d["accepted"] is True]
    dep_refused = [d for d in deposed if d["accepted"] is False]
    dep_unknown = [d for d in deposed if d["accepted"] is None]
    valid = not (split or dep_ok or regress or back)
    parts = []
    if split:
        parts.append(f"{len(split)} time(s) two leaders acted at once")
    if dep_ok:
        parts.append(f"{len(dep_ok)} action(s) of a deposed leader accepted")
    if regress:
        parts.append(f"{len(regress)} leader(s) elected with a lower term")
    if back:
        parts.append(f"{len(back)} action(s) accepted with a term that went backwards")
    if valid:
        parts.append(f"one leader at a time: {len(acts)} actions, "
                     f"{len(dep_refused)} of a deposed leader refused")
    return {
        "valid": valid,
        "summary": "; ".join(parts),
        **leadership_summary(ops),
        "split_brain_count": len(split), "split_brain": _cap(split),
        "deposed_count": len(deposed), "deposed_accepted_count": len(dep_ok),
        "deposed_refused_count": len(dep_refused),
        "deposed_unknown_count": len(dep_unknown), "deposed": _cap(deposed),
        "term_regression_count": len(regress), "term_regressions": _cap(regress),
        "backwards_accepted_count": len(back), "backwards_accepted": _cap(back),
    }
