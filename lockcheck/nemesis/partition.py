"""Network partitions with packet-drop rules inside the namespaces.

Two shapes: random halves of the nodes, or one node isolated from the others. Each
client goes with one side, chosen at random, so some clients keep reaching the
nodes they can talk to and lose the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import ClientHost, HasPrimary, Node
from lockcheck.nemesis.api import RunContext


def split(nodes: Sequence[str], clients: Sequence[str], rng: random.Random,
          kind: str) -> tuple[list[str], list[str]]:
    """Pick two sides. Pure, so it is unit-tested without a cluster."""
    names = list(nodes)
    rng.shuffle(names)
    if kind == "isolate":
        a, b = names[:1], names[1:]
    else:
        cut = max(1, len(names) // 2) if len(names) > 1 else rng.randint(0, 1)
        a, b = names[:cut], names[cut:]
    return with_clients(a, b, clients, rng)


def with_clients(a: Sequence[str], b: Sequence[str], clients: Sequence[str],
                 rng: random.Random) -> tuple[list[str], list[str]]:
    """Given the nodes of each side, each client joins one side at random."""
    a, b = list(a), list(b)
    for c in clients:
        (a if rng.random() < 0.5 else b).append(c)
    return a, b


def grudges(a: Sequence[str], b: Sequence[str]) -> dict[str, list[str]]:
    """Who drops whom: every host on one side drops everyone on the other."""
    g: dict[str, list[str]] = {h: list(b) for h in a}
    g.update({h: list(a) for h in b})
    return g


# (node names, client names, rng) -> (kind, side a, side b)
Sides = Callable[[list[str], list[str], random.Random], tuple[str, list[str], list[str]]]


def halves_or_isolate(nodes: list[str], clients: list[str],
                      rng: random.Random) -> tuple[str, list[str], list[str]]:
    kind = "isolate" if len(nodes) > 2 and rng.random() < 0.5 else "halves"
    a, b = split(nodes, clients, rng, kind)
    return kind, a, b


@dataclass
class Partition:
    nodes: list[Node]
    clients: list[ClientHost]
    hold_s: float = 3.0
    name: str = "partition"
    start_f: str = "start-partition"
    stop_f: str = "stop-partition"
    sides: Sides = halves_or_isolate
    _cut: list[Node | ClientHost] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        kind, a, b = self.sides([n.name for n in self.nodes], [c.name for c in self.clients],
                                rng)
        by_name: dict[str, Node | ClientHost] = {h.name: h for h in self.hosts}
        for host, enemies in grudges(a, b).items():
            if enemies:
                by_name[host].block([by_name[e].address for e in enemies])
                self._cut.append(by_name[host])
        return {"fault": self.name, "targets": list(a), "sides": [a, b], "kind": kind}

    def stop(self) -> dict[str, Any]:
        healed = sorted({h.name for h in self._cut})
        self.heal()
        return {"fault": self.name, "targets": healed, "healed": healed}

    @property
    def hosts(self) -> list[Node | ClientHost]:
        return [*self.nodes, *self.clients]

    def heal(self) -> None:
        failed = []
        for h in self.hosts:
            try:
                h.heal()
            except Exception as e:
                failed.append(f"{h.name}: {e}")
        self._cut.clear()
        if failed:
            raise RuntimeError("heal failed on " + "; ".join(failed))


def partition(ctx: RunContext) -> Partition:
    return Partition(list(ctx.cluster.nodes), list(ctx.cluster.clients),
                     hold_s=ctx.spec.nemesis_interval)


def partition_primary(ctx: RunContext) -> Partition:
    db = ctx.db
    assert isinstance(db, HasPrimary)

    def sides(nodes: list[str], clients: list[str],
              rng: random.Random) -> tuple[str, list[str], list[str]]:
        leaders = [n for n in db.primaries() if n in nodes]
        a, b = with_clients(leaders, [n for n in nodes if n not in leaders], clients, rng)
        return "primary", a, b

    return Partition(list(ctx.cluster.nodes), list(ctx.cluster.clients),
                     hold_s=ctx.spec.nemesis_interval, name="partition-primary", sides=sides)
