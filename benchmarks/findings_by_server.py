#!/usr/bin/env python3
"""The Redis findings of docs/findings.md on each Redis-protocol server, side by side.

For every finding, its command (as docs/findings.md gives it) runs `--runs` times on
each server (`--server redis`, `--server valkey`), the servers alternating run by run
so that both see the same load; seeds 1..runs. Prints one row per finding and server:
the server's version, k of n runs INVALID (exit 1), and the other exits; writes every
run's row to `--out` (JSON lines) so the table can be re-made.

    .venv/bin/python benchmarks/findings_by_server.py --runs 5 --jobs 2

Needs both servers installed (Valkey: Debian 13, Ubuntu 25.04 and newer).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOCKCHECK = [sys.executable, "-m", "lockcheck.cli"]
# id -> the finding's command, less `lockcheck test`, as docs/findings.md gives it
FINDINGS: dict[str, list[str]] = {
    "R1": ["--backend", "redlock", "--nemesis", "kill", "--kill-targets", "majority",
           "--restart-delay-ms", "100", "--ttl-ms", "2000", "--hold-ms", "1500-3000",
           "--nemesis-interval", "1", "--time-limit", "10"],
    "R2": ["--backend", "redis-get-del", "--nemesis", "client-pause", "--pause-at", "release",
           "--keys", "1", "--hold-ms", "20-50", "--ttl-ms", "300", "--nemesis-interval", "0.5",
           "--time-limit", "10"],
    "R3": ["--backend", "redlock", "--nemesis", "client-pause", "--pause-ms", "1500",
           "--nemesis-interval", "0.5", "--time-limit", "10"],
    "R4": ["--backend", "redis-no-ttl", "--nemesis", "client-pause", "--nemesis-interval",
           "0.5", "--time-limit", "8"],
    "R5": ["--backend", "redlock", "--nemesis", "bridge-clock"],
    "R6": ["--backend", "redlock", "--nemesis", "kill", "--kill-targets", "holder-quorum",
           "--keys", "1", "--concurrency", "8", "--ttl-ms", "2000", "--hold-ms", "700-1500",
           "--nemesis-interval", "1", "--time-limit", "15", "--restart-delay-ms", "100"],
    "S1": ["--backend", "redis-sentinel", "--nemesis", "partition-primary",
           "--nemesis-interval", "4", "--time-limit", "12"],
    "S2": ["--backend", "redis-sentinel", "--nemesis", "failover", "--nemesis-interval", "4.5",
           "--time-limit", "18"],
    "S3": ["--backend", "redis-sentinel", "--nemesis", "kill-primary", "--nemesis-interval",
           "4", "--time-limit", "20"],
    "S4": ["--backend", "redis-sentinel", "--nemesis", "pause-primary-until-promotion",
           "--nemesis-interval", "3", "--time-limit", "20"],
}
SERVERS = ("redis", "valkey")


def run_one(finding: str, server: str, seed: int, results: Path) -> dict[str, object]:
    argv = [*LOCKCHECK, "test", *FINDINGS[finding], "--server", server, "--seed", str(seed),
            "--no-report", "--results-dir", str(results)]
    t = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    verdict = next((line for line in reversed(r.stderr.splitlines() + r.stdout.splitlines())
                    if line.startswith(("valid", "INVALID", "unknown"))), "")
    return {"finding": finding, "server": server, "seed": seed, "exit": r.returncode,
            "seconds": round(time.monotonic() - t, 1), "verdict": verdict[:200],
            "command": "lockcheck test " + " ".join(argv[len(LOCKCHECK) + 1:-3])}


def version(server: str) -> str:
    out = subprocess.run([f"{server}-server", "--version"], capture_output=True,
                         text=True).stdout.split()
    return next((w[2:] for w in out if w.startswith("v=")), "?")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="runs at once")
    ap.add_argument("--only", default="", help="comma-separated finding ids")
    ap.add_argument("--results-dir", default="results-by-server")
    ap.add_argument("--out", default="findings-by-server.jsonl")
    a = ap.parse_args()
    chosen = [f for f in FINDINGS if not a.only or f in a.only.split(",")]
    jobs = [(f, s, seed) for f in chosen for seed in range(1, a.runs + 1) for s in SERVERS]
    rows: list[dict[str, object]] = []
    out = Path(a.out)
    with ThreadPoolExecutor(a.jobs) as pool, out.open("a") as fh:
        futures = [pool.submit(run_one, f, s, seed, Path(a.results_dir)) for f, s, seed in jobs]
        for i, fut in enumerate(futures, 1):
            row = fut.result()
            rows.append(row)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(f"[{i}/{len(jobs)}] {row['finding']} {row['server']} seed {row['seed']}: "
                  f"exit {row['exit']} in {row['seconds']} s", flush=True)
    versions = {s: version(s) for s in SERVERS}
    print(f"\n{'finding':8} {'server':16} {'INVALID':>9}  other exits")
    for f in chosen:
        for s in SERVERS:
            mine = [r for r in rows if r["finding"] == f and r["server"] == s]
            k = sum(r["exit"] == 1 for r in mine)
            other = sorted(str(r["exit"]) for r in mine if r["exit"] != 1)
            print(f"{f:8} {s + ' ' + versions[s]:16} {f'{k} of {len(mine)}':>9}  "
                  f"{', '.join(other) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
