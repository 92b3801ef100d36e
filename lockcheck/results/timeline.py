"""The data behind the report's timeline: holders per key and worker, writes, faults,
and every violation the checkers reported, in compact columns for the page's script.

Times are integer microseconds since the test start (the page draws at any zoom; a
sub-millisecond overlap must stay visible). Each key gets one lane per worker that
ever held it (the OS-level worker, which keeps its lane when its process id changes
after an `info`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockcheck.checker.intervals import Section, critical_sections
from lockcheck.history import Op, pair_ops
from lockcheck.results.faults import FaultWindow

NEXT_SECTION_NS = 100_000_000  # a section this soon after a grant belongs to it
REASONS = ("done", "lease-expired", "not-owner", "error", "open", "other")
WRITE_ACCEPTED, WRITE_SAVE, WRITE_STALE = 0, 1, 2


def _us(ns: float) -> int:
    return int(ns // 1000)


def _lane_of(worker: int | None, process: Any) -> Any:
    return worker if worker is not None else process


def _fence(f: Any) -> str:
    return "no fence" if f is None else f"fence {f}"


def _lane_order(w: Any) -> tuple[int, int, str]:
    return (0, w, "") if isinstance(w, int) else (1, 0, str(w))


def _reason(s: Section) -> int:
    if s.open:
        return REASONS.index("open")
    r = s.exit_reason or "other"
    return REASONS.index(r) if r in REASONS else REASONS.index("other")


class _Index:
    """Finds the section a (process, key, time) belongs to: the one that contains the
    time, or (for a grant) the one that begins right after it."""

    def __init__(self, sections: Sequence[Section]) -> None:
        self.sections = sections
        self._by_pk: dict[tuple[Any, Any], list[tuple[int, int, int]]] | None = None

    def find(self, process: Any, key: Any, t: int) -> int | None:
        if self._by_pk is None:  # built on the first violation only: most runs have none
            self._by_pk = {}
            for i, s in enumerate(self.sections):
                self._by_pk.setdefault((s.process, s.key), []).append((s.start, s.end, i))
        after = None
        for start, end, i in self._by_pk.get((process, key), []):
            if start <= t <= end:
                return i
            if t < start <= t + NEXT_SECTION_NS and after is None:
                after = i  # a grant's own section begins just after its ok
        return after


def _violations(results: Mapping[str, Any], idx: _Index) -> list[dict[str, Any]]:
    checkers = results.get("checkers") or {}
    out: list[dict[str, Any]] = []

    def add(kind: str, key: Any, band: tuple[int, int] | None, marks: Sequence[int],
            secs: Sequence[int | None], text: str) -> None:
        """`secs`: the sections of the processes involved (older holder first)."""
        out.append({"kind": kind, "key": key,
                    "band": [_us(band[0]), _us(band[1])] if band else None,
                    "marks": [_us(m) for m in marks],
                    "secs": [s for s in secs if s is not None], "text": text})

    me = checkers.get("mutual-exclusion") or {}
    for v in me.get("violations") or []:
        (a0, _a1), (b0, _b1) = v.get("sections") or [[v["start"], v["end"]]] * 2
        pa, pb = (v.get("processes") or [None, None])[:2]
        fa, fb = (v.get("fences") or [None, None])[:2]
        add("overlap", v.get("key"), (v["start"], v["end"]), [],
            [idx.find(pa, v.get("key"), a0), idx.find(pb, v.get("key"), b0)],
            f"processes {pa} ({_fence(fa)}) and {pb} ({_fence(fb)}) both inside for "
            f"{(v['end'] - v['start']) / 1e6:.1f} ms")
    ls = checkers.get("lease-safety") or {}
    for v in ls.get("violations") or []:
        h, g = v.get("holder") or {}, v.get("granted") or {}
        key = v.get("key")
        add("lease", key, (g.get("ok_ns", 0), max(g.get("ok_ns", 0), h.get("valid_until_ns", 0))),
            [g.get("ok_ns", 0)],
            [idx.find(h.get("process"), key, h.get("ok_ns", 0)),
             idx.find(g.get("process"), key, g.get("ok_ns", 0) + 1)],
            f"process {g.get('process')} granted ({_fence(g.get('fence'))}) while process "
            f"{h.get('process')}'s lease ({_fence(h.get('fence'))}) was provably valid for "
            f"{(h.get('valid_until_ns', 0) - g.get('ok_ns', 0)) / 1e6:.1f} ms more")
    for v in ls.get("superseded_renewals") or []:
        r, by = v.get("renew") or {}, v.get("superseded_by") or {}
        key = v.get("key")
        ok, held = r.get("ok_ns", 0), (v.get("lease") or {}).get("fence")
        add("superseded-renewal", key, (min(by.get("ok_ns", ok), ok), ok), [ok],
            [idx.find(r.get("process"), key, r.get("invoke_ns", ok)),
             idx.find(by.get("process"), key, by.get("ok_ns", 0) + 1)],
            f"process {r.get('process')} renewed its lease ({_fence(held)}) after process "
            f"{by.get('process')} had been granted the lock ({_fence(by.get('fence'))}): "
            "the renewal brought a lapsed lease back")
    fe = checkers.get("fencing") or {}
    for v in fe.get("stale_accepted") or []:
        add("stale-write", v.get("key"), None, [v.get("time", 0)],
            [idx.find(v.get("process"), v.get("key"), v.get("time", 0))],
            f"the resource ACCEPTED a stale write: process {v.get('process')}'s fence "
            f"{v.get('fence')} after fence {v.get('max_accepted')}")
    for v in fe.get("interleaved_writes") or []:
        ov = v.get("overlap") or [0, 0]
        older, newer = v.get("older_write") or {}, v.get("newer_write") or {}
        pa, pb = (v.get("processes") or [None, None])[:2]
        add("interleaved", v.get("key"), (ov[0], ov[1]),
            [older.get("time", 0), newer.get("time", 0)],
            [idx.find(pa, v.get("key"), ov[0]), idx.find(pb, v.get("key"), ov[0])],
            f"older holder {pa} ({_fence((v.get('fences') or [None])[0])}) wrote after newer "
            f"holder {pb}: {v.get('late_writes')} write(s) overwrote the newer one's")
    for v in fe.get("duplicate_fences") or []:
        times = v.get("times") or []
        procs = v.get("processes") or []
        add("duplicate-fence", v.get("key"), None, times,
            [idx.find(p, v.get("key"), t + 1) for p, t in zip(procs, times, strict=False)],
            f"fence {v.get('fence')} granted twice (processes "
            f"{', '.join(str(p) for p in procs)})")
    le = checkers.get("leadership") or {}
    for v in le.get("deposed") or []:
        if v.get("accepted") is not True:  # refused: the store's save, not a violation
            continue
        succ, key, t = v.get("successor") or {}, v.get("key"), v.get("invoke", 0)
        add("deposed-leader", key, (succ.get("since", t), v.get("complete") or t), [t],
            [idx.find(v.get("process"), key, t),
             idx.find(succ.get("process"), key, succ.get("since", 0) + 1)],
            f"process {v.get('process')} acted with term {v.get('term')} after process "
            f"{succ.get('process')} was elected with term {succ.get('term')} and its own "
            "lease was over: the store accepted it")
    return out


def timeline_data(ops: Sequence[Op], results: Mapping[str, Any],
                  windows: Sequence[FaultWindow], fault_colors: Mapping[str, str],
                  sections: Sequence[Section] | None = None) -> dict[str, Any]:
    """Everything the page's timeline script draws (see static/report.js). `sections`
    saves recomputing the critical sections when the caller has them."""
    if sections is None:
        sections = critical_sections(ops)
    keys = sorted({s.key for s in sections if s.key is not None} |
                  {o.key for o in ops if o.key is not None and o.f == "write"})
    key_ix: dict[Any, int] = {k: i for i, k in enumerate(keys)}
    writes = [p for p in pair_ops(ops) if p.invoke.f == "write" and p.invoke.key in key_ix]
    # lanes sorted per key, so their order does not depend on who came first
    seen: dict[int, set[Any]] = {i: set() for i in range(len(keys))}
    for s in sections:
        if s.key is not None:
            seen[key_ix[s.key]].add(_lane_of(s.worker, s.process))
    for p in writes:
        seen[key_ix[p.invoke.key]].add(_lane_of(p.invoke.worker, p.invoke.process))
    lanes = [sorted(seen[k], key=_lane_order) for k in seen]
    lane_ix = {(k, w): n for k, ws in enumerate(lanes) for n, w in enumerate(ws)}

    cols: dict[str, list[Any]] = {c: [] for c in ("k", "l", "s", "e", "f", "r", "p")}
    kept = [s for s in sections if s.key is not None]
    for s in kept:
        cols["k"].append(key_ix[s.key])
        cols["l"].append(lane_ix[(key_ix[s.key], _lane_of(s.worker, s.process))])
        cols["s"].append(_us(s.start))
        cols["e"].append(_us(max(s.end, s.start)))
        cols["f"].append(s.fence)
        cols["r"].append(_reason(s))
        cols["p"].append(s.process)
    idx = _Index(kept)

    stale = {(v.get("process"), v.get("key"), v.get("fence"), v.get("time"))
             for v in ((results.get("checkers") or {}).get("fencing") or {}).get(
                 "stale_accepted") or []}
    wcols: dict[str, list[Any]] = {c: [] for c in ("k", "l", "t", "f", "st", "p")}
    for p in writes:
        done = p.complete
        if done is None or done.type == "info":
            continue
        v = done.value if isinstance(done.value, dict) else {}
        if done.type == "ok":
            st = WRITE_STALE if (p.invoke.process, p.invoke.key, done.fence,
                                 done.time) in stale else WRITE_ACCEPTED
        elif v.get("accepted") is False:
            st = WRITE_SAVE
        else:
            continue  # never reached the resource
        k = key_ix[p.invoke.key]
        wcols["k"].append(k)
        wcols["l"].append(lane_ix[(k, _lane_of(p.invoke.worker, p.invoke.process))])
        wcols["t"].append(_us(done.time))
        wcols["f"].append(done.fence if done.fence is not None else p.invoke.fence)
        wcols["st"].append(st)
        wcols["p"].append(p.invoke.process)

    names = sorted({w.fault for w in windows})
    t_end = max((o.time for o in ops), default=0)
    return {
        "t_end": _us(t_end),
        "keys": keys,
        "lanes": [[str(w) for w in ws] for ws in lanes],
        "reasons": list(REASONS),
        "secs": cols,
        "writes": wcols,
        "fault_names": names,
        "fault_colors": [fault_colors.get(n, "#999999") for n in names],
        "faults": [[_us(w.start), _us(w.end), names.index(w.fault), w.detail, w.closed]
                   for w in windows],
        "viols": _violations(results, idx),
    }
