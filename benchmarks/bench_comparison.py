"""What the published comparison costs: wall time per run (from the matrix records
test-all wrote, each run's own process from start to end) by backend, and the size
of the published folder by kind of file.

    .venv/bin/python benchmarks/bench_comparison.py docs/report

Numbers go in docs/benchmarks.md, with the machine's load while the runs ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def run_seconds(root: Path) -> dict[str, list[float]]:
    by_backend: dict[str, list[float]] = defaultdict(list)
    for mf in sorted(root.rglob("test-all/*/matrix.json")):
        if mf.parent.is_symlink():
            continue
        for c in json.loads(mf.read_text()).get("cells") or []:
            if isinstance(c.get("seconds"), (int, float)) and c["seconds"] > 0:
                by_backend[str(c["backend"])].append(float(c["seconds"]))
    return by_backend


def kind(p: Path) -> str:
    if p.name.startswith("history.jsonl"):
        return "histories"
    if p.name in ("report.html", "run.html"):
        return "run pages"
    if p.name in ("index.html", "report.md", "README.md"):
        return "comparison pages"
    if p.name in ("results.json", "test.json", "matrix.json"):
        return "results, options"
    return "logs, configs, other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args()
    times = run_seconds(args.folder)
    every = [t for ts in times.values() for t in ts]
    if every:
        print(f"runs: {len(every)}, wall time per run: median {statistics.median(every):.1f} s, "
              f"mean {statistics.mean(every):.1f} s, max {max(every):.1f} s, "
              f"sum {sum(every) / 60:.0f} min")
        for b, ts in sorted(times.items()):
            print(f"  {b:16} {len(ts):4} runs  median {statistics.median(ts):5.1f} s  "
                  f"max {max(ts):5.1f} s")
    sizes: dict[str, int] = defaultdict(int)
    files = 0
    for p in args.folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            sizes[kind(p)] += p.stat().st_size
            files += 1
    total = sum(sizes.values())
    print(f"size: {total / 2**20:.1f} MiB in {files} files")
    for k, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"  {k:22} {n / 2**20:6.1f} MiB")


if __name__ == "__main__":
    main()
