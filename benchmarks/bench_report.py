"""Benchmark: report.html of a 100,000-operation run, written and opened in a browser.

    python benchmarks/bench_report.py                # 100,000 ops, 3 repetitions
    python benchmarks/bench_report.py --ops 20000 --repeat 5
    python benchmarks/bench_report.py --run results/redis-mutex-kill/latest   # a real run

It makes a synthetic run folder (tests/reports/synthetic.py: a simulated lease lock
under kill, partition and client-pause faults, written with lockcheck's own history
writer and checked by its checkers), or copies the real run given with `--run`,
then, each in a fresh process:

* `write`: `write_report(run_dir)` (reads history.jsonl and results.json, computes
  the metrics, draws the plots, writes the page): seconds inside the call, the whole
  process with its imports, and the CPU time of the call (what the wall time would
  be on an idle machine; the first run also draws the linearizability visualization);
* `open`: headless Chromium loads the page from the file (`--dump-dom`): the wall
  time of that Chromium process, the page's own time to its `load` event, the
  timeline's first draw, and redraws while zooming in 20 times and out again
  (`#bench`), the longest of which says whether the page freezes.

The load average is printed before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reports.browser import chromium, render  # noqa: E402
from tests.reports.synthetic import make_run  # noqa: E402

WRITE = """
import sys, time
t0 = time.perf_counter()
from pathlib import Path
from lockcheck.results.report import write_report
t1, c1 = time.perf_counter(), time.process_time()
p = write_report(Path(sys.argv[1]))
t2, c2 = time.perf_counter(), time.process_time()
print(t2 - t1, t2 - t0, p.stat().st_size, c2 - c1)
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--run", type=Path, default=None, help="a real run folder to copy")
    args = ap.parse_args()
    print(f"load average before: {load()}  ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="lc-bench-report-") as tmp:
        run = Path(tmp) / "bench" / "run"
        t0 = time.perf_counter()
        if args.run is not None:  # a copy: the benchmark writes report.html into it
            shutil.copytree(args.run.resolve(), run, ignore=shutil.ignore_patterns(
                "report.html", "linearizable"))
        else:
            make_run(run, ops=args.ops, workers=10, keys=10)
        lines = sum(1 for _ in (run / "history.jsonl").open())
        print(f"{'run ' + str(args.run) if args.run else 'synthetic run'}: {lines:,} history "
              f"lines, {(run / 'history.jsonl').stat().st_size / 1e6:.1f} MB (ready in "
              f"{time.perf_counter() - t0:.1f} s)")
        writes, totals, cpus, size = [], [], [], 0
        for _ in range(args.repeat):
            (run / "report.html").unlink(missing_ok=True)
            out = subprocess.run([sys.executable, "-c", WRITE, str(run)], check=True,
                                 capture_output=True, text=True, cwd=ROOT).stdout.split()
            writes.append(float(out[0]))
            totals.append(float(out[1]))
            size = int(out[2])
            cpus.append(float(out[3]))
        print(f"write_report: median {statistics.median(writes):.2f} s (runs: "
              f"{', '.join(f'{w:.2f}' for w in writes)}); process with imports: median "
              f"{statistics.median(totals):.2f} s; CPU time in the call: median "
              f"{statistics.median(cpus):.2f} s; report.html {size / 1e6:.2f} MB")
        if chromium() is None:
            print("chromium not installed: no browser numbers")
            return 0
        walls, loads, firsts, redraw_max, redraw_mean = [], [], [], [], []
        for _ in range(args.repeat):
            r = render(run / "report.html", fragment="bench", budget_ms=10_000)
            head = re.search(r"<html([^>]*)>", r.dom)
            attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', head.group(1) if head else ""))
            if "data-js-errors" in attrs or "data-timeline-ready" not in attrs:
                print("the page did not draw:", r.console_errors())
                return 1
            walls.append(r.seconds)
            loads.append(int(attrs["data-load-ms"]))
            firsts.append(int(attrs["data-timeline-ms"]))
            redraw_max.append(int(attrs["data-redraw-ms-max"]))
            redraw_mean.append(int(attrs["data-redraw-ms-mean"]))
        print(f"browser: chromium --dump-dom wall median {statistics.median(walls):.2f} s; "
              f"page load event median {statistics.median(loads)} ms; timeline first draw "
              f"median {statistics.median(firsts)} ms ({attrs['data-timeline-bars']} holders); "
              f"zoom redraws mean {statistics.median(redraw_mean)} ms, longest "
              f"{max(redraw_max)} ms")
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
