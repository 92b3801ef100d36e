"""The client pause: SIGSTOP a worker while it holds a lock, for longer than its TTL.

The GC pause, Kleppmann's scenario A: the holder stops (its renewals too: every
thread of the process stops), its lease expires, another client is granted the lock,
and the holder wakes up believing it still holds it. No lock service can prevent
this; only a resource that checks the fence can. The victim is chosen from the live
history (`Holders`), so every pause hits someone inside a critical section.

With `--pause-at release` the pause lands instead while a holder releases: a stall
between a check and the act that depends on it (GET, then DEL) is what a release that
is not atomic gets wrong, and a random pause almost never lands in that window. A
client whose release has that window (`Backend.stops_at_release`) is armed like at
acquire, below, and stops itself between its check and its act (`stop-at-release`);
any other is stopped from outside the moment it records the end of its critical
section, before its release is sent.

With `--pause-at acquire` the pause lands with a grant's replies in flight
(Kleppmann's third scenario): the workers that have held a lock are armed (SIGUSR1)
and the first one to be granted a lock again stops itself, after a quorum of grants
came back and before its lock algorithm reads them (`workloads/stop_point.py`); it
says so first with a `stop-at-acquire` event, which is when the pause starts. A
client that checks the elapsed time against the TTL after reading them (Redlock's
rule) refuses the late grant; one that does not believes in keys that expired while
it slept.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcheck.nemesis.api import Holding, RunContext, WorkerRef
from lockcheck.workloads.stop_point import ARM, DISARM, EVENTS

if TYPE_CHECKING:
    from lockcheck.intake import EventRow
    from lockcheck.spec import TestSpec

# an enter as the intake saw it: (worker, process, key, value, since_ns), the value a
# dict or its JSON text, made a Holding only when a fault asks (most runs never do)
_Entered = tuple[int, Any, str, Any, int]


class Holders:
    """Who is inside a critical section right now, from the ops as they arrive.

    `on_watch`, if set, is called once, when a fault first asks (the intake then
    delivers ops sooner: `Intake.hurry`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside: dict[tuple[str, Any], _Entered] = {}
        self._exited = threading.Condition(self._lock)
        self._waiting = 0  # threads in a wait: only then does an event notify
        self._exits = 0
        self._last_exit: _Entered | None = None
        self._stops: list[Holding] = []  # stop-at-acquire/-release events, in order
        self._entered: set[int] = set()  # workers that have held a lock (they are up)
        self._enters = 0
        self._recent: deque[tuple[int, _Entered]] = deque(maxlen=256)  # (count, enter)
        # holders another process was granted the same lock from, while they were inside
        self._overtaken: set[tuple[str, int, int]] = set()
        self.on_watch: Callable[[], None] | None = None

    def _watched(self) -> None:
        hook, self.on_watch = self.on_watch, None
        if hook is not None:
            hook()

    def observe(self, op: Mapping[str, Any]) -> None:
        # on every enter and exit of the run, in the intake's thread: kept cheap
        if op.get("type") != "event":
            return
        key = op.get("key")
        if key is None:
            return
        with self._lock:
            self._event(int(op.get("time", 0)), op.get("process"), op.get("f"), key,
                        int(op.get("worker", -1)), op.get("value"))

    def events(self, rows: Sequence[EventRow]) -> None:
        """A wake-up's events as rows (`observe` for each, without a dict per event)."""
        with self._lock:
            for _, t, p, f, key, worker, value in rows:
                if key is not None:
                    self._event(t, p, f, key, worker, value)

    def _event(self, t: int, p: Any, f: Any, key: str, worker: int, value: Any) -> None:
        if f == "enter":
            self._entered.add(worker)
            for x in self._inside.values():
                if x[2] == key and x[1] != p:
                    self._overtaken.add(_entered_ident(x))
            held = self._inside[(key, p)] = (worker, p, key, value, t)
            self._enters += 1
            self._recent.append((self._enters, held))
            self._notify()
        elif f == "exit":
            h = self._inside.pop((key, p), None)
            if h is not None:
                self._last_exit, self._exits = h, self._exits + 1
                self._notify()
        elif f in _STOP_EVENTS:
            v = _value(value)
            self._stops.append(Holding(
                worker=worker, process=int(p if p is not None else -1),
                key=str(key), fence=v.get("fence"), since_ns=t))
            self._notify()

    def _notify(self) -> None:
        if self._waiting:
            self._exited.notify_all()

    def _wait_for(self, ready: Callable[[], bool], timeout: float) -> bool:
        """`Condition.wait_for`, counted (the lock is held)."""
        self._waiting += 1
        try:
            return self._exited.wait_for(ready, timeout)
        finally:
            self._waiting -= 1

    def now(self) -> list[Holding]:
        self._watched()
        with self._lock:
            return [_holding(e) for e in self._inside.values()]

    def stopped_at_point(self, arm: Callable[[Collection[int]], object],
                         workers: Collection[int], timeout: float) -> Holding | None:
        """Call `arm` with those of `workers` that have held a lock already (so they
        have their signal handlers: the signal would kill a worker still starting),
        telling them to stop at their stop point (the next granted acquire, or the next
        release's check); then wait for the first `stop-at-...` event of one of them.
        None if none came in time."""
        self._watched()
        with self._lock:
            seen = len(self._stops)
            workers = {w for w in workers if w in self._entered}
        if not workers:
            return None
        arm(workers)
        with self._lock:
            found: list[Holding] = []

            def came() -> bool:
                found[:] = [h for h in self._stops[seen:] if h.worker in workers]
                return bool(found)

            self._wait_for(came, timeout)
            return found[0] if found else None

    def next_enter(self, timeout: float,
                   accept: Callable[[Holding], bool] = lambda h: True) -> Holding | None:
        """The next holder to enter a critical section from now on (just granted) that
        `accept`s, or None if none does within `timeout` seconds."""
        self._watched()
        with self._lock:
            seen = self._enters
            found: list[Holding] = []

            def came() -> bool:
                nonlocal seen
                new = [_holding(e) for n, e in self._recent if n > seen]
                seen = self._enters
                found[:] = [h for h in new if accept(h)][:1]
                return bool(found)

            self._wait_for(came, timeout)
            return found[0] if found else None

    def taken_over(self, h: Holding) -> bool:
        """Another process was granted `h`'s lock while `h` was still inside."""
        self._watched()
        with self._lock:
            return _ident(h) in self._overtaken

    def next_exit(self, timeout: float) -> Holding | None:
        """The next holder to leave its critical section from now on (it is releasing
        right now), or None if nobody does within `timeout` seconds."""
        self._watched()
        with self._lock:
            seen = self._exits
            if not self._wait_for(lambda: self._exits != seen, timeout):
                return None
            return None if self._last_exit is None else _holding(self._last_exit)


_STOP_EVENTS = frozenset(EVENTS.values())


def _value(value: Any) -> dict[str, Any]:
    """An event's value as a dict: it may come as its JSON text (an event row)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    return value if isinstance(value, dict) else {}


def _holding(e: _Entered) -> Holding:
    worker, p, key, value, since = e
    v = _value(value)
    return Holding(worker=worker, process=int(p if p is not None else -1), key=str(key),
                   fence=v.get("fence"), since_ns=since,
                   granted_by=tuple(str(n) for n in v.get("granted_by") or ()),
                   refused_by=tuple(str(n) for n in v.get("refused_by") or ()))


def _entered_ident(e: _Entered) -> tuple[str, int, int]:
    """`_ident(_holding(e))`, without decoding the value."""
    return str(e[2]), int(e[1] if e[1] is not None else -1), e[4]


def _ident(h: Holding) -> tuple[str, int, int]:
    return h.key, h.process, h.since_ns


StoppedAtPoint = Callable[[Callable[[Collection[int]], object], Collection[int], float],
                          Holding | None]


def stop_one_at_point(live: Sequence[WorkerRef], stopped_at_point: StoppedAtPoint,
                      wait_s: float) -> tuple[Holding | None, list[WorkerRef]]:
    """Arm `live` workers to stop at their stop point, wait up to `wait_s` for the
    first to say it did, and disarm them all (a stopped worker handles that when it is
    resumed): the one that stopped (or None), and every worker that was armed."""
    armed: list[WorkerRef] = []

    def arm(ready: Collection[int]) -> None:
        armed.extend(w for w in live if w.index in ready)
        for w in armed:
            w.daemon.signal(ARM)

    h = stopped_at_point(arm, {w.index for w in live}, wait_s)
    for w in armed:
        w.daemon.signal(DISARM)
    return h, armed


@dataclass
class ClientPause:
    workers: Sequence[WorkerRef]
    holders: Callable[[], list[Holding]]
    hold_s: float  # --pause-ms
    wait_s: float  # how long to wait for someone to hold a lock
    # set: pause at release, from outside (Holders.next_exit)
    next_exit: Callable[[float], Holding | None] | None = None
    # set: pause at the workers' own stop point, `point` (Holders.stopped_at_point)
    stopped_at_point: Callable[[Callable[[Collection[int]], object], Collection[int],
                                float], Holding | None] | None = None
    point: str = "acquire"
    name: str = "client-pause"
    start_f: str = "pause-client"
    stop_f: str = "resume-client"
    _paused: list[WorkerRef] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        if self.stopped_at_point is not None:
            return self._at_point()
        if self.next_exit is not None:
            return self._at_release()
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
        return self._stop(by_index[h.worker], h)

    def _at_release(self) -> dict[str, Any]:
        assert self.next_exit is not None
        by_index = {w.index: w for w in self.workers}
        deadline = time.monotonic() + self.wait_s
        while (left := deadline - time.monotonic()) > 0:
            h = self.next_exit(left)
            if h is not None and h.worker in by_index and by_index[h.worker].daemon.alive():
                return {**self._stop(by_index[h.worker], h), "at": "release"}
        return {"fault": self.name, "targets": [], "skipped": "no client released a lock"}

    def _at_point(self) -> dict[str, Any]:
        """Every live worker is armed and the first one to reach its stop point stops
        itself: an armed worker of its own could wait long (at acquire, the holder that
        releases asks again at once and often wins). The others are disarmed right
        after."""
        assert self.stopped_at_point is not None
        live = [w for w in self.workers if w.daemon.alive()]
        if not live:
            return {"fault": self.name, "targets": [], "skipped": "no live client"}

        h, _ = stop_one_at_point(live, self.stopped_at_point, self.wait_s)
        if h is None:
            what = "was granted" if self.point == "acquire" else "released"
            return {"fault": self.name, "targets": [], "skipped": f"no client {what} a "
                                                                  "lock in time"}
        w = next(x for x in live if x.index == h.worker)
        self._paused = [w]  # it stopped itself; from now on it is paused like any other
        fence = {} if h.fence is None else {"fence": h.fence}
        return {"fault": self.name, "targets": [w.host], "worker": w.index,
                "process": h.process, "key": h.key, **fence, "at": self.point,
                "pause_ms": round(self.hold_s * 1000)}

    def _stop(self, w: WorkerRef, h: Holding) -> dict[str, Any]:
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
    # the worker stops itself where its client has the point; else it is stopped from
    # outside (at release: as it starts to release; otherwise inside its section)
    own = spec.pause_at == "acquire" or (spec.pause_at == "release"
                                         and stops_at_release(spec))
    return ClientPause(ctx.workers, ctx.holders, pause_ms / 1000.0,
                       wait_s=max(1.0, spec.hold_ms[1] / 1000.0),
                       next_exit=ctx.next_exit if spec.pause_at == "release" else None,
                       stopped_at_point=ctx.stopped_at_point if own else None,
                       point=spec.pause_at)


def stops_at_release(spec: TestSpec) -> bool:
    """Whether the run's client stops itself between its release's check and act: the
    backend's own client, where it says so (a client of the user's is not known to)."""
    from lockcheck.backends import BACKENDS

    b = BACKENDS.get(spec.backend)
    return spec.client is None and b is not None and b.stops_at_release
