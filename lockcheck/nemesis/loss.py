"""Packet loss: a share of the packets between some nodes and every other host is lost.

There is no netem on the machines lockcheck targets (infra.md §4a), so loss is the
same drop rule as a partition with a probability (`Node.block(sources, p)`, iptables
`statistic`): each packet from a lossy peer is dropped on its own with probability
`--loss-probability`, in both directions. The targets are one node or a minority of
them, and the lossy links are every link of a target (to other nodes and to clients).
TCP retransmits what is lost, so clients see latency and timeouts rather than errors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import ClientHost, Node
from lockcheck.nemesis import grudge
from lockcheck.nemesis.api import RunContext
from lockcheck.nemesis.partition import apply_grudge, heal_hosts
from lockcheck.nemesis.process import pick_targets


@dataclass
class Loss:
    nodes: list[Node]
    clients: list[ClientHost]
    probability: float
    hold_s: float
    name: str = "loss"
    start_f: str = "start-loss"
    stop_f: str = "stop-loss"
    _lossy: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> list[Node | ClientHost]:
        return [*self.nodes, *self.clients]

    def start(self, rng: random.Random) -> dict[str, Any]:
        targets = pick_targets([n.name for n in self.nodes], rng)
        others = [h.name for h in self.hosts if h.name not in targets]
        g = grudge.complete([targets, others])
        apply_grudge(self.hosts, g, self.probability)
        self._lossy = sorted(targets)
        return {"fault": self.name, "targets": sorted(targets),
                "probability": self.probability, "grudge": grudge.plain(g)}

    def stop(self) -> dict[str, Any]:
        names, self._lossy = self._lossy, []
        heal_hosts(self.hosts)
        return {"fault": self.name, "targets": names}

    def heal(self) -> None:
        self._lossy = []
        heal_hosts(self.hosts)


def loss(ctx: RunContext) -> Loss:
    return Loss(list(ctx.cluster.nodes), list(ctx.cluster.clients),
                ctx.spec.loss_probability, ctx.spec.fault_duration)
