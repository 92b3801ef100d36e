"""`pause-past-lease`: Jepsen's etcd lock-set scenario as one fault.

A holder is stopped (SIGSTOP, every thread of its worker: keepalives and watchers
too) just after it was granted and had read what it guards, and stays stopped until
its lease has run out and a rival has been granted the same lock, and until its own
critical section's time has passed. Then it wakes: its section is over by its own
clock, so it writes at once, before any keepalive or watcher can tell it the lease is
gone; the rival read the same state and writes too, and one of the two writes erases
the other's (a lost update in `lock-set`, a stale write in `fenced`).

A pause at a random moment (`client-pause`) has to land early enough in a section,
and last longer than the lease etcd really grants (at least 2 s, whatever the TTL
asked for); this one waits for both, and ends as soon as the rival holds the lock
(`EndsItself`), at the latest after `--pause-ms` (default 4x TTL plus the longest
section).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lockcheck.nemesis.api import Holding, RunContext, WorkerRef

# how long after the grant the pause lands: the section's first op (the read of
# `lock-set`, a few milliseconds) has gone out by then, and the shortest default
# section (50 ms) has not ended
SETTLE_S = 0.02


def pause_over(elapsed_s: float, taken_over: bool, section_s: float) -> bool:
    """The pause has done its work: a rival holds the lock, and the paused holder's
    longest section has passed (it wakes with nothing left to do but write)."""
    return taken_over and elapsed_s >= section_s


def aimable(h: Holding, workers: dict[int, WorkerRef]) -> bool:
    """A holder the fault can stop: a worker of this run that is running."""
    w = workers.get(h.worker)
    return w is not None and w.daemon.alive()


@dataclass
class PausePastLease:
    workers: Sequence[WorkerRef]
    next_enter: Callable[[float, Callable[[Holding], bool]], Holding | None]
    taken_over: Callable[[Holding], bool]
    hold_s: float  # the longest a pause lasts (--pause-ms)
    section_s: float  # the longest critical section (--hold-ms's upper bound)
    wait_s: float  # how long to wait for a grant to aim at
    settle_s: float = SETTLE_S
    name: str = "pause-past-lease"
    start_f: str = "pause-client"
    stop_f: str = "resume-client"
    _paused: WorkerRef | None = None
    _aimed: Holding | None = None
    _since: float = 0.0

    def start(self, rng: random.Random) -> dict[str, Any]:
        by_index = {w.index: w for w in self.workers}
        h = self.next_enter(self.wait_s, lambda x: aimable(x, by_index))
        if h is None:
            return {"fault": self.name, "targets": [], "skipped": "no client was granted "
                                                                  "a lock in time"}
        time.sleep(self.settle_s)
        w = by_index[h.worker]
        w.daemon.signal(signal.SIGSTOP)
        self._paused, self._aimed, self._since = w, h, time.monotonic()
        return {"fault": self.name, "targets": [w.host], "worker": w.index,
                "process": h.process, "key": h.key, "fence": h.fence, "at": "grant",
                "pause_ms": round(self.hold_s * 1000)}

    def ended(self) -> bool:
        h = self._aimed
        return h is not None and pause_over(time.monotonic() - self._since,
                                            self.taken_over(h), self.section_s)

    def stop(self) -> dict[str, Any]:
        names = [self._paused.host] if self._paused is not None else []
        taken = self._aimed is not None and self.taken_over(self._aimed)
        held = round((time.monotonic() - self._since) * 1000) if self._paused else 0
        self.heal()
        return {"fault": self.name, "targets": names, "taken_over": taken,
                "paused_ms": held}

    def heal(self) -> None:
        self._paused, self._aimed = None, None
        for w in self.workers:  # every worker: SIGCONT of a running process is harmless
            w.daemon.signal(signal.SIGCONT)


def pause_past_lease(ctx: RunContext) -> PausePastLease:
    spec = ctx.spec
    assert ctx.next_enter is not None and ctx.taken_over is not None
    section_s = spec.hold_ms[1] / 1000.0
    pause_ms = spec.pause_ms if spec.pause_ms is not None else 4 * spec.ttl_ms + \
        spec.hold_ms[1]
    return PausePastLease(ctx.workers, ctx.next_enter, ctx.taken_over, pause_ms / 1000.0,
                          section_s=section_s,
                          wait_s=max(1.0, spec.nemesis_interval, 2 * section_s))
