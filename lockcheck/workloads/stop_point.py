"""The worker's side of `client-pause --pause-at acquire` and, for a client whose release
is a check then an act, `--pause-at release`: stop itself at a point too short for a
signal from outside to hit.

Kleppmann's third scenario is a client that sends its lock requests and stops before
it reads the answers; meanwhile the keys expire and another client takes the lock. The
window (the replies sit in the client's buffers) lasts microseconds, so no signal from
outside can hit it reliably. Instead the controller *arms* the workers (SIGUSR1), and
each worker's lock client calls this hook at the point (`ClientOptions.at_grant_reply`:
a quorum of grants is in, the algorithm has not looked at them). Armed, the hook
records a `stop-at-acquire` event, flushes it, disarms and SIGSTOPs its own process:
every thread stops there. The nemesis sees the event, waits `--pause-ms` and resumes
the worker with SIGCONT. SIGUSR2 disarms the workers that did not get that far first.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

ARM, DISARM = signal.SIGUSR1, signal.SIGUSR2
POINTS = ("acquire", "release")  # where a worker can stop itself (`--pause-at`)
EVENTS = {at: f"stop-at-{at}" for at in POINTS}  # the event it records first
# `reply-loss`: a worker stops itself just before it sends one of these ops, so that
# the controller can drop the replies to its host before the request goes out
SENDS = ("acquire", "renew", "release")
EVENTS.update({f"send-{op}": f"stop-before-{op}" for op in SENDS})

Record = Callable[..., None]  # the worker's Recorder: (process, type, f, key, value)


class StopPoint:
    """The hook a lock client calls at the point `at` names: once per granted acquire,
    before it reads the grant; or once per release, between its check and its act."""

    def __init__(self, rec: Record, flush: Callable[[], None], worker: int,
                 at: str = "acquire", stop: Callable[[], None] | None = None) -> None:
        self.rec, self.flush, self.at = rec, flush, at
        # aimed at this thread (tgkill), so that it stops on its way back from the call:
        # a SIGSTOP sent to the process with kill() was once taken up late, after the
        # lock client had read its replies (0.6 ms later, on a loaded machine)
        self.stop = stop or (lambda: signal.pthread_kill(threading.get_ident(),
                                                         signal.SIGSTOP))
        self.process: Callable[[], int] = lambda: worker
        self.armed = False
        self.lock = threading.Lock()

    def install(self) -> None:
        """The signal handlers (the main thread only: Python's rule)."""
        signal.signal(ARM, self._on_signal)
        signal.signal(DISARM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> Any:
        with self.lock:
            self.armed = signum == ARM

    def __call__(self, key: str, fence: Any = None) -> None:
        with self.lock:
            armed, self.armed = self.armed, False
        if not armed:
            return
        value: dict[str, Any] = {"at": self.at}
        if fence is not None:
            value["fence"] = fence
        self.rec(self.process(), "event", EVENTS[self.at], key, value)
        self.flush()  # the controller must see it before we stop
        self.stop()
