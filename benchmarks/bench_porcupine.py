"""Benchmark the porcupine engine on Porcupine's own corpus, against Go's figures.

    PYTHONPATH=. python benchmarks/bench_porcupine.py [--data DIR] [--repeat N] [--no-hints]

Each row runs in a fresh subprocess (so its peak RSS, ``ru_maxrss``, is its own) and
reports the best and the median wall time of N runs, and the best CPU time (the
machine is shared: wall time above CPU time means another process had the core). The
corpus is ``../shared/testdata/porcupine`` beside the repository unless ``--data`` says
otherwise. The Go figures are from
``shared/research/checkers.md`` section 2 (Porcupine v1.3.0, Go 1.19, on a 2-core VM).
Everything runs on one core: the engine interleaves partitions in one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "testdata" / "porcupine"

# row name -> (description, Go time in seconds as text, Go time for the ratio, target)
ROWS: dict[str, tuple[str, str, float | None, str]] = {
    "etcd-all": ("all 102 etcd histories", "1.16", 1.16, "<= 1.5x Go"),
    "etcd-002": ("jepsen/etcd_002 (hardest)", "0.34", 0.34, "<= 1.5x Go"),
    "c50-ok": ("kv/c50-ok (10 partitions)", "0.28-0.41", 0.41, "<= 1.5x Go"),
    "c50-bad": ("kv/c50-bad, interleaved, 1 core", "0.03-0.06*", None, "illegal < 5 s"),
    "c50-bad-verbose": ("kv/c50-bad, verbose", "OOM**", None, "illegal < 5 s"),
    "c50-bad-seq": ("kv/c50-bad, one by one, 5 s each", "-", None, "(the trap)"),
}


def _run_row(row: str, data: Path, repeat: int, hints: bool) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import dataclasses

    from lockcheck.checker.formats.porcupine_logs import parse_etcd_log, parse_kv_log
    from lockcheck.checker.porcupine import Model, check_events, check_events_verbose
    from lockcheck.checker.porcupine import models as shipped

    def plain(m: Model[Any, Any, Any]) -> Model[Any, Any, Any]:
        return m if hints else dataclasses.replace(m, read_only=None, read_value=None)

    def cas_register() -> Model[Any, Any, Any]:
        return plain(shipped.cas_register())

    def kv() -> Model[Any, Any, Any]:
        return plain(shipped.kv())

    expected = json.loads((data / "expected.json").read_text())

    def etcd(name: str) -> list[Any]:
        return parse_etcd_log(data / name)

    if row == "etcd-all":
        names = sorted(n for n, v in expected.items() if v is not None and n.startswith("jep"))
        histories = [etcd(n) for n in names]

        def job() -> str:
            results = [check_events(cas_register(), h).value for h in histories]
            got = [r == "ok" for r in results]
            want = [expected[n] for n in names]
            return f"{sum(g == w for g, w in zip(got, want, strict=True))}/{len(names)} right"

    elif row == "etcd-002":
        h = etcd("jepsen/etcd_002.log")

        def job() -> str:
            return check_events(cas_register(), h).value

    else:
        name = "kv/c50-ok.txt" if row == "c50-ok" else "kv/c50-bad.txt"
        events = parse_kv_log(data / name)
        model = kv()

        if row in ("c50-ok", "c50-bad"):

            def job() -> str:
                return check_events(model, events, timeout=60).value

        elif row == "c50-bad-verbose":

            def job() -> str:
                result, info = check_events_verbose(model, events, timeout=60)
                return f"{result.value}, {info.cache_entries} cache entries"

        else:  # partitions strictly one after the other, in file order
            assert model.partition_events is not None
            parts = model.partition_events(events)

            def job() -> str:
                for n, part in enumerate(parts):
                    r = check_events(model, part, timeout=5)
                    if r.value == "illegal":
                        return f"illegal at partition {n + 1} of {len(parts)}"
                return "no illegal partition found"

    times = []
    cpu = []
    outcome = ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        c0 = time.process_time()
        outcome = job()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {
        "best": min(times),
        "median": statistics.median(times),
        "cpu": min(cpu),
        "outcome": outcome,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset")
    ap.add_argument(
        "--no-hints",
        action="store_true",
        help="drop the models' read_only/read_value hints (Porcupine's plain search)",
    )
    ap.add_argument("--row", help=argparse.SUPPRESS)  # internal: run one row, print JSON
    args = ap.parse_args()
    if args.row:
        print(json.dumps(_run_row(args.row, args.data, args.repeat, not args.no_hints)))
        return
    if not (args.data / "expected.json").exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    load0 = os.getloadavg()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load before {load0[0]:.2f}"
        + (", models without read_only/read_value hints" if args.no_hints else "")
    )
    print(
        f"{'row':36} {'best s':>7} {'median':>7} {'cpu s':>7} {'Go s':>10} {'x Go':>5} "
        f"{'RSS MB':>7}  outcome"
    )
    for row in args.rows.split(","):
        desc, go_text, go, target = ROWS[row]
        repeat = 1 if row in ("c50-bad-seq", "c50-bad-verbose") else args.repeat
        cmd = [sys.executable, __file__, "--row", row, "--data", str(args.data)]
        cmd += ["--repeat", str(repeat)] + (["--no-hints"] if args.no_hints else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{desc:36} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout)
        ratio = f"{r['best'] / go:.2f}" if go else "-"
        print(
            f"{desc:36} {r['best']:7.3f} {r['median']:7.3f} {r['cpu']:7.3f} {go_text:>10} "
            f"{ratio:>5} {r['maxrss_mb']:7.0f}  {r['outcome']} [target {target}]"
        )
    load1 = os.getloadavg()
    print(f"load after {load1[0]:.2f} (1 min), {load1[1]:.2f} (5 min)")
    print("*  Go runs the 10 partitions in parallel goroutines and cancels on the first illegal")
    print("** Go's CheckEventsVerbose has no early exit: OOM-killed at ~24 GB after ~7.5 min")


if __name__ == "__main__":
    main()
