"""`bridge-clock`: Kleppmann's Redlock clock scenario as one fault.

The clients are split in two groups that each reach a bare quorum of the masters, the
two quorums sharing one master (`partition-bridge`'s shape), with one client alone in
its group and every other client in the other. The fault waits for a grant to the lone
client, which needs the shared master's yes, and at once jumps the shared master's
clock forward by `--clock-offset-ms` (default 2x TTL): the holder's key there expires,
and a client of the other group makes its own quorum of the shared master and its two,
while the first holder's validity, counted on its own clock, still runs. Redlock
assumes every master's clock keeps the client's pace; nothing in the protocol can
notice one that does not.

Both faults at random (`--nemesis partition-bridge,clock-bump --nemesis-mode all`)
line up only when the clock fault happens to pick the bridge master while a holder
leans on it; this fault aims them. A holder that leaves before a rival comes had its
key expire for nothing: the clock steps back and the next such grant is aimed at. The
fault ends as soon as a rival holds the lock an aimed holder holds (`EndsItself`), at
the latest after `--nemesis-duration`, and then puts the clock back and heals the
partition.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from lockcheck.nemesis import grudge
from lockcheck.nemesis.api import Holding, RunContext
from lockcheck.nemesis.clock import Clocks, clocks_of
from lockcheck.nemesis.grudge import Cut
from lockcheck.nemesis.partition import Partition, cuttable

log = logging.getLogger("lockcheck.nemesis")


def one_against_the_rest(nodes: list[str], clients: list[str], rng: random.Random) -> Cut:
    """partition-bridge's nodes, with one client alone on one side and every other
    client on the other: the lone client's grants always lean on the bridge master, and
    every other client is its rival there."""
    cut = grudge.bridge(nodes, rng)
    if not clients:
        return cut
    lone = rng.choice(clients)
    a = [*cut.sides[0], lone]
    b = [*cut.sides[1], *(c for c in clients if c != lone)]
    g = grudge.merge(cut.grudge, grudge.complete([a, b]))
    return Cut(cut.kind, g, sides=(tuple(a), tuple(b)), targets=cut.targets,
               extra={**cut.extra, "lone": lone})


def depends_on(h: Holding, node: str, nodes: int) -> bool:
    """`h`'s grant needed `node`'s yes: without it, fewer than a quorum said yes."""
    return node in h.granted_by and len(h.granted_by) - 1 < nodes // 2 + 1


@dataclass
class BridgeClock:
    partition: Partition  # in partition-bridge's shape
    clocks: Clocks
    offset_ms: int
    holders: Callable[[], list[Holding]]
    next_enter: Callable[[float, Callable[[Holding], bool]], Holding | None]
    taken_over: Callable[[Holding], bool]
    hosts: dict[int, str]  # client worker -> the host it runs on
    hold_s: float
    wait_s: float  # how long to wait for the first grant that leans on the bridge master
    aim: Callable[[Holding, str, int], bool] = depends_on
    name: str = "bridge-clock"
    start_f: str = "start-bridge-clock"
    stop_f: str = "stop-bridge-clock"
    _aimed: list[Holding] = field(default_factory=list)
    _jumped: str | None = None
    _first: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, rng: random.Random) -> dict[str, Any]:
        value = {**self.partition.start(rng), "fault": self.name}
        bridge, lone = str(value["bridge"]), value.get("lone")
        self._aimed, self._first = [], threading.Event()
        self._stop.clear()
        self._thread = threading.Thread(target=self._aim_loop, args=(bridge, lone),
                                        name=f"{self.name}-aim", daemon=True)
        self._thread.start()
        if not self._first.wait(self.wait_s) or not self._aimed:
            self._end_aiming()
            return {**value, "skipped": "no grant leaned on the bridge master in time"}
        h = self._aimed[0]
        return {**value, "targets": [bridge], "offset_ms": self.offset_ms,
                "aimed": {"worker": h.worker, "process": h.process, "key": h.key,
                          "granted_by": list(h.granted_by)}}

    def _aim_loop(self, bridge: str, lone: str | None) -> None:
        """Jump the bridge master's clock at each grant that leans on it, until one is
        taken over; a holder that left first had its key expire for nothing, so the
        clock steps back (keys set meanwhile live at most the offset longer) and waits
        for the next such grant."""
        n = len(self.partition.nodes)
        try:
            while not self._stop.is_set():
                h = self.next_enter(0.1, lambda x: self.hosts.get(x.worker) == lone
                                    and self.aim(x, bridge, n))
                if h is None or self._stop.is_set():
                    continue
                self.clocks.set(bridge, float(self.offset_ms))
                self._jumped = bridge
                self._aimed.append(h)
                self._first.set()
                while not self._stop.wait(0.01) and h in self.holders():
                    if self.taken_over(h):
                        return
                if self.taken_over(h) or self._stop.is_set():
                    return
                self.clocks.set(bridge, 0.0)
                self._jumped = None
        except Exception:  # the stop and the heal put every clock back
            log.exception("%s: aiming failed", self.name)
        finally:
            self._first.set()

    def _end_aiming(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def ended(self) -> bool:
        return any(self.taken_over(h) for h in self._aimed)

    def stop(self) -> dict[str, Any]:
        self._end_aiming()
        jumped, taken, aims = self._jumped, self.ended(), len(self._aimed)
        if jumped is not None:
            self.clocks.set(jumped, 0.0)
        self._jumped, self._aimed = None, []
        healed = self.partition.stop()
        return {"fault": self.name, "targets": sorted({*([jumped] if jumped else []),
                                                       *healed["targets"]}),
                "aims": aims, "taken_over": taken}

    def heal(self) -> None:
        self._end_aiming()
        self._jumped, self._aimed = None, []
        try:
            self.clocks.reset_all()
        finally:
            self.partition.heal()


def bridge_clock(ctx: RunContext) -> BridgeClock:
    spec = ctx.spec
    assert ctx.next_enter is not None and ctx.taken_over is not None
    # the bridge master's clock, whatever --clock-targets says of the other clock faults
    clocks, _ = clocks_of(replace(ctx, spec=replace(spec, clock_targets="nodes")))
    part = Partition(list(ctx.cluster.nodes), cuttable(ctx.cluster.clients),
                     hold_s=spec.fault_duration, name="bridge-clock",
                     shape=one_against_the_rest)
    return BridgeClock(part, clocks, spec.clock_offset, ctx.holders, ctx.next_enter,
                       ctx.taken_over, {w.index: w.host for w in ctx.workers},
                       hold_s=spec.fault_duration,
                       wait_s=max(1.0, spec.fault_duration, spec.hold_ms[1] / 1000.0))
