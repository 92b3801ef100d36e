"""Network partitions: a grudge map (`nemesis/grudge.py`) applied as drop rules.

Each `--nemesis partition-*` value is a shape of the nodes, joined by the clients
(`grudge.with_clients`), or for `partition-clients` a cut between each client and some
nodes. Every host drops the packets of the hosts it holds a grudge against
(`Node.block`), so exactly the links the map names are cut, and a heal removes every
rule on every host.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import ClientHost, HasPrimary, Node
from lockcheck.nemesis import grudge
from lockcheck.nemesis.api import RunContext
from lockcheck.nemesis.grudge import Cut, NodeShape

# (node names, client names, rng) -> the cut over all of them
Shape = Callable[[list[str], list[str], random.Random], Cut]
Host = Node | ClientHost


def joined(shape: NodeShape) -> Shape:
    """A node shape that the clients then join."""
    def cut(nodes: list[str], clients: list[str], rng: random.Random) -> Cut:
        return grudge.with_clients(shape(nodes, rng), clients, rng)

    return cut


def value_of(name: str, cut: Cut) -> dict[str, Any]:
    """What goes into the history: fault, targets, the shape and the whole grudge."""
    v: dict[str, Any] = {"fault": name, "targets": list(cut.targets), "kind": cut.kind,
                         "grudge": grudge.plain(cut.grudge)}
    if cut.sides:
        v["sides"] = [list(s) for s in cut.sides]
    for k in ("bridge", "ring", "lone", "holder", "skipped"):
        if k in cut.extra:
            v[k] = cut.extra[k]
    return v


@dataclass
class Partition:
    nodes: list[Node]
    clients: list[ClientHost]
    hold_s: float = 3.0
    name: str = "partition"
    start_f: str = "start-partition"
    stop_f: str = "stop-partition"
    shape: Shape = field(default_factory=lambda: joined(grudge.halves_or_isolate))
    _cut: list[Node | ClientHost] = field(default_factory=list)

    @property
    def hosts(self) -> list[Node | ClientHost]:
        return [*self.nodes, *self.clients]

    def start(self, rng: random.Random) -> dict[str, Any]:
        cut = self.shape([n.name for n in self.nodes], [c.name for c in self.clients], rng)
        self._cut = apply_grudge(self.hosts, cut.grudge)
        return value_of(self.name, cut)

    def stop(self) -> dict[str, Any]:
        healed = sorted({h.name for h in self._cut})
        self.heal()
        return {"fault": self.name, "targets": healed, "healed": healed}

    def heal(self) -> None:
        heal_hosts(self.hosts)
        self._cut.clear()


def cuttable(clients: Sequence[ClientHost]) -> list[ClientHost]:
    """The clients a partition can cut alone: those with an address of their own (plain
    client processes share the controller's; partitions leave them out)."""
    return [c for c in clients if c.own_network]


def on_every_host(what: str, hosts: Sequence[Host], fn: Callable[[Host], object]) -> None:
    """`fn` on every host at once (each rule is a command in a namespace: one after the
    other, a partition of 10 hosts took most of a second to set), even if some fail;
    then raise naming them."""
    if not hosts:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        futures = {h.name: pool.submit(fn, h) for h in hosts}
    failed = [f"{name}: {f.exception()}" for name, f in futures.items() if f.exception()]
    if failed:
        raise RuntimeError(f"{what} failed on " + "; ".join(failed))


def apply_grudge(hosts: Sequence[Host], g: grudge.Grudge,
                 probability: float = 1.0) -> list[Host]:
    """Each host drops the packets of those it holds a grudge against; returns them."""
    by_name = {h.name: h for h in hosts}
    cut = [by_name[h] for h, enemies in sorted(g.items()) if enemies]
    on_every_host("partition", cut, lambda h: h.block(
        sorted(by_name[e].address for e in g[h.name]), probability))
    return cut


def heal_hosts(hosts: Sequence[Host]) -> None:
    """Remove the drop rules on every host, even if some fail; then raise naming them."""
    on_every_host("heal", hosts, lambda h: h.heal())


def _make(ctx: RunContext, name: str, shape: Shape) -> Partition:
    return Partition(list(ctx.cluster.nodes), cuttable(ctx.cluster.clients),
                     hold_s=ctx.spec.fault_duration, name=name, shape=shape)


SHAPES: dict[str, Shape] = {
    "partition": joined(grudge.halves_or_isolate),
    "partition-one": joined(grudge.isolate),
    "partition-majority": joined(grudge.majority),
    "partition-halves": joined(grudge.halves),
    "partition-ring": joined(grudge.ring),
    "partition-bridge": joined(grudge.bridge),
    "partition-clients": grudge.clients_cut,
}


def _factory(name: str) -> Callable[[RunContext], Partition]:
    return lambda ctx: _make(ctx, name, SHAPES[name])


# the registry's factories, one per --nemesis value
partition = _factory("partition")
partition_one = _factory("partition-one")
partition_majority = _factory("partition-majority")
partition_halves = _factory("partition-halves")
partition_ring = _factory("partition-ring")
partition_bridge = _factory("partition-bridge")
partition_clients = _factory("partition-clients")


def partition_primary(ctx: RunContext) -> Partition:
    db = ctx.db
    assert isinstance(db, HasPrimary)

    def shape(nodes: list[str], clients: list[str], rng: random.Random) -> Cut:
        # asked at each start: the primary may have moved since the last fault
        return grudge.with_clients(grudge.primaries(db.primaries())(nodes, rng), clients, rng)

    return _make(ctx, "partition-primary", shape)
