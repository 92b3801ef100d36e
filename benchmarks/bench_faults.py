"""Benchmark: how close each fault comes to what it is asked for, on real traffic.

    sudo .venv/bin/python benchmarks/bench_faults.py            # 5 repetitions
    sudo .venv/bin/python benchmarks/bench_faults.py --repeat 10

On the cluster of tests/integration/probes.py (5 nodes with redis-server under a fake
clock, 2 clients, a prober in every namespace), each fault is started through the
registry as a run starts it, measured, and healed:

* loss (probability 0.1, 0.3, 0.5): the share of 2000 UDP datagrams that arrive from
  a healthy host at a lossy node, and between two healthy hosts;
* delay (50, 150, 400 ms): the median of 7 redis PING round trips from a client to a
  delayed node, to a healthy one, and the same with no delay (through the proxy);
* clock-rate 4x, and 0.5x: when a key set with PX 2000 on every node expires, on the
  fast (slow) nodes and on the others; clock-bump +1500 ms and clock-skew: the node's
  TIME against the controller's wall clock, and what is left of a PX 5000 key.

The load average is printed before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lockcheck.nemesis.api import PrepareContext
from lockcheck.nemesis.delay import prepare as prepare_delay
from tests.integration.probes import SPEC, Rig, expiry_s, median_rtt, redis_now_ms, rig_up


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def spread(xs: list[float], fmt: str = "{:.3f}") -> str:
    return (f"{fmt.format(statistics.median(xs))} "
            f"({fmt.format(min(xs))}-{fmt.format(max(xs))})")


def loss(rig: Rig, p: float, seed: int) -> tuple[float, float]:
    nem = rig.nemesis("loss", loss_probability=p)
    value = nem.start(random.Random(seed))
    try:
        t = value["targets"][0]
        healthy = [n.name for n in rig.cluster.nodes if n.name not in value["targets"]]
        return rig.udp_share(healthy[0], t, 2000), rig.udp_share(healthy[0], healthy[1], 2000)
    finally:
        nem.stop()


def delay(rig: Rig, ms: int, seed: int) -> tuple[float, float, float]:
    nem = rig.nemesis("delay", delay_ms=ms)
    value = nem.start(random.Random(seed))
    try:
        slow = value["targets"][0]
        ok = next(n.name for n in rig.cluster.nodes if n.name not in value["targets"])
        during = median_rtt(rig, "c0", slow), median_rtt(rig, "c0", ok)
    finally:
        nem.stop()
    return (*during, median_rtt(rig, "c0", slow))


def rate(rig: Rig, r: float, seed: int) -> tuple[list[float], list[float]]:
    nem = rig.nemesis("clock-rate", clock_targets="nodes", clock_rate=r)
    clients = {n.name: rig.redis(n.name) for n in rig.cluster.nodes}
    for c in clients.values():
        c.set("k", "v", px=2000)
    value = nem.start(random.Random(seed))
    try:
        gone = expiry_s(clients, limit=6.0)
    finally:
        nem.stop()
    moved = [s for n, s in gone.items() if n in value["targets"]]
    return moved, [s for n, s in gone.items() if n not in value["targets"]]


def offset(rig: Rig, name: str, seed: int) -> list[tuple[float, float, float]]:
    """(asked ms, measured TIME offset ms, PX 5000 left) for each target."""
    nem = rig.nemesis(name, clock_targets="nodes")
    clients = {n.name: rig.redis(n.name) for n in rig.cluster.nodes}
    for c in clients.values():
        c.set("k", "v", px=5000)
    value = nem.start(random.Random(seed))
    try:
        return [(ms, redis_now_ms(clients[n]) - time.time() * 1000, clients[n].pttl("k"))
                for n, ms in value["offsets_ms"].items()]
    finally:
        nem.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(f"load average before: {loadavg()}")
    out: list[str] = []
    with rig_up(SPEC) as rig:
        for p in (0.1, 0.3, 0.5):
            got = [loss(rig, p, s) for s in range(a.repeat)]
            out.append(f"loss {p:.1f}: arrived at the lossy node {spread([g[0] for g in got])} "
                       f"(expected {1 - p:.2f}); between healthy hosts "
                       f"{spread([g[1] for g in got])}")
        p_ = prepare_delay(PrepareContext(spec=SPEC, cluster=rig.cluster, db=rig.db))
        rig.ctx_prepared["lockcheck.nemesis.delay:prepare"] = p_
        try:
            for ms in (50, 150, 400):
                got_d = [delay(rig, ms, s) for s in range(a.repeat)]
                out.append(f"delay {ms} ms: PING to the delayed node "
                           f"{spread([g[0] for g in got_d], '{:.1f}')} ms, to a healthy one "
                           f"{spread([g[1] for g in got_d], '{:.2f}')} ms, after the heal "
                           f"{spread([g[2] for g in got_d], '{:.2f}')} ms")
        finally:
            p_.close()
        for r in (4.0, 0.5):
            got_r = [rate(rig, r, s) for s in range(a.repeat)]
            moved = [x for g in got_r for x in g[0]]
            others = [x for g in got_r for x in g[1]]
            out.append(f"clock-rate {r:g}x: a PX 2000 key expired after {spread(moved)} s on "
                       f"the target (expected {2 / r:.2f}), {spread(others)} s elsewhere")
        for name in ("clock-bump", "clock-skew"):
            got_o = [x for s in range(a.repeat) for x in offset(rig, name, s)]
            err = [abs(m - asked) for asked, m, _ in got_o]
            ttl_err = [abs(left - (5000 - asked)) for asked, _, left in got_o]
            out.append(f"{name}: asked {sorted({round(x[0]) for x in got_o})} ms; TIME off by "
                       f"the asked amount within {spread(err, '{:.1f}')} ms; PX 5000 left "
                       f"= 5000 - offset within {spread(ttl_err, '{:.0f}')} ms")
    print("\n".join(out))
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
