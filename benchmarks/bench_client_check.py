"""How long `lockcheck client-check` takes to report a planted mistake, and a clean client.

    sudo .venv/bin/python benchmarks/bench_client_check.py            # 5 runs of each
    sudo .venv/bin/python benchmarks/bench_client_check.py --runs 3

The planted mistake is a release that does not check the owner
(tests/integration/planted_lock.py); the clean client is examples/inhouse_lock.py.
Each run is a separate `lockcheck client-check` (servers up, the steps, servers down),
timed from start to exit; the target is under 10 s for the planted mistake. Runs go one
after another; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "planted mistake (release without owner check)":
        ("tests/integration/planted_lock.py:make_clients", 1, "FREED the current holder's lock"),
    "clean client (examples/inhouse_lock.py)":
        ("examples/inhouse_lock.py:make_clients", 0, "no problems"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for name, (factory, code, needle) in CASES.items():
        times, found = [], 0
        for _ in range(args.runs):
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "lockcheck.cli", "client-check", factory,
                                "--backend", "redis"], cwd=REPO, capture_output=True,
                               text=True, timeout=300)
            times.append(time.monotonic() - t0)
            found += p.returncode == code and needle in p.stdout
        print(f"{name}: {found} of {args.runs} as expected; wall time median "
              f"{statistics.median(times):.1f} s, max {max(times):.1f} s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
