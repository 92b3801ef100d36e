"""Benchmark of the providers: cluster up/down per provider, and the same scenarios on
each (the comparison table of docs/providers.md).

    sudo .venv/bin/python benchmarks/bench_providers.py               # everything (~10 min)
    sudo .venv/bin/python benchmarks/bench_providers.py --only cluster --repeat 3
    sudo .venv/bin/python benchmarks/bench_providers.py --only compare --runs 3

1. cluster up / down: for `local`, `docker` and `ssh`, a cluster of redis (5 nodes) and
   of etcd (3 nodes), with 10 client hosts, set up until it serves ("up", through the
   provider and the database interface), then every server stopped and the cluster
   removed ("down"); median and range of `--repeat` cycles.
2. compare: `lockcheck test` of `redis --nemesis kill` and `etcd --nemesis partition`
   (defaults otherwise, `--seed` fixed per run) on each provider; exit code and verdict
   of each run.

The ssh provider runs against stand-in hosts (Debian's sshd in namespaces here,
tests/integration/standin.py); the docker provider against DOCKER_HOST, or a safe
dockerd started here (tests/integration/dockerd.py) if none is set; the node image
must be built (`lockcheck images build --base debootstrap`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_slice import loadavg, table, up_down  # noqa: E402

PROVIDERS = ("local", "docker", "ssh")
SCENARIOS = (("redis", ["--backend", "redis", "--nemesis", "kill"]),
             ("etcd", ["--backend", "etcd", "--nemesis", "partition"]))


@contextlib.contextmanager
def environment(work: Path) -> Iterator[dict[str, str]]:
    """Provider options by name: a docker daemon and three stand-in SSH hosts."""
    from tests.integration.dockerd import Dockerd
    from tests.integration.standin import StandIns

    daemon = None
    if "DOCKER_HOST" not in os.environ:
        daemon = Dockerd().start()
        os.environ["DOCKER_HOST"] = daemon.host
    hosts = StandIns(work / "standin", 5).start()
    try:
        yield {"nodes_file": str(hosts.nodes_file(clients=20))}
    finally:
        hosts.stop()
        if daemon is not None:
            os.environ.pop("DOCKER_HOST", None)
            print(f"dockerd stopped; problems: {daemon.stop()}")


# -- 1. cluster up / down -----------------------------------------------------------------


def cycle(provider: str, backend: str, nodes: int, options: dict[str, str]) -> tuple[float,
                                                                                    float]:
    from lockcheck.backends import BACKENDS
    from lockcheck.cluster.providers import ClusterRequest
    from lockcheck.cluster.providers import provider as find
    from lockcheck.cluster.state import Registry
    from lockcheck.preflight import debian_packages
    from lockcheck.spec import TestSpec

    b = BACKENDS[backend]
    opts = options if provider == "ssh" else {}
    db = b.make_db(TestSpec(backend=backend, nodes=nodes, nemesis=(), provider=provider,
                            provider_options=opts))
    c = find(provider).make(ClusterRequest(nodes=nodes, clients=10, registry=Registry(),
                                           options=opts, packages=debian_packages(b.binaries)))
    return up_down(c, db)


def bench_cluster(repeat: int, options: dict[str, str]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for provider in PROVIDERS:
        for backend, nodes in (("redis", 5), ("etcd", 3)):
            ups, downs = [], []
            for _ in range(repeat):
                u, d = cycle(provider, backend, nodes, options)
                ups.append(u)
                downs.append(d)
            print(f"  {provider} {backend} {nodes}: up {[round(x, 2) for x in ups]} "
                  f"down {[round(x, 2) for x in downs]}", flush=True)
            rows.append((provider, f"{backend} x{nodes} + 10 clients",
                         f"{statistics.median(ups):.2f}", f"{min(ups):.2f}-{max(ups):.2f}",
                         f"{statistics.median(downs):.2f}",
                         f"{min(downs):.2f}-{max(downs):.2f}"))
    return rows


# -- 2. the same scenario on each provider ------------------------------------------------


def run(provider: str, args: list[str], seed: int, options: dict[str, str],
        results: Path) -> tuple[int, str, float]:
    extra = ["--provider", provider]
    if provider == "ssh":
        extra += ["--nodes-file", options["nodes_file"]]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "lockcheck.cli", "test", *args, *extra,
                        "--seed", str(seed), "--results-dir", str(results)],
                       capture_output=True, text=True, env={**os.environ,
                                                            "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    run_dir = next((Path(ln.removeprefix("results: ").strip()) for ln in r.stderr.splitlines()
                    if ln.startswith("results: ")), None)
    if run_dir is None:
        return r.returncode, f"no run: {r.stderr.strip()[-200:]}", wall
    res = json.loads((run_dir / "results.json").read_text())
    mx = res["checkers"]["mutual-exclusion"]
    bad = sorted(k for k, c in res["checkers"].items() if c.get("valid") is False)
    return r.returncode, (f"{res['valid']} ({', '.join(bad) or 'every checker valid'}); "
                          f"{mx['violation_count']} overlaps in {mx['sections']} sections; "
                          f"{res['stats']['faults']} faults"), wall


def bench_compare(runs: int, options: dict[str, str], results: Path) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for name, args in SCENARIOS:
        for provider in PROVIDERS:
            for i in range(runs):
                code, verdict, wall = run(provider, args, 1000 + i, options, results)
                print(f"  {name} {provider} seed {1000 + i}: exit {code} {verdict} "
                      f"({wall:.0f} s)", flush=True)
                rows.append((" ".join(args), provider, 1000 + i, code, verdict, f"{wall:.0f}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="cluster,compare")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    only = set(a.only.split(","))
    print(f"load average before: {loadavg()}")
    with tempfile.TemporaryDirectory(prefix="lockcheck-bench-") as tmp, \
            environment(Path(tmp)) as options:
        if "cluster" in only:
            rows = bench_cluster(a.repeat, options)
            print(table(rows, ("provider", "cluster", "up s (median)", "range",
                               "down s (median)", "range")))
        if "compare" in only:
            rows = bench_compare(a.runs, options, Path(tmp) / "results")
            print(table(rows, ("scenario", "provider", "seed", "exit", "verdict", "wall s")))
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
