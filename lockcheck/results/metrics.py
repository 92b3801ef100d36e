"""The metrics to instrument a lock with, computed from a history with pandas.

`compute_metrics(ops, test)` is a pure function of the history and test.json. It
returns plain JSON data (`results.json["metrics"]`):

- `acquire`: attempts and their outcomes (ok, busy, failed, info = timed out or
  unfinished), `attempts_per_grant` (the contention rate) and `busy_share`;
- `acquire_latency_ms`: of granted acquires, invoke to ok; `attempt_latency_ms`: of
  every completed attempt (a refusal is quick, a timeout is slow);
- `hold_ms`: critical sections, `enter` to `exit` (open ones only counted);
- `renewals`: attempts, refusals (`not_owner`), other failures, `info`, failure rate;
- `expiries_while_working`: the correctness alarm. `lease_expired_exits` are exits in
  which the holder's own lease clock ran out while it worked; `outlived_lease` counts
  sections that were still open after the holder's lease clock (acquire invoke plus
  TTL(1 - drift), pushed on by each ok renew) had run out, whatever the holder
  noticed, with the overrun (the time spent inside with no valid lease by its own
  clock); a holder paused past its TTL shows up here; `worked_after_refusal` counts
  sections in which the holder went on after a renewal was refused (`not-owner`): a
  record of it on that lock, other than its exit or release, after the refusal;
- `availability`: the share of acquire attempts that were granted (`share`), the
  share the service answered definitely (`answered`: granted or busy, not an error
  or a timeout; a blocking acquire whose wait ran out while another process held the
  key counts as busy, as a try-lock's refusal does), and grants per second: overall,
  in the time with no fault active, and while each fault was active (by the attempt's
  invoke time; results/faults.py).

Percentiles are pandas' (linear interpolation between closest ranks). Latencies are
milliseconds, rounded to microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lockcheck.checker.intervals import Section, critical_sections
from lockcheck.history import Op, pair_ops
from lockcheck.results.faults import FaultWindow, fault_windows, merged
from lockcheck.results.leadership import leadership_metrics
from lockcheck.results.liveness import liveness_metrics

MS = 1_000_000
LOCK_FS = ("acquire", "renew", "release")


def _r(x: float | None, nd: int = 3) -> float | None:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return None
    return round(float(x), nd)


def distribution(values: pd.Series | Sequence[float]) -> dict[str, Any]:
    """count, p50, p95, p99, max, mean of a series (None where there is no data)."""
    s = pd.Series(values, dtype="float64").dropna()
    if s.empty:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    q = s.quantile([0.5, 0.95, 0.99])
    return {"count": int(s.size), "p50": _r(q.loc[0.5]), "p95": _r(q.loc[0.95]),
            "p99": _r(q.loc[0.99]), "max": _r(s.max()), "mean": _r(s.mean())}


def _ttl(value: Any) -> float:
    if isinstance(value, dict):
        t = value.get("ttl_ms")
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
            return float(t)
    return float("nan")


def lock_frame(ops: Sequence[Op]) -> pd.DataFrame:
    """One row per lock op (invoke + completion): f, key, process, worker, t0, t1 (ns;
    NaN when unfinished), type (ok/fail/info/unfinished), error, ttl_ms."""
    rows = []
    for p in pair_ops(ops):
        inv, done = p.invoke, p.complete
        if inv.f not in LOCK_FS or inv.process == "nemesis":
            continue
        rows.append((inv.f, inv.key, str(inv.process), inv.worker, inv.time,
                     done.time if done is not None else np.nan,
                     done.type if done is not None else "unfinished",
                     (done.error if done is not None else None) or "", _ttl(inv.value)))
    return pd.DataFrame(rows, columns=["f", "key", "process", "worker", "t0", "t1", "type",
                                       "error", "ttl_ms"])


# how a blocking acquire (etcd's Lock) says that its wait ran out without a grant
WAIT_ENDED = ("no grant in time",)


def mark_busy_waits(acq: pd.DataFrame, sections: Sequence[Section]) -> pd.DataFrame:
    """A blocking acquire whose wait ended without a grant while another process held
    the key was answered: the lock was busy. Its error becomes "busy" (as a try-lock's
    refusal is), so that contention is not counted as the service failing to answer."""
    waited = (acq["type"] == "fail") & acq["error"].str.startswith(WAIT_ENDED)
    if not waited.any():
        return acq
    held: dict[Any, list[tuple[int, float, str]]] = {}
    for s in sections:
        held.setdefault(s.key, []).append((s.start, math.inf if s.open else s.end,
                                           str(s.process)))
    busy = []
    for i, row in acq[waited].iterrows():
        if any(p != row["process"] and start < row["t1"] and row["t0"] < end
               for start, end, p in held.get(row["key"], ())):
            busy.append(i)
    out = acq.copy()
    out.loc[busy, "error"] = "busy"
    return out


def _in_spans(t: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Which times fall in one of the disjoint sorted [start, end) spans."""
    if not spans or t.size == 0:
        return np.zeros(t.shape, dtype=bool)
    starts = np.array([s for s, _ in spans], dtype="float64")
    ends = np.array([e for _, e in spans], dtype="float64")
    i = np.searchsorted(starts, t, side="right") - 1
    ok = i >= 0
    return ok & (t < ends[np.clip(i, 0, None)])


def _availability(acq: pd.DataFrame, mask: np.ndarray, seconds: float) -> dict[str, Any]:
    sub = acq[mask]
    n, ok = len(sub), int((sub["type"] == "ok").sum())
    busy = int(((sub["type"] == "fail") & (sub["error"] == "busy")).sum())
    return {"attempts": n, "ok": ok, "share": _r(ok / n, 4) if n else None,
            "answered": _r((ok + busy) / n, 4) if n else None, "busy": busy,
            "errors": int(((sub["type"] == "fail") & (sub["error"] != "busy")).sum()),
            "info": int(sub["type"].isin(["info", "unfinished"]).sum()),
            "seconds": _r(seconds, 3),
            "grants_per_s": _r(ok / seconds, 2) if seconds > 0 else None}


def availability(acq: pd.DataFrame, windows: Sequence[FaultWindow], span: tuple[int, int],
                 ) -> dict[str, Any]:
    """Overall, no-fault, and per fault name (each over the union of its windows)."""
    t = acq["t0"].to_numpy(dtype="float64")
    total_s = max(0, span[1] - span[0]) / 1e9
    every = merged(windows)
    faults: dict[str, Any] = {}
    for name in sorted({w.fault for w in windows}):
        spans = merged(w for w in windows if w.fault == name)
        entry = _availability(acq, _in_spans(t, spans), sum(e - s for s, e in spans) / 1e9)
        entry["windows"] = sum(1 for w in windows if w.fault == name)
        faults[name] = entry
    fault_s = sum(e - s for s, e in every) / 1e9
    return {"overall": _availability(acq, np.ones(t.shape, dtype=bool), total_s),
            "no_fault": _availability(acq, ~_in_spans(t, every), max(0.0, total_s - fault_s)),
            "faults": faults}


def _lease_overruns(ops: Sequence[Op], lock: pd.DataFrame, default_ttl: float,
                    drift: float) -> list[dict[str, Any]]:
    """Sections still open after the holder's own lease clock ran out, with the overrun."""
    ok = lock[lock["type"] == "ok"].sort_values("t1")
    grants: dict[tuple[str, Any], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    renews: dict[tuple[str, Any], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for (f, proc, key), g in ok.groupby(["f", "process", "key"], sort=False):
        if f not in ("acquire", "renew"):
            continue
        ttl = g["ttl_ms"].fillna(default_ttl).to_numpy()
        arrays = (g["t1"].to_numpy(), g["t0"].to_numpy(), ttl)
        (grants if f == "acquire" else renews)[(proc, key)] = arrays
    out = []
    for s in critical_sections(ops):
        k = (str(s.process), s.key)
        if k not in grants:
            continue
        t1, t0, ttl = grants[k]
        i = int(np.searchsorted(t1, s.start, side="right")) - 1
        if i < 0 or not np.isfinite(ttl[i]):
            continue
        until = t0[i] + ttl[i] * MS * (1 - drift)
        ran_out: float | None = None
        past = 0.0  # ns spent inside while the lease clock had run out
        if k in renews:
            r1, r0, rttl = renews[k]
            lo, hi = np.searchsorted(r1, [s.start, s.end], side="right")
            for j in range(int(lo), int(hi)):
                if r1[j] > until:  # this renewal came back after the lease had run out
                    ran_out = until if ran_out is None else ran_out
                    past += min(r1[j], s.end) - until
                if np.isfinite(rttl[j]):
                    until = max(until, r0[j] + rttl[j] * MS * (1 - drift))
        if s.end > until:
            ran_out = until if ran_out is None else ran_out
            past += s.end - until
        if ran_out is not None:
            out.append({"process": s.process, "key": s.key, "fence": s.fence, "start": s.start,
                        "end": s.end, "lease_ran_out": int(ran_out),
                        "overrun_ms": _r(past / MS),
                        "exit_reason": s.exit_reason if not s.open else "open"})
    return out


def worked_after_refusal(ops: Sequence[Op], sections: Sequence[Section]) -> list[dict[str, Any]]:
    """Sections whose holder went on after a renewal of its lock was refused: told the
    lock is gone, it must leave (a renewal thread that swallows the refusal does not)."""
    refused: dict[tuple[Any, str | None], list[int]] = {}
    went_on: dict[tuple[Any, str | None], list[int]] = {}
    for o in ops:
        k = (o.process, o.key)
        if o.f == "renew" and o.type == "fail" and o.error == "not-owner":
            refused.setdefault(k, []).append(o.time)
        elif o.f not in ("exit", "release", "enter") and o.type in ("invoke", "event"):
            went_on.setdefault(k, []).append(o.time)
    out = []
    for s in sections:
        k = (s.process, s.key)
        first = min((t for t in refused.get(k, ()) if s.start <= t <= s.end), default=None)
        if first is None:
            continue
        after = [t for t in went_on.get(k, ()) if first < t < s.end]
        if after:
            out.append({"process": s.process, "key": s.key, "fence": s.fence,
                        "refused": first, "records_after": len(after),
                        "kept_ms": _r((s.end - first) / MS)})
    return out


def compute_metrics(ops: Sequence[Op], test: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics of one history (see the module doc); JSON-able."""
    lock = lock_frame(ops)
    sections = critical_sections(ops)
    acq = mark_busy_waits(lock[lock["f"] == "acquire"], sections)
    ren = lock[lock["f"] == "renew"]
    windows = fault_windows(ops)
    times = [o.time for o in ops]
    span = (min(times), max(times)) if times else (0, 0)
    default_ttl = float(test.get("ttl_ms") or np.nan)
    drift = float(test.get("clock_drift", 0.01))

    done = acq[acq["type"] != "unfinished"]
    lat = (done["t1"] - done["t0"]) / MS
    granted = acq["type"] == "ok"
    attempts, grants = len(acq), int(granted.sum())
    busy = int(((acq["type"] == "fail") & (acq["error"] == "busy")).sum())

    closed = [(s.end - s.start) / MS for s in sections if not s.open]
    reasons: dict[str, int] = {}
    for s in sections:
        r = "open" if s.open else (s.exit_reason or "unknown")
        reasons[r] = reasons.get(r, 0) + 1

    r_fail = ren["type"] == "fail"
    not_owner = int((r_fail & (ren["error"] == "not-owner")).sum())
    r_info = int(ren["type"].isin(["info", "unfinished"]).sum())
    n_ren = len(ren)

    overruns = _lease_overruns(ops, lock, default_ttl, drift)
    by_reason: dict[str, int] = {}
    for o in overruns:
        by_reason[o["exit_reason"]] = by_reason.get(o["exit_reason"], 0) + 1

    return {
        "duration_s": _r((span[1] - span[0]) / 1e9),
        "ttl_ms": None if np.isnan(default_ttl) else default_ttl,
        "acquire": {
            "attempts": attempts, "ok": grants, "busy": busy,
            "failed": int((acq["type"] == "fail").sum()) - busy,
            "info": int((acq["type"] == "info").sum()),
            "unfinished": int((acq["type"] == "unfinished").sum()),
            "attempts_per_grant": _r(attempts / grants) if grants else None,
            "busy_share": _r(busy / attempts, 4) if attempts else None,
        },
        "acquire_latency_ms": distribution(lat[done["type"] == "ok"]),
        "attempt_latency_ms": distribution(lat),
        "hold_ms": {**distribution(closed), "open": sum(1 for s in sections if s.open)},
        "exit_reasons": dict(sorted(reasons.items())),
        "renewals": {
            "attempts": n_ren, "ok": int((ren["type"] == "ok").sum()),
            "not_owner": not_owner, "failed": int(r_fail.sum()) - not_owner, "info": r_info,
            "failure_rate": _r((int(r_fail.sum()) + r_info) / n_ren, 4) if n_ren else None,
        },
        "expiries_while_working": {
            "lease_expired_exits": reasons.get("lease-expired", 0),
            "not_owner_exits": reasons.get("not-owner", 0),
            "outlived_lease": len(overruns),
            "worked_after_refusal": len(kept := worked_after_refusal(ops, sections)),
            "worked_after_refusal_examples": kept[:20],
            "outlived_by_exit_reason": dict(sorted(by_reason.items())),
            "overrun_ms": distribution([o["overrun_ms"] for o in overruns]),
            "examples": sorted(overruns, key=lambda o: -(o["overrun_ms"] or 0))[:20],
        },
        "availability": availability(acq, windows, span),
        "faults": {"windows": len(windows),
                   "by_fault": {f: sum(1 for w in windows if w.fault == f)
                                for f in sorted({w.fault for w in windows})}},
        # operations that take several locks (transfer): throughput, time in deadlock
        **({"liveness": live} if (live := liveness_metrics(ops)) is not None else {}),
        # elections (leader): changes of leader, time without one, stale actions
        **({"leadership": lead} if (lead := leadership_metrics(ops)) is not None else {}),
    }


def safe_metrics(ops: Sequence[Op], test: Mapping[str, Any]) -> dict[str, Any]:
    """compute_metrics, but a bug here must never cost a run its verdict."""
    try:
        return compute_metrics(ops, test)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
