"""Runs the nemeses on a schedule, records each fault, and always heals at the end.

Every `interval` of quiet, a fault group starts; each fault in it is stopped when its
own `hold_s` has passed (`--nemesis-duration`, or `--restart-delay-ms` for a kill,
`--pause-ms` for a client pause), and the next quiet interval begins when all are
stopped. A fault that says when it is done (`EndsItself`) is stopped then, if
that comes before its `hold_s`. Two modes (`--nemesis-mode`):

* `one` (the default): the group is one of the listed faults, picked at random, so
  every violation falls in the window of a single fault and can be blamed on it.
* `all`: the group is every listed fault, started in the order given, as Jepsen's
  composed packages overlap their faults. Some findings need two faults at once:
  a Redlock client cut from some masters (`partition-clients`) while another master's
  clock jumps (`clock-bump`) is Kleppmann's scenario B. Faults that share a mechanism
  are still safe together: they stop together and every heal removes all of its kind.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lockcheck.nemesis.api import Nemesis, ends_itself

log = logging.getLogger("lockcheck.nemesis")

Record = Callable[[str, str, Any], None]  # (type, f, value)


class NemesisSchedule(threading.Thread):
    """quiet `interval` -> start a fault group -> stop each after its `hold_s` -> repeat."""

    POLL_S = 0.05  # how often a fault that ends itself is asked whether it has

    def __init__(self, nemeses: Sequence[Nemesis], *, interval: float, until: float,
                 rng: random.Random, record: Record, mode: str = "one") -> None:
        super().__init__(name="nemesis", daemon=True)
        self.nemeses = list(nemeses)
        self.interval, self.until, self.mode = interval, until, mode
        self.rng, self.record = rng, record
        self.stop_event = threading.Event()
        self.active: list[tuple[Nemesis, dict[str, Any]]] = []  # in start order
        self.faults = 0
        self.error: BaseException | None = None
        self.heal_errors: list[str] = []
        self.lock = threading.Lock()
        self._holds_until: float | None = None  # when the group in place is due to end

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped or past the schedule's end; False if we must stop."""
        end = min(time.monotonic() + seconds, self.until)
        return not self.stop_event.wait(max(0.0, end - time.monotonic())) and \
            time.monotonic() < self.until

    def _hold(self, nem: Nemesis, until: float) -> bool:
        """Keep `nem` in place until `until`, or until it says it is done; False if
        the schedule must stop. The schedule's end does not cut a hold short: a fault
        that waited for its moment (an aimed kill waits for a holder) may end after it,
        and its hold (a kill's restart delay) is what the test is about; `finish`
        still ends it."""
        if not ends_itself(nem):
            return not self.stop_event.wait(max(0.0, until - time.monotonic()))
        while time.monotonic() < until:
            if nem.ended():  # type: ignore[attr-defined]
                return True
            if self.stop_event.wait(max(0.0, min(self.POLL_S, until - time.monotonic()))):
                return False
        return True

    def group(self) -> list[Nemesis]:
        """The faults to start now: those that can end before the quiet phase (all of
        them, or one at random); none when no fault fits any more. A fault too long for
        what is left is passed over, never the end of the schedule: a client pause of
        2x a 10 s TTL does not fit a 16 s run, and the other faults still must."""
        now = time.monotonic()
        fitting = [n for n in self.nemeses if now + n.hold_s <= self.until]
        if self.mode == "all" or not fitting:
            return fitting
        return [self.rng.choice(fitting)]

    def run(self) -> None:
        try:
            while self.nemeses and self._sleep(self.interval):
                due: list[tuple[float, int, Nemesis]] = []
                fits = self.group()
                if not fits:
                    break
                for i, nem in enumerate(fits):
                    value = self.start_one(nem)
                    if value is None:
                        break
                    # a fault that found nothing to do (no holder to pause) ends at once
                    # rather than take a whole window from the faults that follow
                    hold = 0.0 if value.get("skipped") else nem.hold_s
                    due.append((time.monotonic() + hold, -i, nem))
                with self.lock:
                    self._holds_until = max((at for at, _, _ in due), default=None)
                # each fault ends after its own hold; at the same time, the last started
                # ends first
                for at, _, nem in sorted(due, key=lambda d: (d[0], d[1])):
                    if not self._hold(nem, at):
                        break
                    self.stop_one(nem)
                self.stop_active()
                with self.lock:
                    self._holds_until = None
        except BaseException as e:  # surfaced by the runner; heal still runs
            log.exception("nemesis failed")
            self.error = e

    def start_one(self, nem: Nemesis) -> dict[str, Any] | None:
        """Start a fault and record it; what it did, or None if the schedule is stopping."""
        with self.lock:
            if self.stop_event.is_set():
                return None
            self.record("invoke", nem.start_f, None)
            try:
                value = nem.start(self.rng)
            except BaseException as e:
                # a fault that failed half-way is still on record, then healed
                self.record("info", nem.start_f, {"fault": nem.name, "targets": [],
                                                  "error": f"{type(e).__name__}: {e}"})
                self.active.append((nem, {}))
                raise
            self.active.append((nem, value))
            self.faults += 1
            self.record("info", nem.start_f, value)
            return value

    def describe_active(self) -> tuple[str, ...]:
        out = []
        for nem, v in list(self.active):
            targets = v.get("targets") if isinstance(v, dict) else None
            out.append(f"{nem.name} {','.join(map(str, targets))}" if targets else nem.name)
        return tuple(out)

    def stop_one(self, nem: Nemesis) -> None:
        with self.lock:
            if not any(n is nem for n, _ in self.active):
                return
            self.active = [(n, v) for n, v in self.active if n is not nem]
            self.record("invoke", nem.stop_f, None)
            try:
                value = nem.stop()
            except Exception as e:
                value = {"fault": nem.name, "targets": [],
                         "error": f"{type(e).__name__}: {e}"}
                self.heal_errors.append(f"stopping {nem.name} failed: {e}")
                log.exception("stopping %s failed", nem.name)
            self.record("info", nem.stop_f, value)

    def stop_active(self) -> None:
        """Stop every active fault, the last started first."""
        for nem, _ in reversed(list(self.active)):
            self.stop_one(nem)

    def holds_until(self) -> float | None:
        """When the faults in place now are due to end (monotonic), or None if none is
        holding. A fault that waited for its moment (an aimed kill waits for a holder)
        may be due after the schedule's end: the run lets it keep its whole hold (a
        kill's restart delay is what the test asked for) before the quiet phase."""
        with self.lock:
            return self._holds_until

    def finish(self) -> list[str]:
        """Stop scheduling, end the active faults, heal everything; return what failed
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
