"""Process faults on the servers: SIGKILL then start again, SIGSTOP then SIGCONT.

They act through the database's optional capabilities (`cluster.api.Killable`,
`Pausable`), so they work for every backend that has them, and a heal brings back
every server, not only those this nemesis remembers touching.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import HasPrimary, Killable, Pausable, StartsTogether
from lockcheck.nemesis.api import Holding, RunContext

Targets = Callable[[list[str], random.Random], list[str]]


def pick_targets(names: list[str], rng: random.Random) -> list[str]:
    """One node, or (with several nodes) sometimes a minority of them."""
    n = len(names)
    if n <= 2 or rng.random() < 0.6:
        return [names[rng.randrange(n)]]
    return sorted(rng.sample(names, rng.randint(1, (n - 1) // 2)))


def some(count: Callable[[int], int]) -> Targets:
    """That many nodes, chosen at random each time."""
    def targets(names: list[str], rng: random.Random) -> list[str]:
        return sorted(rng.sample(names, min(len(names), count(len(names)))))

    return targets


# `--kill-targets`, as Jepsen's target specs; a majority is what it takes to make a
# quorum system (Redlock) forget what a majority had granted
TARGET_SPECS: dict[str, Targets] = {
    "one-or-minority": pick_targets,
    "one": some(lambda n: 1),
    "minority": some(lambda n: max(1, (n - 1) // 2)),
    "majority": some(lambda n: n // 2 + 1),
    "all": some(lambda n: n),
}


def bare(h: Holding, names: list[str]) -> bool:
    """The holder's key is on exactly a quorum: every other server said no."""
    return (len(h.granted_by) == len(names) // 2 + 1
            and len(h.granted_by) + len(h.refused_by) == len(names))


def in_a_holders_quorum(holders: Callable[[], list[Holding]], wait_s: float) -> Targets:
    """One server of the quorum that granted a lock held right now, the kill aimed where
    a restart empty does harm: a member of a bare quorum restarted empty lets a rival
    make a quorum of its own while the holder works on. Waits up to `wait_s` (the run
    passes the larger of the nemesis interval and two TTLs) for a holder on a bare
    quorum (a grant that raced the previous holder's release gets one), then takes the
    smallest quorum held, then one node at random (nobody holds a lock whose quorum
    the client named: only Redlock's client names one)."""
    def targets(names: list[str], rng: random.Random) -> list[str]:
        deadline = time.monotonic() + wait_s
        while True:
            # a grant by fewer than a quorum is one member's answer (ZooKeeper names
            # the member a session is on), not a quorum a restart could break
            known = [h for h in holders() if len(h.granted_by) >= len(names) // 2 + 1
                     and set(h.granted_by) <= set(names)]
            aimed = [h for h in known if bare(h, names)]
            if aimed or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        if not aimed and known:
            fewest = min(len(h.granted_by) for h in known)
            aimed = [h for h in known if len(h.granted_by) == fewest]
        if not aimed:
            return [names[rng.randrange(len(names))]]
        return [rng.choice(rng.choice(aimed).granted_by)]

    return targets


# `--kill-targets` aimed at what the clients hold, made from the run's live holders
HOLDER_TARGETS: dict[str, Callable[[Callable[[], list[Holding]], float], Targets]] = {
    "holder-quorum": in_a_holders_quorum,
}


def _all_or_raise(what: str, nodes: list[str], fn: Any) -> None:
    """Apply `fn` to every node even if some fail; then raise naming the failures."""
    failed = []
    for n in nodes:
        try:
            fn(n)
        except Exception as e:
            failed.append(f"{n}: {e}")
    if failed:
        raise RuntimeError(f"{what} failed on " + "; ".join(failed))


def primaries(db: object) -> Targets:
    """Target the nodes the service itself names as primary or leader right now."""
    assert isinstance(db, HasPrimary)

    def targets(names: list[str], rng: random.Random) -> list[str]:
        return [n for n in db.primaries() if n in names]

    return targets


@dataclass
class Kill:
    db: Killable
    nodes: list[str]
    hold_s: float  # --restart-delay-ms: a crashed server that its supervisor restarts
    name: str = "kill"
    start_f: str = "kill"
    stop_f: str = "restart"
    targets: Targets = pick_targets
    _down: list[str] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        self._down = self.targets(self.nodes, rng)
        for n in self._down:
            self.db.kill(n)
        return {"fault": self.name, "targets": list(self._down), "nodes": list(self._down)}

    def stop(self) -> dict[str, Any]:
        names = list(self._down)
        self.heal()
        return {"fault": self.name, "targets": names, "nodes": names}

    def heal(self) -> None:
        self._down = []
        down = [n for n in self.nodes if not self.db.alive(n)]
        if len(down) > 1 and isinstance(self.db, StartsTogether):
            try:
                self.db.start_together(down)
            except Exception as e:
                raise RuntimeError(f"restart failed on {', '.join(down)}: {e}") from e
            return
        _all_or_raise("restart", down, self.db.start)


@dataclass
class Pause:
    db: Pausable
    nodes: list[str]
    hold_s: float
    name: str = "pause"
    start_f: str = "pause"
    stop_f: str = "resume"
    targets: Targets = pick_targets
    _paused: list[str] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        self._paused = self.targets(self.nodes, rng)
        for n in self._paused:
            self.db.pause(n)
        return {"fault": self.name, "targets": list(self._paused), "nodes": list(self._paused)}

    def stop(self) -> dict[str, Any]:
        names = list(self._paused)
        self.heal()
        return {"fault": self.name, "targets": names, "nodes": names}

    def heal(self) -> None:
        # resume everything, not only what we remember pausing: SIGCONT is harmless
        self._paused = []
        _all_or_raise("resume", self.nodes, self.db.resume)


def kill(ctx: RunContext) -> Kill:
    assert isinstance(ctx.db, Killable)
    spec = ctx.spec.kill_targets
    aimed = HOLDER_TARGETS.get(spec)
    return Kill(ctx.db, [n.name for n in ctx.cluster.nodes], ctx.spec.restart_delay,
                targets=(aimed(ctx.holders, max(ctx.spec.nemesis_interval,
                                                ctx.spec.ttl_ms / 500.0))
                         if aimed else TARGET_SPECS[spec]))


def outage(ctx: RunContext) -> Kill:
    """Every server killed at once, for longer than a lease: no lock service at all.
    Two TTLs at least, so that every lease granted before it has run out."""
    assert isinstance(ctx.db, Killable)
    return Kill(ctx.db, [n.name for n in ctx.cluster.nodes],
                max(ctx.spec.fault_duration, 2 * ctx.spec.ttl_ms / 1000.0),
                name="outage", start_f="start-outage", stop_f="stop-outage",
                targets=TARGET_SPECS["all"])


def pause(ctx: RunContext) -> Pause:
    assert isinstance(ctx.db, Pausable)
    return Pause(ctx.db, [n.name for n in ctx.cluster.nodes], ctx.spec.fault_duration)


def kill_primary(ctx: RunContext) -> Kill:
    assert isinstance(ctx.db, Killable)
    return Kill(ctx.db, [n.name for n in ctx.cluster.nodes], ctx.spec.restart_delay,
                name="kill-primary", targets=primaries(ctx.db))


def pause_primary(ctx: RunContext) -> Pause:
    assert isinstance(ctx.db, Pausable)
    return Pause(ctx.db, [n.name for n in ctx.cluster.nodes], ctx.spec.fault_duration,
                 name="pause-primary", targets=primaries(ctx.db))
