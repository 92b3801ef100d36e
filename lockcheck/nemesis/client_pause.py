"""The client pause: SIGSTOP a worker while it holds a lock, for longer than its TTL.

The brief's GC pause, Kleppmann's scenario A: the holder stops (its renewals too: every
thread of the process stops), its lease expires, another client is granted the lock,
and the holder wakes up believing it still holds it. No lock service can prevent
this; only a resource that checks the fence can. The victim is chosen from the live
history (`Holders`), so every pause hits someone inside a critical section.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockcheck.nemesis.api import Holding, RunContext, WorkerRef


class Holders:
    """Who is inside a critical section right now, from the ops as they arrive."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside: dict[tuple[str, Any], Holding] = {}

    def observe(self, op: Mapping[str, Any]) -> None:
        if op.get("type") != "event" or op.get("key") is None:
            return
        k = (op["key"], op.get("process"))
        with self._lock:
            if op.get("f") == "enter":
                v = op.get("value") or {}
                self._inside[k] = Holding(
                    worker=int(op.get("worker", -1)), process=int(op.get("process", -1)),
                    key=str(op["key"]), fence=v.get("fence") if isinstance(v, dict) else None,
                    since_ns=int(op.get("time", 0)))
            elif op.get("f") == "exit":
                self._inside.pop(k, None)

    def now(self) -> list[Holding]:
        with self._lock:
            return list(self._inside.values())


@dataclass
class ClientPause:
    workers: Sequence[WorkerRef]
    holders: Callable[[], list[Holding]]
    hold_s: float  # --pause-ms
    wait_s: float  # how long to wait for someone to hold a lock
    name: str = "client-pause"
    start_f: str = "pause-client"
    stop_f: str = "resume-client"
    _paused: list[WorkerRef] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        by_index = {w.index: w for w in self.workers}
        deadline = time.monotonic() + self.wait_s
        while True:
            inside = [h for h in self.holders() if h.worker in by_index
                      and by_index[h.worker].daemon.alive()]
            if inside or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        if not inside:
            return {"fault": self.name, "targets": [], "skipped": "no client held a lock"}
        h = rng.choice(sorted(inside, key=lambda x: (x.worker, x.key)))
        w = by_index[h.worker]
        w.daemon.signal(signal.SIGSTOP)
        self._paused = [w]
        return {"fault": self.name, "targets": [w.host], "worker": w.index,
                "process": h.process, "key": h.key, "fence": h.fence,
                "pause_ms": round(self.hold_s * 1000)}

    def stop(self) -> dict[str, Any]:
        names = [w.host for w in self._paused]
        self.heal()
        return {"fault": self.name, "targets": names}

    def heal(self) -> None:
        self._paused = []
        for w in self.workers:  # every worker: SIGCONT of a running process is harmless
            w.daemon.signal(signal.SIGCONT)


def client_pause(ctx: RunContext) -> ClientPause:
    spec = ctx.spec
    pause_ms = spec.pause_ms if spec.pause_ms is not None else 2 * spec.ttl_ms
    return ClientPause(ctx.workers, ctx.holders, pause_ms / 1000.0,
                       wait_s=max(1.0, spec.hold_ms[1] / 1000.0))
