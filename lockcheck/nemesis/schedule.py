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
    """quiet `interval` -> start a random fault -> hold it `nem.hold_s` -> stop -> repeat."""

    def __init__(self, nemeses: Sequence[Nemesis], *, interval: float, until: float,
                 rng: random.Random, record: Record) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.nemeses = list(nemeses)
        self.interval, self.until = interval, until
        self.rng, self.record = rng, record
        self.stop_event = threading.Event()
        self.active: Nemesis | None = None
        self.active_value: dict[str, Any] = {}
        self.faults = 0
        self.error: BaseException | None = None
        self.heal_errors: list[str] = []
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
                if time.monotonic() + nem.hold_s > self.until:
                    break  # it could not end before the quiet phase: don't start it
                with self.lock:
                    if self.stop_event.is_set():
                        break
                    self.record("invoke", nem.start_f, None)
                    self.active = nem
                    try:
                        value = nem.start(self.rng)
                    except BaseException as e:
                        # a fault that failed half-way is still on record, then healed
                        self.record("info", nem.start_f, {"fault": nem.name,
                                                          "error": f"{type(e).__name__}: {e}"})
                        raise
                    self.active_value = value
                    self.faults += 1
                    self.record("info", nem.start_f, value)
                self._sleep(nem.hold_s)
                self.stop_active()
        except BaseException as e:  # surfaced by the runner; heal still runs
            log.exception("nemesis failed")
            self.error = e

    def describe_active(self) -> tuple[str, ...]:
        nem, v = self.active, self.active_value
        if nem is None:
            return ()
        targets = v.get("targets") if isinstance(v, dict) else None
        return (f"{nem.name} {','.join(map(str, targets))}" if targets else nem.name,)

    def stop_active(self) -> None:
        with self.lock:
            nem, self.active = self.active, None
            if nem is None:
                return
            self.record("invoke", nem.stop_f, None)
            try:
                value = nem.stop()
            except Exception as e:
                value = {"fault": nem.name, "error": f"{type(e).__name__}: {e}"}
                self.heal_errors.append(f"{nem.name}: {e}")
                log.exception("stopping %s failed", nem.name)
            self.record("info", nem.stop_f, value)

    def finish(self) -> list[str]:
        """Stop scheduling, end the active fault, heal everything; return what failed
        in this call (it may be called again: every heal is idempotent)."""
        before = len(self.heal_errors)
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=60)
        try:
            self.stop_active()
        finally:
            self.heal_errors += heal_all(self.nemeses)
        return self.heal_errors[before:]


def heal_all(nemeses: Sequence[Nemesis]) -> list[str]:
    """Heal every nemesis; collect errors rather than stop at the first."""
    errors = []
    for n in nemeses:
        try:
            n.heal()
        except Exception as e:
            log.exception("heal of %s failed", n.name)
            errors.append(f"heal of {n.name} failed: {e}")
    return errors
