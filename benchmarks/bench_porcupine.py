"""Benchmark the porcupine engine on Porcupine's own corpus, side by side with Go.

    PYTHONPATH=. python benchmarks/bench_porcupine.py [--data DIR] [--repeat N] [--no-hints]
    PYTHONPATH=. python benchmarks/bench_porcupine.py --go <pbench> --rounds 3 --cold
    PYTHONPATH=. python benchmarks/bench_porcupine.py --base ../main --rounds 5 --cold
    LOCKCHECK_PURE_ENGINE=1 PYTHONPATH=. python benchmarks/bench_porcupine.py  # no C search

Each row runs in a fresh subprocess (so its peak RSS, ``ru_maxrss``, is its own) and
reports the best and the median wall time of N runs, and the best CPU time (the
machine is shared: wall time above CPU time means another process had the core). With
``--cold`` each run is a fresh process (one-shot, cold; parsing excluded), as in the
issue's table. The corpus is ``../shared/testdata/porcupine`` beside the repository
unless ``--data`` says otherwise. The kv rows' partitions are searched on all cores
(threads of the compiled search); the other rows run on one core, partitions
interleaved in one thread.

``--go CMD`` measures a Go Porcupine harness in the same window, alternating with our
rows, at GOMAXPROCS=2 and =1: ``CMD ROW DATA_DIR`` must check the row once (parsing
excluded) and print one JSON object with ``seconds``. No such harness ships here (it
would be Porcupine's code); docs/benchmarks-porcupine.md says how the one behind the
published figures was built. Without ``--go`` the Go column shows the best Go figures
measured side by side on 2026-12-03 (Go 1.19.8, the harness described there).
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

# row name -> (description, best Go time measured side by side on 2026-12-03 (s) as text,
# as a number)
ROWS: dict[str, tuple[str, str, float | None]] = {
    "etcd-all": ("all 102 etcd histories", "0.77", 0.77),
    "etcd-002": ("jepsen/etcd_002 (hardest)", "-", None),
    "c50-ok": ("kv/c50-ok (10 partitions)", "0.17", 0.17),
    "c50-bad": ("kv/c50-bad (10 partitions)", "0.005", 0.005),
    "c10-ok-nopart": ("kv/c10-ok, no partitioning", "4.6", 4.6),
    "c10-bad-nopart": ("kv/c10-bad, no partitioning", "6.9", 6.9),
    "c50-bad-verbose": ("kv/c50-bad, verbose", "OOM**", None),
    "c50-bad-seq": ("kv/c50-bad, one by one, 5 s each", "-", None),
}
DEFAULT_ROWS = "etcd-all,c50-ok,c50-bad,c10-ok-nopart,c10-bad-nopart"


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

    elif row.endswith("-nopart"):
        events = parse_kv_log(data / f"kv/{row.removesuffix('-nopart')}.txt")
        whole = plain(shipped.kv(partitioned=False))

        def job() -> str:
            return check_events(whole, events).value

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


def _ours(row: str, data: Path, repeat: int, hints: bool,
          base: Path | None = None) -> dict[str, Any]:
    """One row in a fresh process; with `base`, that checkout's engine and script."""
    script = __file__ if base is None else str(base / "benchmarks" / Path(__file__).name)
    cmd = [sys.executable, script, "--row", row, "--data", str(data)]
    cmd += ["--repeat", str(repeat)] + ([] if hints else ["--no-hints"])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _go(go: str, row: str, data: Path, procs: int) -> float | None:
    env = dict(os.environ, GOMAXPROCS=str(procs))
    proc = subprocess.run([*go.split(), row, str(data)], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def _span(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="comma-separated, of " + ",".join(ROWS))
    ap.add_argument(
        "--no-hints",
        action="store_true",
        help="drop the models' read_only/read_value hints (Porcupine's plain search)",
    )
    ap.add_argument("--cold", action="store_true", help="every run a fresh process")
    ap.add_argument("--rounds", type=int, default=3, help="with --cold or --go: runs per row")
    ap.add_argument("--go", default=None, help="a Go harness command, run side by side")
    ap.add_argument("--base", type=Path, default=None,
                    help="with --cold: also run each row with this checkout's engine (e.g. a "
                         "worktree of main), interleaved, in the Go columns' place")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # internal: run one row, print JSON
    args = ap.parse_args()
    if args.row:
        print(json.dumps(_run_row(args.row, args.data, args.repeat, not args.no_hints)))
        return
    if not (args.data / "expected.json").exists():
        sys.exit(f"no corpus at {args.data} (give --data)")
    sys.path.insert(0, str(ROOT))
    from lockcheck.checker.porcupine import checker

    engine = "compiled search" if checker.COMPILED else "pure-Python search"
    load0 = os.getloadavg()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {engine}, "
        f"load before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}"
        + (", models without read_only/read_value hints" if args.no_hints else "")
    )
    side = args.cold or args.go
    if side and args.base:
        print(f"{'row (CPU seconds)':36} {'base':>13} {'lockcheck':>13} {'ratio':>6}  outcome")
    elif side:
        print(f"{'row':36} {'Go, 2 procs':>13} {'Go, 1 proc':>13} {'lockcheck':>13} "
              f"{'ratio':>6}  outcome")
    else:
        print(f"{'row':36} {'best s':>7} {'median':>7} {'cpu s':>7} {'Go s':>6} {'x Go':>5} "
              f"{'RSS MB':>7}  outcome")
    for row in args.rows.split(","):
        desc, go_text, go_best = ROWS[row]
        if side and args.base:  # before / after, interleaved
            before: list[float] = []
            after: list[float] = []
            outcome = ""
            for _ in range(args.rounds):
                for acc, base in ((before, args.base), (after, None)):
                    r = _ours(row, args.data, 1, not args.no_hints, base)
                    if "error" in r:
                        print(f"{desc:36} failed: {r['error']}")
                        break
                    acc.append(r["cpu"])  # CPU time: on a loaded machine wall time is noise
                    outcome = r["outcome"]
            ratio = f"{min(after) / min(before):.2f}" if before and after else "-"
            print(f"{desc:36} {_span(before):>13} {_span(after):>13} {ratio:>6}  {outcome}")
            continue
        if side:
            ours: list[float] = []
            g2: list[float] = []
            g1: list[float] = []
            outcome = ""
            for _ in range(args.rounds):  # interleaved: the same window for both
                if args.go:
                    for procs, acc in ((2, g2), (1, g1)):
                        t = _go(args.go, row, args.data, procs)
                        if t is not None:
                            acc.append(t)
                r = _ours(row, args.data, 1, not args.no_hints)
                if "error" in r:
                    print(f"{desc:36} failed: {r['error']}")
                    break
                ours.append(r["best"])
                outcome = r["outcome"]
            best_go = min(g2 + g1) if g2 or g1 else go_best
            ratio = f"{min(ours) / best_go:.2f}" if ours and best_go else "-"
            print(f"{desc:36} {_span(g2) if args.go else go_text:>13} {_span(g1):>13} "
                  f"{_span(ours):>13} {ratio:>6}  {outcome}")
            continue
        repeat = 1 if row in ("c50-bad-seq", "c50-bad-verbose") else args.repeat
        r = _ours(row, args.data, repeat, not args.no_hints)
        if "error" in r:
            print(f"{desc:36} failed: {r['error']}")
            continue
        ratio = f"{r['best'] / go_best:.2f}" if go_best else "-"
        print(
            f"{desc:36} {r['best']:7.3f} {r['median']:7.3f} {r['cpu']:7.3f} {go_text:>6} "
            f"{ratio:>5} {r['maxrss_mb']:7.0f}  {r['outcome']}"
        )
    load1 = os.getloadavg()
    print(f"load after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print("** Go's CheckEventsVerbose has no early exit: OOM-killed at ~24 GB after ~7.5 min")


if __name__ == "__main__":
    main()
