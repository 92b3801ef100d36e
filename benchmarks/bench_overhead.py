"""Benchmark: what recording the history costs the client loop.

    sudo .venv/bin/python benchmarks/bench_overhead.py              # 60 s, 2 s phases
    sudo .venv/bin/python benchmarks/bench_overhead.py --seconds 120 --phase 3

One cluster (one Redis node, `--clients` client namespaces), one run, one set of
worker processes (`lockcheck.workloads.worker`: backend `redis`, workload `mutex`, hold
0, the default backoff, `--keys` lock names), which record in turns
(`WorkerConfig.record_phase_s`): every `--phase` seconds they switch between

* **recorded**, lockcheck's own path: each op a JSON line on the worker's stdout; the
  controller's intake (`lockcheck/intake.py`, set up as `lockcheck test` sets it up,
  with the live observers) appends it to a `history.jsonl`;
* **bare**: the same calls, counted in memory, nothing written or sent.

So both modes run in the same processes, on the same connections, against the same
Redis, and the machine's load (shared with other work) moves little within a pair of
phases. The rate is ok acquires per second in each phase (after a warm-up), from the
history's times or the workers' own counts; the result is the median over phases of
recorded / bare, each recorded phase against the mean of the bare phases on either
side. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lockcheck.cluster.netns import LocalCluster
from lockcheck.cluster.state import Registry
from lockcheck.db.redis import RedisDB
from lockcheck.history import HistoryWriter
from lockcheck.nemesis.client_pause import Holders
from lockcheck.results.progress import LiveStats
from lockcheck.runner import WORKER_MODULE, WorkerHandle, history_intake
from lockcheck.spec import TestSpec
from lockcheck.workloads.api import default_keys
from lockcheck.workloads.worker import AlternatingRecorder, WorkerConfig

BUCKET_NS = AlternatingRecorder.BUCKET_NS


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(a: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    spec = TestSpec(concurrency=a.clients, keys=a.keys, hold_ms=(0, 0))
    with LocalCluster(1, a.clients, Registry()) as cluster:
        db = RedisDB(spec)
        try:
            db.setup(cluster)
            history = out_dir / "history.jsonl"
            writer = HistoryWriter(history)
            stats, holders = LiveStats(), Holders()
            # as `lockcheck test` sets it up for mutex: no resource, no writes to look for
            intake = history_intake(writer, stats, holders, writes=False)
            intake.start()
            t0 = time.monotonic_ns()
            workers = []
            for i, host in enumerate(cluster.clients):
                keep = out_dir / f"worker-{i}.unsent"  # as `lockcheck test` gives it
                cfg = WorkerConfig(
                    worker=i, process_stride=spec.process_stride, backend="redis",
                    workload="mutex", client_config=db.client_config(),
                    keys=default_keys(spec.keys).names, ttl_ms=spec.ttl_ms, hold_ms=(0, 0), seed=1,
                    t0_ns=t0, op_timeout_s=spec.op_timeout_s, record_phase_s=a.phase,
                    keep_path=str(keep))
                d = host.spawn(f"worker-{i}",
                               [sys.executable, "-P", "-m", WORKER_MODULE, cfg.to_json()],
                               log_path=out_dir / f"worker-{i}.log",
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                workers.append(WorkerHandle(i, host.name, d, intake, host.name, keep))
            cpu0 = time.process_time()
            pids = {"workers": [w.daemon.pid for w in workers],
                    "redis-server": [s.daemon.pid for s in db.servers.values()
                                     if s.daemon is not None],
                    "controller": [os.getpid()]}
            ticks = cpu_by_phase(pids, t0, a.phase, time.monotonic_ns() + int(a.seconds * 1e9))
            cpu = time.process_time() - cpu0
            for w in workers:
                w.ask_to_stop()
            for w in workers:
                w.daemon.wait(10)
                w.drained(10)
            intake.close()
            writer.close()
        finally:
            db.teardown()
    phase_ns = int(a.phase * 1e9)
    per_phase: dict[int, int] = {}
    busy: dict[int, int] = {}
    lines = 0
    with history.open() as fh:
        for line in fh:
            lines += 1
            for kind, counts in (('"type": "ok", "f": "acquire"', per_phase),
                                 ('"type": "fail", "f": "acquire"', busy)):
                if kind in line:
                    p = json.loads(line)["time"] // phase_ns
                    counts[p] = counts.get(p, 0) + 1
    for i in range(a.clients):
        last = json.loads((out_dir / f"worker-{i}.log").read_text().strip().splitlines()[-1])
        for name, counts in (("unrecorded_acquires", per_phase), ("unrecorded_busy", busy)):
            for b, n in last[name].items():
                p = int(b) * BUCKET_NS // phase_ns
                counts[p] = counts.get(p, 0) + n
    return {"per_phase": per_phase, "busy": busy, "history_lines": lines,
            "controller_cpu_s": cpu, "ticks": ticks}


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process (all its threads), in clock ticks; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def cpu_by_phase(pids: dict[str, list[int]], t0: int, phase_s: float,
                 until_ns: int) -> dict[str, dict[int, int]]:
    """Sleep until `until_ns`, reading each class's CPU ticks at every phase boundary:
    class -> phase -> ticks spent in it."""
    phase_ns = int(phase_s * 1e9)
    out: dict[str, dict[int, int]] = {c: {} for c in pids}
    last = {c: sum(cpu_ticks(p) for p in ps) for c, ps in pids.items()}
    p = (time.monotonic_ns() - t0) // phase_ns
    while True:
        edge = t0 + (p + 1) * phase_ns
        if edge > until_ns:
            time.sleep(max(0.0, (until_ns - time.monotonic_ns()) / 1e9))
            return out
        time.sleep(max(0.0, (edge - time.monotonic_ns()) / 1e9))
        for c, ps in pids.items():
            now = sum(cpu_ticks(q) for q in ps)
            out[c][p], last[c] = now - last[c], now
        p += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--phase", type=float, default=2.0, help="seconds per phase")
    ap.add_argument("--warmup-phases", type=int, default=2)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--keys", type=int, default=10)
    a = ap.parse_args()
    # the last phase is cut short by the stop
    counted = int(a.seconds / a.phase) - 1 - a.warmup_phases if a.phase > 0 else 0
    if counted < 5:
        print(f"bench_overhead: {a.seconds:g} s in phases of {a.phase:g} s leaves "
              f"{max(counted, 0)} phases after the warm-up; it needs at least 5 (two recorded "
              "ones, each between bare ones)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench_overhead needs root (it creates network namespaces)", file=sys.stderr)
        return 254
    print(f"load average before: {loadavg()}; {a.clients} clients, {a.keys} keys, one Redis, "
          f"hold 0, backoff 5-30 ms after a busy lock; {a.seconds:g} s in phases of "
          f"{a.phase:g} s (odd phases recorded)")
    with tempfile.TemporaryDirectory(prefix="lockcheck-bench-") as tmp:
        m = measure(a, Path(tmp))
    last = int(a.seconds / a.phase) - 1  # the last phase is cut short by the stop
    rate = {p: n / a.phase for p, n in m["per_phase"].items() if a.warmup_phases <= p < last}
    bare = [r for p, r in sorted(rate.items()) if p % 2 == 0]
    rec = [r for p, r in sorted(rate.items()) if p % 2 == 1]
    ratios = [100 * rate[p] / ((rate[p - 1] + rate[p + 1]) / 2) for p in sorted(rate)
              if p % 2 == 1 and p - 1 in rate and p + 1 in rate]
    print(f"phases: bare {', '.join(f'{r:.0f}' for r in bare)} ok acquires/s")
    print(f"        recorded {', '.join(f'{r:.0f}' for r in rec)} ok acquires/s")
    print(f"median ok acquires/s: bare {statistics.median(bare):.0f}, recorded "
          f"{statistics.median(rec):.0f}; recorded / neighbouring bare phases: median "
          f"{statistics.median(ratios):.0f} % (quartiles "
          f"{', '.join(f'{q:.0f}' for q in statistics.quantiles(ratios, n=4))}); "
          "target: at least 95 %")
    contention = {mode: statistics.median(
        m["busy"].get(p, 0) / max(1, m["per_phase"].get(p, 0)) for p in rate if p % 2 == odd)
        for mode, odd in (("bare", 0), ("recorded", 1))}
    print(f"busy acquires per ok acquire: bare {contention['bare']:.3f}, recorded "
          f"{contention['recorded']:.3f}")
    print(f"history: {m['history_lines']} lines; controller CPU {m['controller_cpu_s']:.1f} s "
          f"in {a.seconds:g} s")
    # CPU per ok acquire, from each class's ticks in the phases counted above (less noisy
    # than the rates when other work shares the machine)
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    for mode, odd in (("bare", 0), ("recorded", 1)):
        phases = [p for p in rate if p % 2 == odd]
        oks = sum(m["per_phase"].get(p, 0) for p in phases)
        per = {c: tick_us * sum(t.get(p, 0) for p in phases) / max(1, oks)
               for c, t in m["ticks"].items()}
        print(f"CPU per ok acquire, {mode}: " + ", ".join(f"{c} {us:.0f} us"
                                                          for c, us in per.items()))
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
