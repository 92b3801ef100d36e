"""A cluster to measure faults on: 5 nodes with redis-server under a fake clock, 2
clients, and a prober in every namespace (prober.py) that connects, sends UDP
datagrams and times redis PINGs on request. Used by test_nemesis_proofs.py and by
benchmarks/bench_faults.py; faults are built through the registry, as a run builds them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import redis

from lockcheck.cluster.netns import LocalCluster, LocalNode
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry
from lockcheck.db.redis import RedisDB
from lockcheck.nemesis.api import Nemesis, RunContext
from lockcheck.nemesis.registry import NEMESES
from lockcheck.spec import TestSpec

PROBER = Path(__file__).with_name("prober.py")
TCP_PORT, UDP_PORT = 7421, 7422
SPEC = TestSpec(nodes=5, concurrency=2, ttl_ms=1000, nemesis_interval=1.0,
                nemesis_duration=30.0, clock_rate=4.0, clock_offset_ms=1500,
                clock_targets="all", loss_probability=0.3, delay_ms=150)


class Prober:
    def __init__(self, host: LocalNode) -> None:
        self.host = host
        self.d = host.spawn("prober", [sys.executable, str(PROBER), str(TCP_PORT),
                                       str(UDP_PORT)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.d.popen is not None
        self.popen = self.d.popen
        assert self.read() == {"ready": True}

    def ask(self, line: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write((line + "\n").encode())
        self.popen.stdin.flush()

    def read(self) -> Any:
        assert self.popen.stdout is not None
        return json.loads(self.popen.stdout.readline())

    def __call__(self, line: str) -> Any:
        self.ask(line)
        return self.read()


class Rig:
    pids: ClassVar[list[int]] = []  # of the last rig taken down

    def __init__(self, cluster: LocalCluster, db: RedisDB) -> None:
        self.cluster, self.db = cluster, db
        self.hosts = [*cluster.nodes, *cluster.clients]
        self.by_name = {h.name: h for h in self.hosts}
        self.probers = {h.name: Prober(h) for h in self.hosts}
        self.ctx_prepared: dict[str, Any] = {}

    def matrix(self) -> dict[tuple[str, str], bool]:
        """Who can open a TCP connection to whom: every prober asks at once."""
        for h in self.hosts:
            others = [o.address for o in self.hosts if o is not h]
            self.probers[h.name].ask("tcp " + " ".join(others))
        out = {}
        addr_name = {h.address: h.name for h in self.hosts}
        for h in self.hosts:
            for addr, ok in self.probers[h.name].read().items():
                out[(h.name, addr_name[addr])] = ok
        return out

    def udp_share(self, src: str, dst: str, n: int = 1000) -> float:
        self.probers[dst]("count")  # reset
        assert self.probers[src](f"send {self.by_name[dst].address} {n}") == {"sent": n}
        received: int = self.probers[dst]("count")["received"]
        return received / n

    def redis(self, node: str) -> redis.Redis:
        return redis.Redis(host=self.by_name[node].address, port=6379, socket_timeout=2)

    def nemesis(self, name: str, **spec: Any) -> Nemesis:
        s = dataclasses.replace(SPEC, **spec)
        return NEMESES[name].make(RunContext(spec=s, cluster=self.cluster, db=self.db,
                                             workers=[], holders=lambda: [],
                                             prepared=self.ctx_prepared))


def median_rtt(rig: Rig, src: str, node: str) -> float:
    r = rig.probers[src](f"rtt {rig.by_name[node].address} 6379 7")
    assert "ms" in r, r
    return statistics.median(r["ms"])


def redis_now_ms(r: redis.Redis) -> float:
    s, us = r.time()
    return s * 1000 + us / 1000


def expiry_s(rigs: dict[str, redis.Redis], limit: float = 5.0) -> dict[str, float]:
    """Seconds until the key `k` is gone on each node."""
    t0, out = time.monotonic(), {}
    while len(out) < len(rigs) and time.monotonic() - t0 < limit:
        for name, r in rigs.items():
            if name not in out and not r.exists("k"):
                out[name] = time.monotonic() - t0
        time.sleep(0.01)
    return out


@contextlib.contextmanager
def rig_up(spec: TestSpec = SPEC, *, fake_clock: bool = True) -> Iterator[Rig]:
    """The cluster, its servers under a fake clock (where redis-server starts under one)
    and the probers; all removed after. `rig.pids` lists every process it ran (for the
    leftover checks)."""
    c = LocalCluster(spec.nodes, spec.concurrency, Registry(DEFAULT_STATE_DIR))
    db = RedisDB(spec)
    if fake_clock:
        db.fake_clock()
    with c:
        try:
            db.setup(c)
            r = Rig(c, db)
            yield r
        finally:
            db.teardown()
            if c.state is not None:
                Rig.pids = list(c.state.pids)
