"""Failover on demand: the service itself changes its primary or drops its sessions.

`redis-sentinel`: ask the Sentinels to fail over (the old primary's writes that did not
reach the new one are lost: "a replica failover can hand the same lock to
two owners"); `postgres`: terminate the backends of the sessions that hold locks. The
database does it (`cluster.api.CanFailover`); nothing is left to heal afterwards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from lockcheck.cluster.api import CanFailover
from lockcheck.nemesis.api import RunContext


@dataclass
class Failover:
    db: CanFailover
    hold_s: float
    name: str = "failover"
    start_f: str = "failover"
    stop_f: str = "failover-done"

    def start(self, rng: random.Random) -> dict[str, Any]:
        value = dict(self.db.failover(rng))
        value.setdefault("targets", [])
        return {"fault": self.name, **value}

    def stop(self) -> dict[str, Any]:
        return {"fault": self.name, "targets": []}

    def heal(self) -> None:
        """A failover is not undone: the service is whole again by itself."""


def failover(ctx: RunContext) -> Failover:
    assert isinstance(ctx.db, CanFailover)
    return Failover(ctx.db, ctx.spec.nemesis_interval)
