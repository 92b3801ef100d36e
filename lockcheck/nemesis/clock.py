"""Clock faults: a server's or a client's wall clock moved, never the machine's.

Servers' clocks move through the node's own machine clock where the node is a host of
its own (`cluster.api.HostClock`: the ssh provider's real hosts and VMs, `date -s`,
set back at every stop and heal), else through the database's `Clock` capability
(Redis, PostgreSQL: libfaketime per process, `cluster/faketime.py`); clients' clocks
through a clock file per client
host, read by libfaketime in the worker (prepared before the workers start, only when
`--clock-targets` includes clients). Only wall clocks move: every process keeps the
true CLOCK_MONOTONIC, which stamps the history and the clients' own lease clocks.

* `clock-skew`: each target is set off by its own random offset, up to
  `--clock-offset-ms` either way, for the fault's duration.
* `clock-bump`: each target jumps `--clock-offset-ms` forward (a key whose TTL is
  shorter expires at once: Kleppmann's scenario B), then back at the end.
* `clock-rate`: each target's clock runs `--clock-rate` times as fast, so its TTLs
  expire early (below 1: late). The offset is moved every `STEP_MS` by a thread here,
  since libfaketime's own rate counts from the process's start (see faketime.py).
* `clock-strobe`: each target flips between `--clock-offset-ms` ahead and true time
  every `--clock-period-ms` (Jepsen's strobe).

Every stop and heal sets the clocks back to the true time (a step back: a TTL counted
on a clock that was ahead lasts longer again).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.cluster import faketime
from lockcheck.cluster.api import Clock, HostClock
from lockcheck.cluster.node import replace_file
from lockcheck.nemesis.api import PrepareContext, RunContext
from lockcheck.nemesis.process import pick_targets

log = logging.getLogger("lockcheck.nemesis")

STEP_MS = 20  # how often a fast clock's offset moves


@dataclass
class ClientClocks:
    """The clients' clock files (a `Prepared`): a worker on a host with one starts with
    libfaketime reading it."""

    files: dict[str, Path] = field(default_factory=dict)

    def worker_env(self, host: str) -> Mapping[str, str]:
        f = self.files.get(host)
        return faketime.env(f, shim=False) if f is not None else {}

    def set(self, host: str, offset_ms: float) -> None:
        replace_file(self.files[host], faketime.spec(offset_ms))

    def close(self) -> None:
        """The files go with the run's temp folder; nothing runs on them any more."""


def prepare(ctx: PrepareContext) -> ClientClocks:
    clocks = ClientClocks()
    if ctx.spec.clock_targets == "nodes":
        return clocks
    d = ctx.cluster.workdir / "clocks"
    d.mkdir(parents=True, exist_ok=True)
    for c in ctx.cluster.clients:
        clocks.files[c.name] = d / f"{c.name}.rc"
        clocks.set(c.name, 0.0)
    return clocks


@dataclass
class Clocks:
    """Every clock a fault may move, by host name."""

    db: Clock | None
    nodes: list[str]  # the server nodes whose clocks may move
    clients: ClientClocks
    machines: Mapping[str, HostClock] = field(default_factory=dict)  # by node name

    def set(self, host: str, offset_ms: float) -> None:
        if host in self.clients.files:
            self.clients.set(host, offset_ms)
        elif host in self.machines:
            self.machines[host].set_clock(offset_ms)
        else:
            assert self.db is not None, f"no clock to move on {host}"
            self.db.set_clock(host, offset_ms)

    def reset_all(self) -> None:
        """Every clock back to true time, even if some fail; then raise naming them."""
        failed = []
        for h in [*self.nodes, *self.clients.files]:
            try:
                if h in self.clients.files:
                    self.clients.set(h, 0.0)
                elif h in self.machines:
                    self.machines[h].reset_clock()
                else:
                    assert self.db is not None
                    self.db.reset_clock(h)
            except Exception as e:
                failed.append(f"{h}: {e}")
        if failed:
            raise RuntimeError("clock reset failed on " + "; ".join(failed))


# seconds since the fault started -> the offsets (ms) its targets' clocks have now
Offsets = Callable[[float], Mapping[str, float]]


@dataclass(frozen=True)
class Move:
    """How a fault moves its targets' clocks: what the history says, the offsets over
    time, and whether they change while it lasts (then a thread sets them each step)."""

    value: dict[str, Any]
    offsets: Offsets
    moving: bool = False


Plan = Callable[[list[str], random.Random], Move]


@dataclass
class ClockFault:
    clocks: Clocks
    candidates: list[str]
    hold_s: float
    name: str
    start_f: str
    plan: Plan
    step_s: float = STEP_MS / 1000.0
    stop_f: str = "reset-clock"
    _targets: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, rng: random.Random) -> dict[str, Any]:
        self._targets = pick_targets(self.candidates, rng)
        move = self.plan(self._targets, rng)
        self._apply(move.offsets(0.0))
        if move.moving:
            self._stop.clear()
            self._thread = threading.Thread(target=self._tick, args=(move.offsets,),
                                            name=f"{self.name}-ticker", daemon=True)
            self._thread.start()
        return {"fault": self.name, "targets": list(self._targets), **move.value}

    def _apply(self, offsets: Mapping[str, float]) -> None:
        for host, ms in offsets.items():
            self.clocks.set(host, ms)

    def _tick(self, offsets: Offsets) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self.step_s):
            try:
                self._apply(offsets(time.monotonic() - t0))
            except Exception:  # keep moving the others; the heal reports what is stuck
                log.exception("%s: moving a clock failed", self.name)

    def _end_ticker(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def stop(self) -> dict[str, Any]:
        names = list(self._targets)
        self._end_ticker()
        for h in names:
            self.clocks.set(h, 0.0)
        self._targets = []
        return {"fault": self.name, "targets": names}

    def heal(self) -> None:
        self._end_ticker()
        self._targets = []
        self.clocks.reset_all()


def _fixed(value: dict[str, Any], offsets: Mapping[str, float]) -> Move:
    return Move(value, lambda elapsed: offsets)


def skew_plan(limit_ms: int) -> Plan:
    def plan(targets: list[str], rng: random.Random) -> Move:
        offsets = {h: round(rng.choice((-1, 1)) * rng.uniform(0.5, 1.0) * limit_ms)
                   for h in targets}
        return _fixed({"offsets_ms": offsets}, {h: float(v) for h, v in offsets.items()})

    return plan


def bump_plan(offset_ms: int) -> Plan:
    def plan(targets: list[str], rng: random.Random) -> Move:
        return _fixed({"offsets_ms": dict.fromkeys(targets, offset_ms)},
                      dict.fromkeys(targets, float(offset_ms)))

    return plan


def rate_plan(rate: float) -> Plan:
    def plan(targets: list[str], rng: random.Random) -> Move:
        return Move({"rate": rate, "step_ms": STEP_MS},
                    lambda elapsed: dict.fromkeys(targets, (rate - 1.0) * elapsed * 1000.0),
                    moving=True)

    return plan


def strobe_plan(offset_ms: int, period_ms: int) -> Plan:
    def plan(targets: list[str], rng: random.Random) -> Move:
        def offsets(elapsed: float) -> Mapping[str, float]:
            ahead = int(elapsed * 1000 // period_ms) % 2 == 0
            return dict.fromkeys(targets, float(offset_ms) if ahead else 0.0)

        return Move({"offset_ms": offset_ms, "period_ms": period_ms}, offsets, moving=True)

    return plan


def clocks_of(ctx: RunContext) -> tuple[Clocks, list[str]]:
    """The clocks of this run, and the hosts a clock fault may pick from."""
    clients = ctx.prepared.get("lockcheck.nemesis.clock:prepare")
    if not isinstance(clients, ClientClocks):
        clients = ClientClocks()
    if ctx.spec.clock_targets == "clients":
        return Clocks(None, [], clients), list(clients.files)
    db = ctx.db if isinstance(ctx.db, Clock) else None
    machines = {n.name: n for n in ctx.cluster.nodes if isinstance(n, HostClock)}
    nodes = [n.name for n in ctx.cluster.nodes
             if n.name in machines or db is not None]
    return Clocks(db, nodes, clients, machines), [*nodes, *clients.files]


def _fault(ctx: RunContext, name: str, start_f: str, plan: Plan,
           step_s: float = STEP_MS / 1000.0) -> ClockFault:
    clocks, candidates = clocks_of(ctx)
    return ClockFault(clocks, candidates, ctx.spec.fault_duration, name, start_f, plan,
                      step_s=step_s)


def clock_skew(ctx: RunContext) -> ClockFault:
    return _fault(ctx, "clock-skew", "skew-clock", skew_plan(ctx.spec.clock_offset))


def clock_bump(ctx: RunContext) -> ClockFault:
    return _fault(ctx, "clock-bump", "bump-clock", bump_plan(ctx.spec.clock_offset))


def clock_rate(ctx: RunContext) -> ClockFault:
    return _fault(ctx, "clock-rate", "speed-clock", rate_plan(ctx.spec.clock_rate))


def clock_strobe(ctx: RunContext) -> ClockFault:
    period = ctx.spec.clock_period
    # tick often enough that each flip lands within a tenth of a period
    return _fault(ctx, "clock-strobe", "strobe-clock",
                  strobe_plan(ctx.spec.clock_offset, period),
                  step_s=min(STEP_MS, max(1, period // 10)) / 1000.0)
