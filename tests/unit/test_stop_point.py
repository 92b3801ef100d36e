"""`client-pause --pause-at acquire` and `--pause-at release` (the worker's stop point,
the nemesis's wait for it and which clients stop themselves) and the options that only
some backends take (`--pause-at acquire`, `--resource etcd-txn`)."""

from __future__ import annotations

import random
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from lockcheck.errors import BadInput
from lockcheck.nemesis.client_pause import Holders, client_pause
from lockcheck.spec import TestSpec, validate
from lockcheck.workloads.stop_point import ARM, DISARM, EVENTS, StopPoint

EVENT = EVENTS["acquire"]


class Rig:
    def __init__(self, at: str = "acquire") -> None:
        self.records: list[tuple[Any, ...]] = []
        self.flushes = self.stops = 0
        self.point = StopPoint(self.record, self.flush, worker=3, at=at, stop=self.stop)

    def record(self, *args: Any) -> None:
        self.records.append(args)

    def flush(self) -> None:
        self.flushes += 1

    def stop(self) -> None:
        # the event must be out before the process stops
        assert self.flushes == len(self.records) == self.stops + 1
        self.stops += 1


def test_an_unarmed_worker_never_stops() -> None:
    rig = Rig()
    rig.point("k0")
    assert rig.stops == 0 and rig.records == []


def test_armed_it_says_so_then_stops_once() -> None:
    rig = Rig()
    rig.point.process = lambda: 17
    rig.point._on_signal(ARM, None)
    rig.point("k1")
    assert rig.stops == 1
    assert rig.records == [(17, "event", EVENT, "k1", {"at": "acquire"})]
    rig.point("k1")  # disarmed by the stop: the next grant goes through
    assert rig.stops == 1


def test_at_release_it_names_the_fence_it_is_releasing() -> None:
    rig = Rig("release")
    rig.point.process = lambda: 8
    rig.point("k2", 41)  # unarmed: nothing
    rig.point._on_signal(ARM, None)
    rig.point("k2", 42)
    assert rig.stops == 1
    assert rig.records == [(8, "event", "stop-at-release", "k2", {"at": "release",
                                                                   "fence": 42})]


def test_disarm_before_any_grant() -> None:
    rig = Rig()
    rig.point._on_signal(ARM, None)
    rig.point._on_signal(DISARM, None)
    rig.point("k0")
    assert rig.stops == 0


def test_install_takes_the_signals_and_restores_nothing_else() -> None:
    before = {s: signal.getsignal(s) for s in (ARM, DISARM)}
    try:
        rig = Rig()
        rig.point.install()
        signal.raise_signal(ARM)  # handled in this (the main) thread, not fatal
        rig.point("k0")
        assert rig.stops == 1
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def _stop_event(worker: int, key: str = "k0", at: str = "acquire",
                fence: int | None = None) -> dict[str, Any]:
    value: dict[str, Any] = {"at": at} if fence is None else {"at": at, "fence": fence}
    return {"type": "event", "f": EVENTS[at], "key": key, "process": worker,
            "worker": worker, "time": 5, "value": value}


def test_the_nemesis_waits_for_the_armed_workers_event() -> None:
    holders = Holders()
    for w in (2, 4):  # they have held a lock: they are up and may be armed
        holders.observe({"type": "event", "f": "enter", "key": "k9", "process": w,
                         "worker": w, "time": 1, "value": {}})
    armed: list[set[int]] = []

    def arm(ready: Any) -> None:  # the worker answers a moment later, from another thread
        armed.append(set(ready))

        def later() -> None:
            time.sleep(0.05)
            holders.observe(_stop_event(2))  # someone else's: not ours
            holders.observe(_stop_event(4, "k2"))
        threading.Thread(target=later).start()

    h = holders.stopped_at_point(arm, {4, 5}, 5.0)
    assert h is not None and (h.worker, h.key, h.fence) == (4, "k2", None)
    assert armed == [{4}]  # 5 never held a lock: it may still be starting


def test_a_stop_at_release_names_its_fence_in_rows_too() -> None:
    holders = Holders()
    holders.observe({"type": "event", "f": "enter", "key": "k0", "process": 6, "worker": 6,
                     "time": 1, "value": {}})

    def arm(ready: Any) -> None:  # the intake's event rows carry the value as JSON text
        holders.events([(0, 9, 6, "stop-at-release", "k0", 6,
                         '{"at": "release", "fence": 77}')])

    h = holders.stopped_at_point(arm, {6}, 5.0)
    assert h is not None and (h.worker, h.key, h.fence) == (6, "k0", 77)


def test_no_worker_is_armed_before_it_held_a_lock() -> None:
    holders = Holders()
    armed: list[Any] = []
    assert holders.stopped_at_point(armed.append, {0, 1}, 0.05) is None
    assert armed == []


def test_an_event_before_arming_does_not_count() -> None:
    holders = Holders()
    holders.observe({"type": "event", "f": "enter", "key": "k0", "process": 1, "worker": 1,
                     "time": 1, "value": {}})
    holders.observe(_stop_event(1))
    assert holders.stopped_at_point(lambda ready: None, {1}, 0.05) is None


@pytest.mark.parametrize("backend", ["redis", "etcd", "zookeeper"])
def test_pause_at_acquire_needs_a_client_with_the_stop_point(backend: str) -> None:
    s = TestSpec(backend=backend, nemesis=("client-pause",), pause_at="acquire", nodes=3)
    with pytest.raises(BadInput, match="--pause-at acquire"):
        validate(s)


@pytest.mark.parametrize("backend", ["redlock", "redlock-no-validity", "redlock-fenced"])
def test_pause_at_acquire_with_redlock_clients(backend: str) -> None:
    validate(TestSpec(backend=backend, nemesis=("client-pause",), pause_at="acquire", nodes=5))


def test_etcd_txn_store_needs_an_etcd_backend() -> None:
    with pytest.raises(BadInput, match="etcd family"):
        validate(TestSpec(backend="redis", workload="lock-set", resource="etcd-txn"))
    s = validate(TestSpec(backend="etcd-jepsen", workload="lock-set", resource="etcd-txn",
                          nodes=3))
    assert s.name == "etcd-jepsen-lock-set-etcd-txn-partition"
    with pytest.raises(BadInput, match="resource mode"):
        validate(TestSpec(backend="etcd", workload="mutex", resource="etcd-txn", nodes=3))


@pytest.mark.parametrize(("backend", "pause_at", "own", "outside"), [
    ("redis-get-del", "release", True, True),  # its release has a check and an act
    ("redis", "release", False, True),  # one Lua script: stopped from outside
    ("redlock", "acquire", True, False),
    ("redis-get-del", "section", False, False),
])
def test_which_clients_stop_themselves(backend: str, pause_at: str, own: bool,
                                       outside: bool) -> None:
    spec = TestSpec(backend=backend, nemesis=("client-pause",), pause_at=pause_at)
    sent: list[int] = []
    up = SimpleNamespace(index=0, host="c0",
                         daemon=SimpleNamespace(alive=lambda: True, signal=sent.append))
    ctx: Any = SimpleNamespace(spec=spec, workers=[up], holders=lambda: [],
                               next_exit=lambda t: None,
                               stopped_at_point=lambda arm, ws, t: None)
    n = client_pause(ctx)
    assert (n.stopped_at_point is not None, n.next_exit is not None) == (own, outside)
    assert n.point == pause_at
    if own:  # nobody reaches the point: the fault says why it did nothing
        assert n.start(random.Random(0))["skipped"] == (
            "no client released a lock in time" if pause_at == "release"
            else "no client was granted a lock in time")
        assert sent == []  # the wait armed nobody (it never called `arm`)


def test_a_client_of_the_users_is_stopped_from_outside() -> None:
    spec = TestSpec(backend="redis-get-del", nemesis=("client-pause",), pause_at="release",
                    client="tests.fixtures:any")
    ctx: Any = SimpleNamespace(spec=spec, workers=[], holders=lambda: [],
                               next_exit=lambda t: None,
                               stopped_at_point=lambda arm, ws, t: None)
    assert client_pause(ctx).stopped_at_point is None
