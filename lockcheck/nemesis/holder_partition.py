"""`partition-holder`: a partition aimed at whoever holds a lock right now.

A random partition finds a stale holder only by chance: the holder must be on the
side without a quorum, its hold must outlast its session there, and a client on the
quorum side must be waiting for that very lock. This one waits for a holder that has
just entered its critical section (its whole hold still ahead) and cuts its client,
with the members its grant names when they are a minority (the ZooKeeper member its
session is on) and not the leader, from every other node and client
(`grudge.holder_side`). The quorum
side then expires the holder's session and grants its lock to a rival, while the
holder, cut off, has not been told; whether it stops is up to its client.

When nobody holds a lock, nothing is cut: the start op says `skipped`, and the fault
ends at once (as a client pause with nobody to pause).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable

from lockcheck.cluster.api import HasPrimary
from lockcheck.nemesis import grudge
from lockcheck.nemesis.api import Holding, RunContext
from lockcheck.nemesis.grudge import Cut
from lockcheck.nemesis.partition import Partition, Shape, cuttable

POLL_S = 0.005


def next_holder(holders: Callable[[], list[Holding]], wait_s: float) -> Holding | None:
    """A holder that enters its critical section from now on, waiting up to `wait_s`;
    failing that, the one that entered last; None if nobody holds a lock."""
    seen = {(h.key, h.process, h.since_ns) for h in holders()}
    deadline = time.monotonic() + wait_s
    while True:
        now = holders()
        fresh = [h for h in now if (h.key, h.process, h.since_ns) not in seen]
        if fresh or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    return max(fresh or now, key=lambda h: h.since_ns, default=None)


def aimed_at(holders: Callable[[], list[Holding]], hosts: dict[int, str],
             wait_s: float, leaders: Callable[[], list[str]] = list) -> Shape:
    """The shape of `partition-holder`: `hosts` maps a worker to its client host;
    `leaders` names the service's leaders right now (none if it has none)."""
    def shape(nodes: list[str], clients: list[str], rng: random.Random) -> Cut:
        h = next_holder(holders, wait_s)
        if h is not None:
            # a minority of members named by the grant goes with the holder; a quorum
            # (Redlock's) would take the quorum with it, so then only the client goes.
            # A leader stays too: cut off, it would make the others elect a new one
            # first (seconds), and the holder's hold would be over before its session
            members: tuple[str, ...] = ()
            if len(h.granted_by) <= (len(nodes) - 1) // 2:
                leading = set(leaders())
                members = tuple(m for m in h.granted_by if m not in leading)
            cut = grudge.holder_side(nodes, clients, hosts.get(h.worker), members)
            if cut.sides[0]:
                return dataclasses.replace(cut, extra={"holder": {
                    "worker": h.worker, "process": h.process, "key": h.key,
                    "granted_by": list(h.granted_by)}})
        # nobody holds a lock: nothing to aim at, and a cut aimed at nobody would blame
        # on this fault what a random partition did
        return Cut("holder", {}, extra={"skipped": "no client held a lock"})

    return shape


def partition_holder(ctx: RunContext) -> Partition:
    hosts = {w.index: w.host for w in ctx.workers}
    wait_s = max(ctx.spec.nemesis_interval, ctx.spec.ttl_ms / 500.0)
    db = ctx.db
    leaders = db.primaries if isinstance(db, HasPrimary) else list
    return Partition(list(ctx.cluster.nodes), cuttable(ctx.cluster.clients),
                     hold_s=ctx.spec.fault_duration, name="partition-holder",
                     shape=aimed_at(ctx.holders, hosts, wait_s, leaders))
