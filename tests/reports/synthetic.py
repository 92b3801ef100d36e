"""A synthetic run folder: a simulated lease-lock service under faults, written with the
project's own HistoryWriter and checked with its own checkers.

For the report tests and the report benchmark (`benchmarks/bench_report.py`): it
makes every thing a report draws, at any size, in a second or two and without a
cluster: grants and busy refusals, renewals, holds; a `kill` that restarts the
service empty (its fences go back to 1: duplicate fences, overlapping holders, and
writes the fence rejects); a `partition` that times requests out (`info`, the
process is retired); and a `client-pause` of a holder just before its write, the
classic GC pause (its lease runs out, another client takes the lock, and its late
write is rejected by a fenced resource, or accepted by an unfenced one). Faults are
recorded the old way (kill: no `fault` field) and the new way (`fault`, `targets`).
"""

from __future__ import annotations

import heapq
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.checker.analyze import analyze
from lockcheck.history import HistoryWriter, read_history
from lockcheck.results import store

MS = 1_000_000


@dataclass
class _Worker:
    n: int
    process: int
    key: str | None = None
    fence: int | None = None
    hold_end: int = 0
    next_renew: int = 0
    lease_until: int = 0
    stall_until: int = 0  # a client pause: resumes then and writes at once


class Sim:
    def __init__(self, *, workers: int, keys: int, ttl_ms: int, fenced: bool, resource: str,
                 seed: int) -> None:
        self.rng = random.Random(seed)
        self.w = [_Worker(i, i) for i in range(workers)]
        self.concurrency = workers
        self.keys = [f"k{i}" for i in range(keys)]
        self.ttl = ttl_ms * MS
        self.fenced, self.resource = fenced, resource
        self.rows: list[dict[str, Any]] = []
        self.holder: dict[str, tuple[int, int]] = {}  # key -> (process, expires)
        self.counter = dict.fromkeys(self.keys, 0)
        self.max_fence: dict[str, int | None] = dict.fromkeys(self.keys)
        self.seq = dict.fromkeys(self.keys, 0)
        self.down = False
        self.cut: set[int] = set()  # workers partitioned away

    def rec(self, t: int, w: _Worker, type_: str, f: str, key: str | None, value: Any,
            error: str | None = None) -> None:
        row = {"time": t, "process": w.process, "type": type_, "f": f, "key": key,
               "value": value, "worker": w.n}
        if error:
            row["error"] = error
        self.rows.append(row)

    def nemesis(self, t: int, f: str, value: Any) -> None:
        self.rows.append({"time": t - 1000, "process": "nemesis", "type": "invoke", "f": f,
                          "key": None, "value": None})
        self.rows.append({"time": t, "process": "nemesis", "type": "info", "f": f, "key": None,
                          "value": value})

    def lat(self) -> int:
        return int(self.rng.lognormvariate(-1.0, 0.5) * MS) + 50_000

    def release(self, t: int, w: _Worker) -> int:
        assert w.key is not None
        key, dt = w.key, self.lat()
        self.rec(t, w, "invoke", "release", key, {"fence": w.fence})
        h = self.holder.get(key)
        if h is not None and h[0] == w.process and not self.down:
            del self.holder[key]
            self.rec(t + dt, w, "ok", "release", key, {"fence": w.fence})
        else:
            self.rec(t + dt, w, "fail", "release", key, {"fence": w.fence}, "not-owner")
        w.key = None
        return t + dt + int(self.rng.uniform(5, 30) * MS)

    def exit(self, t: int, w: _Worker, reason: str) -> int:
        self.rec(t, w, "event", "exit", w.key, {"fence": w.fence, "reason": reason})
        return self.release(t + 20_000, w)

    def write(self, t: int, w: _Worker) -> int:
        key, dt = w.key, self.lat()
        assert key is not None
        self.rec(t, w, "invoke", "write", key, {"fence": w.fence})
        mx = self.max_fence[key]
        self.seq[key] += 1
        accepted = self.resource == "unfenced" or mx is None or (w.fence or 0) > mx
        v = {"fence": w.fence, "accepted": accepted, "seq": self.seq[key], "max_fence": mx}
        if accepted:
            if mx is None or (w.fence or 0) > mx:
                self.max_fence[key] = w.fence
            self.rec(t + dt, w, "ok", "write", key, v)
        else:
            self.rec(t + dt, w, "fail", "write", key, v, "stale-fence")
        return t + dt + 10_000

    def step(self, t: int, w: _Worker) -> int:
        """Do the worker's next action at t; return when it acts next."""
        if w.key is None:
            return self.acquire(t, w)
        if w.stall_until > t:
            return w.stall_until
        if w.stall_until:  # woke from a pause: the write it was about to make goes out
            w.stall_until = 0
            t = self.write(t, w) if self.fenced else t
            return self.exit(t, w, "done")
        if t >= w.lease_until:
            return self.exit(t, w, "lease-expired")
        if t >= w.hold_end:
            if self.fenced:
                t = self.write(t, w)
            return self.exit(t, w, "done")
        if t >= w.next_renew:
            return self.renew(t, w)
        return min(w.hold_end, w.next_renew, w.lease_until)

    def acquire(self, t: int, w: _Worker) -> int:
        key, dt = self.rng.choice(self.keys), self.lat()
        self.rec(t, w, "invoke", "acquire", key, {"ttl_ms": self.ttl // MS})
        if w.n in self.cut:
            self.rec(t + self.ttl // 4, w, "info", "acquire", key, None, "timeout")
            w.process += self.concurrency
            return t + self.ttl // 4 + 20 * MS
        if self.down:
            self.rec(t + dt, w, "fail", "acquire", key, None, "connection refused")
            return t + dt + 20 * MS
        h = self.holder.get(key)
        if h is not None and h[1] > t:
            self.rec(t + dt, w, "fail", "acquire", key, None, "busy")
            return t + dt + int(self.rng.uniform(5, 30) * MS)
        self.counter[key] += 1
        fence = self.counter[key]
        self.holder[key] = (w.process, t + self.ttl)
        w.key, w.fence = key, fence
        self.rec(t + dt, w, "ok", "acquire", key, {"fence": fence})
        self.rec(t + dt + 10_000, w, "event", "enter", key, {"fence": fence})
        w.lease_until = t + int(self.ttl * 0.99)
        w.hold_end = t + dt + int(self.rng.uniform(50, 500) * MS)
        w.next_renew = t + self.ttl // 3
        return min(w.hold_end, w.next_renew)

    def renew(self, t: int, w: _Worker) -> int:
        key, dt = w.key, self.lat()
        assert key is not None
        self.rec(t, w, "invoke", "renew", key, {"ttl_ms": self.ttl // MS, "fence": w.fence})
        w.next_renew = t + self.ttl // 3
        if w.n in self.cut:
            # the outcome is unknown: the section ends (its exit under the process that
            # entered), and the worker releases under a new process id, as the real one
            t += self.ttl // 4
            self.rec(t, w, "info", "renew", key, {"fence": w.fence}, "timeout")
            self.rec(t + 10_000, w, "event", "exit", key, {"fence": w.fence,
                                                            "reason": "indefinite"})
            w.process += self.concurrency
            return self.release(t + 20_000, w)
        h = self.holder.get(key)
        if h is None or h[0] != w.process or h[1] <= t or self.down:
            self.rec(t + dt, w, "fail", "renew", key, {"fence": w.fence}, "not-owner")
            return self.exit(t + dt + 10_000, w, "not-owner")
        self.holder[key] = (w.process, t + self.ttl)
        self.rec(t + dt, w, "ok", "renew", key, {"fence": w.fence})
        w.lease_until = t + int(self.ttl * 0.99)
        # not before the renew's own completion: a process has one op in flight
        return max(t + dt, min(w.hold_end, w.next_renew, w.lease_until))

    def fault(self, t: int, kind: str) -> int:
        """Start a fault at t; returns when it ends (and ends it then, via heal)."""
        if kind == "kill":
            self.down = True
            self.nemesis(t, "kill", {"nodes": ["n1"]})
            return t + 150 * MS
        if kind == "partition":
            self.cut = set(self.rng.sample(range(len(self.w)), max(1, len(self.w) // 3)))
            names = [f"c{i}" for i in sorted(self.cut)]
            self.nemesis(t, "start-partition", {"fault": "partition", "targets": names,
                                                "sides": [["n1"], names], "kind": "clients"})
            return t + 1500 * MS
        holders = [w for w in self.w if w.key is not None and not w.stall_until]
        victim = self.rng.choice(holders) if holders else self.w[0]
        victim.stall_until = t + 2 * self.ttl
        victim.hold_end = max(victim.hold_end, t)
        self.nemesis(t, "pause-client", {"fault": "client-pause", "targets": [f"c{victim.n}"],
                                         "key": victim.key})
        return victim.stall_until

    def heal(self, t: int, kind: str) -> None:
        if kind == "kill":
            self.down = False
            self.holder.clear()  # restarted empty: every lease and counter gone
            self.counter = dict.fromkeys(self.keys, 0)
            self.nemesis(t, "restart", {"nodes": ["n1"]})
        elif kind == "partition":
            self.cut = set()
            self.nemesis(t, "stop-partition", {"fault": "partition", "healed": ["n1"]})
        else:
            self.nemesis(t, "resume-client", {"fault": "client-pause"})

    def run(self, n_ops: int, interval_ms: int) -> list[dict[str, Any]]:
        heap = [(i * 3 * MS, w.n) for w in self.w for i in [w.n]]
        heapq.heapify(heap)
        kinds = ["kill", "client-pause", "partition"]
        next_fault, fault_end, active = interval_ms * MS, 0, ""
        n = 0
        while len(self.rows) < n_ops:
            t, i = heapq.heappop(heap)
            if active and t >= fault_end:
                self.heal(fault_end, active)
                active, next_fault = "", fault_end + interval_ms * MS
            if not active and t >= next_fault:
                active = kinds[n % len(kinds)]
                n += 1
                fault_end = self.fault(next_fault, active)
            heapq.heappush(heap, (max(self.step(t, self.w[i]), t + 1), i))
        if active:
            self.heal(fault_end, active)
        return self.rows


def make_run(run_dir: Path, *, ops: int = 5000, workers: int = 10, keys: int = 10,
             workload: str = "fenced", resource: str = "fenced", seed: int = 7,
             interval_ms: int = 2000, ttl_ms: int = 1000, backend: str = "synthetic",
             nemesis: tuple[str, ...] = ("kill", "client-pause", "partition")) -> Path:
    """A complete run folder (test.json, history.jsonl, results.json) of about `ops` ops.

    `nemesis` only labels the run in test.json; the history always has all three faults.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    sim = Sim(workers=workers, keys=keys, ttl_ms=ttl_ms, fenced=workload == "fenced",
              resource=resource, seed=seed)
    rows = sorted(sim.run(ops, interval_ms), key=lambda r: r["time"])
    t0 = rows[0]["time"]
    writer = HistoryWriter(run_dir / store.HISTORY)
    for r in rows:
        writer.append({**r, "time": r["time"] - t0 + 1000})
    writer.close()
    test = {"backend": backend, "workload": workload, "resource": resource,
            "nemesis": list(nemesis), "nodes": 1,
            "concurrency": workers, "keys": keys, "ttl_ms": ttl_ms, "clock_drift": 0.01,
            "time_limit": round((rows[-1]["time"] - t0) / 1e9, 1), "seed": seed,
            "name": f"{backend}-{workload}-{'+'.join(nemesis)}",
            "started": "2026-12-01T12:00:00+0000",
            "versions": {"lockcheck": "test", "simulator": "tests/reports/synthetic.py"}}
    (run_dir / store.TEST).write_text(json.dumps(test, indent=2) + "\n")
    results = analyze(read_history(run_dir / store.HISTORY), test)
    store.write_json(run_dir / store.RESULTS, results)
    return run_dir
