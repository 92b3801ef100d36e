"""Benchmark of the vertical slice: cluster up/down, harness throughput, detection rate.

    sudo .venv/bin/python benchmarks/bench_slice.py            # everything (~5 min)
    sudo .venv/bin/python benchmarks/bench_slice.py --runs 3   # fewer detection runs
    sudo .venv/bin/python benchmarks/bench_slice.py --only cluster,throughput

Three measurements, printed as tables:

1. cluster up / down, per backend: a LocalCluster with the backend's default nodes (for
   redis 1 and 5) plus 10 client namespaces and the backend's database set up until it
   serves ("up"), then every server stopped and the cluster removed ("down"); the
   median of 5 (and min/max).
2. throughput: `lockcheck test --nemesis none --hold-ms 0 --concurrency 10 --keys 10
   --time-limit 10` against one Redis node. ops/s = history lines of type ok, fail or
   info per second of history (first to last record); acquisitions/s = `ok` acquires
   per second.
3. detection: 10 runs of `lockcheck test --nemesis kill --time-limit 20` (the mutex
   workload, defaults otherwise); each run's verdict and mutual-exclusion violation
   count, and how many found the violation (target 10/10).

Needs root, redis-server and iptables (as `lockcheck test`). The load average is
printed before and after: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

THROUGHPUT_ARGS = ["--nemesis", "none", "--hold-ms", "0", "--concurrency", "10", "--keys", "10",
                   "--time-limit", "10"]
DETECTION_ARGS = ["--nemesis", "kill", "--time-limit", "20"]


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    cells = [tuple(str(c) for c in r) for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# -- 1. cluster up / down -----------------------------------------------------------------


def cluster_cycle(backend: str, n_nodes: int, n_clients: int) -> tuple[float, float]:
    """One cluster of `backend`: (seconds until it serves, seconds to remove it all)."""
    from lockcheck.backends import BACKENDS
    from lockcheck.cluster.netns import LocalCluster
    from lockcheck.cluster.state import Registry
    from lockcheck.spec import TestSpec

    db = BACKENDS[backend].make_db(TestSpec(backend=backend, nodes=n_nodes, nemesis=()))
    return up_down(LocalCluster(n_nodes, n_clients, Registry(), kind="test"), db)


def up_down(c: Any, db: Any) -> tuple[float, float]:
    """(seconds until `db` serves on cluster `c`, seconds to stop it and remove `c`)."""
    t0 = time.perf_counter()
    try:
        c.up()
        db.setup(c)  # returns once the whole ensemble serves (an active probe)
        t_up = time.perf_counter() - t0
    finally:
        t1 = time.perf_counter()
        db.teardown()
        c.down()
        t_down = time.perf_counter() - t1
    return t_up, t_down


def bench_cluster(repeat: int, backends: list[str]) -> list[tuple[Any, ...]]:
    from lockcheck.backends import BACKENDS

    rows: list[tuple[Any, ...]] = []
    for name in backends:
        sizes = [BACKENDS[name].default_nodes]
        if name == "redis":
            sizes = [1, 5]
        for n_nodes in sizes:
            ups, downs = [], []
            for _ in range(repeat):
                u, d = cluster_cycle(name, n_nodes, 10)
                ups.append(u)
                downs.append(d)
            rows.append((name, f"{n_nodes} + 10 clients",
                         f"{statistics.median(ups):.2f}", f"{min(ups):.2f}-{max(ups):.2f}",
                         f"{statistics.median(downs):.2f}", f"{min(downs):.2f}-{max(downs):.2f}"))
            print(f"  {name} {n_nodes}+10: up {[round(x, 2) for x in ups]} "
                  f"down {[round(x, 2) for x in downs]}", flush=True)
    return rows


# -- running lockcheck test ---------------------------------------------------------------


def lockcheck_test(args: list[str], results: Path) -> tuple[int, Path, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "lockcheck.cli", "test", *args,
                        "--results-dir", str(results)],
                       cwd=results.parent, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    run_dir = None
    for line in r.stderr.splitlines():
        if line.startswith("results: "):
            run_dir = Path(line.removeprefix("results: ").strip())
    if r.returncode not in (0, 1, 2) or run_dir is None:
        sys.exit(f"lockcheck test {' '.join(args)} failed (exit {r.returncode}):\n"
                 f"{r.stderr[-3000:]}")
    return r.returncode, run_dir, wall


def history(run_dir: Path) -> list[dict[str, Any]]:
    with (run_dir / "history.jsonl").open() as fh:
        return [json.loads(x) for x in fh]


# -- 2. throughput ------------------------------------------------------------------------


def bench_throughput(results: Path) -> list[tuple[Any, ...]]:
    code, run_dir, wall = lockcheck_test(THROUGHPUT_ARGS, results)
    ops = history(run_dir)
    times = [o["time"] for o in ops]
    span = (max(times) - min(times)) / 1e9
    completions = [o for o in ops if o["type"] in ("ok", "fail", "info")]
    acquired = [o for o in completions if o["f"] == "acquire" and o["type"] == "ok"]
    by_type = {t: sum(o["type"] == t for o in completions) for t in ("ok", "fail", "info")}
    print(f"  throughput run: exit {code}, {len(ops)} history lines, {span:.2f}s of history, "
          f"completions {by_type}, wall {wall:.1f}s, {run_dir}", flush=True)
    return [("ops/s (ok+fail+info)", f"{len(completions) / span:.0f}",
             f"{len(completions)} in {span:.2f}s"),
            ("acquisitions/s (ok acquire)", f"{len(acquired) / span:.0f}",
             f"{len(acquired)} in {span:.2f}s"),
            ("history lines/s (all types)", f"{len(ops) / span:.0f}", f"{len(ops)}"),
            ("verdict", {0: "valid", 1: "INVALID", 2: "unknown"}[code], f"exit {code}")]


# -- 3. detection -------------------------------------------------------------------------


def bench_detection(results: Path, runs: int) -> tuple[list[tuple[Any, ...]], int]:
    rows: list[tuple[Any, ...]] = []
    found = 0
    for i in range(runs):
        code, run_dir, wall = lockcheck_test(DETECTION_ARGS, results)
        res = json.loads((run_dir / "results.json").read_text())
        me = res["checkers"].get("mutual-exclusion", {})
        fe = res["checkers"].get("fencing", {})
        hit = me.get("valid") is False
        found += hit
        seed = json.loads((run_dir / "test.json").read_text())["seed"]
        row = (i + 1, {0: "valid", 1: "INVALID", 2: "unknown"}[code], me.get("violation_count"),
               fe.get("duplicate_fence_count"), res["stats"]["faults"], f"{wall:.1f}", seed)
        print(f"  run {i + 1}: {row[1]}, {row[2]} overlaps, {row[3]} duplicate fences, "
              f"{row[4]} kills, {row[5]}s", flush=True)
        rows.append(row)
    return rows, found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="detection runs [10]")
    ap.add_argument("--repeat", type=int, default=5, help="cluster up/down cycles [5]")
    ap.add_argument("--only", default="cluster,throughput,detection",
                    help="comma list of cluster, throughput, detection")
    ap.add_argument("--keep", action="store_true", help="keep the results directory")
    ap.add_argument("--backends", default=None,
                    help="comma list for the cluster rows [every default backend]")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_slice: needs root (network namespaces)")
    only = {x.strip() for x in a.only.split(",")}
    from lockcheck.db.redis import redis_version

    print(f"lockcheck vertical-slice benchmark, {time.strftime('%Y-%m-%d %H:%M:%S')}, "
          f"{os.cpu_count()} CPUs, redis-server {redis_version()}, Python "
          f"{sys.version.split()[0]}")
    print(f"load average before: {loadavg()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="lcbench-"))
    results = work / "results"
    out: list[str] = []
    try:
        if "cluster" in only:
            from lockcheck.backends import BACKENDS

            names = (a.backends.split(",") if a.backends else
                     [b.name for b in BACKENDS.values() if b.name == b.family])
            rows = bench_cluster(a.repeat, names)
            out.append(f"Cluster up/down, seconds (median of {a.repeat}; up = namespaces, "
                       "bridge and the whole ensemble serving (an active probe); down = "
                       "servers stopped, cluster removed)\n"
                       + table(rows, ("backend", "nodes", "up median", "up range",
                                      "down median", "down range")))
        if "throughput" in only:
            rows = bench_throughput(results)
            out.append("Harness throughput, one Redis node, 10 client processes\n"
                       f"  lockcheck test {' '.join(THROUGHPUT_ARGS)}\n"
                       + table(rows, ("metric", "per second", "count")))
        if "detection" in only:
            rows, found = bench_detection(results, a.runs)
            out.append(f"Detection: lockcheck test {' '.join(DETECTION_ARGS)}\n"
                       + table(rows, ("run", "verdict", "overlaps", "dup fences", "kills",
                                      "wall s", "seed"))
                       + f"\nfound the mutual-exclusion violation in {found}/{a.runs} runs")
    finally:
        if a.keep:
            print(f"results kept in {results}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print("\n\n".join(out))
    print(f"\nload average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
