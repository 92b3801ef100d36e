"""The nemesis schedule with scripted faults: one at a time or all together, each held
for its own duration, every start and stop on record with fault and targets, and every
failed stop or heal collected (for results.json and the screen), never dropped."""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any

from lockcheck.nemesis.schedule import NemesisSchedule
from tests.conftest import wait_for


@dataclass
class Scripted:
    name: str
    hold_s: float
    log: list[tuple[str, str, float]]
    fail_stop: bool = False
    fail_heal: bool = False
    start_f: str = ""
    stop_f: str = ""
    heals: int = 0
    on: bool = field(default=False)

    def __post_init__(self) -> None:
        self.start_f, self.stop_f = f"start-{self.name}", f"stop-{self.name}"

    def start(self, rng: random.Random) -> dict[str, Any]:
        self.on = True
        self.log.append(("start", self.name, time.monotonic()))
        return {"fault": self.name, "targets": [f"n-{self.name}"]}

    def stop(self) -> dict[str, Any]:
        self.log.append(("stop", self.name, time.monotonic()))
        if self.fail_stop:
            raise OSError("iptables: table busy")
        self.on = False
        return {"fault": self.name, "targets": [f"n-{self.name}"]}

    def heal(self) -> None:
        self.heals += 1
        if self.fail_heal:
            raise OSError("still stuck")
        self.on = False


def schedule(nems: list[Scripted], *, interval: float, run_s: float,
             mode: str) -> tuple[NemesisSchedule, list[tuple[str, str, Any]]]:
    records: list[tuple[str, str, Any]] = []
    s = NemesisSchedule(nems, interval=interval, until=time.monotonic() + run_s,
                        rng=random.Random(0), mode=mode,
                        record=lambda t, f, v: records.append((t, f, v)))
    return s, records


def test_one_mode_runs_one_fault_at_a_time() -> None:
    log: list[tuple[str, str, float]] = []
    nems = [Scripted("a", 0.05, log), Scripted("b", 0.05, log)]
    s, records = schedule(nems, interval=0.02, run_s=0.6, mode="one")
    s.start()
    s.join(timeout=5)
    assert s.finish() == []
    active: set[str] = set()
    for kind, name, _ in log:
        if kind == "start":
            assert not active, f"{name} started while {active} was on"
            active.add(name)
        else:
            active.discard(name)
    assert {n for _, n, _ in log} == {"a", "b"}, "both faults were picked"
    assert s.faults >= 4
    infos = [v for t, _, v in records if t == "info"]
    assert all(v["fault"] in ("a", "b") and v["targets"] for v in infos)


def test_a_fault_too_long_for_the_run_is_passed_over_not_the_end() -> None:
    """One mode: a fault whose hold cannot end before the quiet phase is never started,
    and the faults that fit go on being picked (it used to end the schedule the first
    time it was drawn)."""
    log: list[tuple[str, str, float]] = []
    long_, short = Scripted("long", 60.0, log), Scripted("short", 0.03, log)
    s, _ = schedule([long_, short], interval=0.02, run_s=0.6, mode="one")
    s.start()
    s.join(timeout=5)
    s.finish()
    started = [n for k, n, _ in log if k == "start"]
    assert "long" not in started
    assert started.count("short") >= 3, started


def test_all_mode_overlaps_every_fault_each_for_its_own_duration() -> None:
    log: list[tuple[str, str, float]] = []
    # the long hold is far longer than the short one, so a loaded machine's delays do not
    # end it before it is looked at; finish() stops it
    short, long_ = Scripted("short", 0.05, log), Scripted("long", 5.0, log)
    s, records = schedule([short, long_], interval=0.05, run_s=6.0, mode="all")
    s.start()
    wait_for(lambda: ("stop", "short") in [(k, n) for k, n, _ in log], 5, "the short stop")
    assert short.on is False and long_.on is True, "the short fault ended first"
    assert [d.split()[0] for d in s.describe_active()] == ["long"]
    s.finish()
    starts = [(n, t) for k, n, t in log if k == "start"]
    stops = {n: t for k, n, t in log if k == "stop"}
    assert [n for n, _ in starts[:2]] == ["short", "long"], "started in the order given"
    t_short = stops["short"] - starts[0][1]
    # its own 0.05 s, not the long one's 5 s (a loaded machine may add a second)
    assert 0.04 <= t_short < 1.5, t_short
    assert [f for t, f, _ in records[:4]] == ["start-short", "start-short", "start-long",
                                             "start-long"]


def test_a_failed_stop_and_a_failed_heal_are_kept() -> None:
    log: list[tuple[str, str, float]] = []
    bad = Scripted("bad", 0.02, log, fail_stop=True, fail_heal=True)
    s, records = schedule([bad], interval=0.02, run_s=0.2, mode="one")
    s.start()
    s.join(timeout=5)
    errors = s.finish()
    assert "heal of bad failed: still stuck" in errors
    assert any(e.startswith("stopping bad failed: iptables: table busy")
               for e in s.heal_errors), s.heal_errors
    stop_infos = [v for t, f, v in records if t == "info" and f == "stop-bad"]
    assert stop_infos and all("error" in v and v["fault"] == "bad" for v in stop_infos)
    assert bad.heals >= 1


def test_finish_stops_the_active_fault_and_heals_everything() -> None:
    log: list[tuple[str, str, float]] = []
    a, b = Scripted("a", 10.0, log), Scripted("b", 10.0, log)
    s, records = schedule([a, b], interval=0.01, run_s=30, mode="all")
    s.start()
    wait_for(lambda: a.on and b.on, 5, "both faults on")
    t = time.monotonic()
    assert s.finish() == []
    assert time.monotonic() - t < 5, "finish waits for no hold (10 s)"
    assert not a.on and not b.on and a.heals == b.heals == 1
    assert [f for t_, f, _ in records if t_ == "info"][-2:] == ["stop-b", "stop-a"]
    assert s.describe_active() == ()


@dataclass
class FindsNothing(Scripted):
    """A client-pause with no holder to pause: it says so and does nothing."""

    def start(self, rng: random.Random) -> dict[str, Any]:
        self.log.append(("start", self.name, time.monotonic()))
        return {"fault": self.name, "targets": [], "skipped": "no client held a lock"}


def test_a_fault_that_found_nothing_to_do_ends_at_once() -> None:
    log: list[tuple[str, str, float]] = []
    nem = FindsNothing("idle", 0.5, log)  # held 0.5 s if it had done something
    s, _ = schedule([nem], interval=0.05, run_s=1.2, mode="one")
    s.start()
    s.join(timeout=5)
    assert s.finish() == []
    starts = [t for kind, _, t in log if kind == "start"]
    # the next try comes one interval after the last, not a whole hold later
    assert len(starts) >= 5, starts
    assert all(b - a < 0.3 for a, b in itertools.pairwise(starts)), starts


@dataclass
class SelfEnding(Scripted):
    """A fault that says it is done `after_s` after it started."""

    after_s: float = 0.2
    started: float = 0.0

    def start(self, rng: random.Random) -> dict[str, Any]:
        self.started = time.monotonic()
        return super().start(rng)

    def ended(self) -> bool:
        return time.monotonic() - self.started >= self.after_s


def test_a_fault_that_ends_itself_is_stopped_then_not_after_its_hold() -> None:
    log: list[tuple[str, str, float]] = []
    nem = SelfEnding("pause", hold_s=5.0, log=log, after_s=0.2)
    s, _ = schedule([nem], interval=0.1, run_s=7.0, mode="one")
    s.start()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and not any(e[0] == "stop" for e in log):
        time.sleep(0.02)
    s.finish()
    starts = [t for kind, _, t in log if kind == "start"]
    stops = [t for kind, _, t in log if kind == "stop"]
    assert starts and stops, log
    assert 0.2 <= stops[0] - starts[0] < 1.0  # its own end, long before the 5 s hold


@dataclass
class SlowStart(Scripted):
    """A fault that waits for its moment as it starts (an aimed kill waits for a holder)."""

    wait_s: float = 0.6

    def start(self, rng: random.Random) -> dict[str, Any]:
        time.sleep(self.wait_s)
        return super().start(rng)


def test_a_fault_that_started_late_is_held_its_whole_hold_past_the_schedules_end() -> None:
    # a kill restarted at the schedule's end instead of after its restart delay once
    # made a delayed restart look like an immediate one
    log: list[tuple[str, str, float]] = []
    nem = SlowStart("kill", hold_s=0.5, log=log, wait_s=0.6)
    s, _ = schedule([nem], interval=0.1, run_s=0.7, mode="one")
    s.start()
    s.join(timeout=5)
    s.finish()
    starts = [t for kind, _, t in log if kind == "start"]
    stops = [t for kind, _, t in log if kind == "stop"]
    assert len(starts) == 1 and len(stops) == 1, log
    assert stops[0] - starts[0] >= 0.5
