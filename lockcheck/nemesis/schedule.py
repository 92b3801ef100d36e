"""Runs the nemeses on a schedule, records each fault, and always heals at the end."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lockcheck.nemesis.api import Nemesis

log = logging.getLogger("lockcheck.nemesis")

Record = Callable[[str, str, Any], None]  # (type, f, value)


class NemesisSchedule(threading.Thread):
    """quiet `interval` -> start a random fault -> hold it -> stop it -> repeat.

    A fault is held for `interval`, except kill, whose restart follows after
    `restart_delay` (a crashed server that its supervisor restarts).
    """

    def __init__(self, nemeses: Sequence[Nemesis], *, interval: float, restart_delay: float,
                 until: float, rng: random.Random, record: Record) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.nemeses = list(nemeses)
        self.interval, self.restart_delay, self.until = interval, restart_delay, until
        self.rng, self.record = rng, record
        self.stop_event = threading.Event()
        self.active: Nemesis | None = None
        self.faults = 0
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped or past the schedule's end; False if we must stop."""
        end = min(time.monotonic() + seconds, self.until)
        return not self.stop_event.wait(max(0.0, end - time.monotonic())) and \
            time.monotonic() < self.until

    def run(self) -> None:
        try:
            while self.nemeses and self._sleep(self.interval):
                nem = self.rng.choice(self.nemeses)
                with self.lock:
                    if self.stop_event.is_set():
                        break
                    self.record("invoke", nem.start_f, None)
                    self.active = nem
                    value = nem.start(self.rng)
                    self.faults += 1
                    self.record("info", nem.start_f, value)
                hold = self.restart_delay if nem.name == "kill" else self.interval
                self._sleep(hold)
                self.stop_active()
        except BaseException as e:  # surfaced by the runner; heal still runs
            log.exception("nemesis failed")
            self.error = e

    def stop_active(self) -> None:
        with self.lock:
            nem, self.active = self.active, None
            if nem is None:
                return
            self.record("invoke", nem.stop_f, None)
            value = nem.stop()
            self.record("info", nem.stop_f, value)

    def finish(self) -> None:
        """Stop scheduling, end the active fault, then heal everything (idempotent)."""
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=30)
        try:
            self.stop_active()
        finally:
            heal_all(self.nemeses)


def heal_all(nemeses: Sequence[Nemesis]) -> list[str]:
    """Heal every nemesis; collect errors rather than stop at the first."""
    errors = []
    for n in nemeses:
        try:
            n.heal()
        except Exception as e:
            log.exception("heal of %s failed", n.name)
            errors.append(f"{n.name}: {e}")
    return errors
