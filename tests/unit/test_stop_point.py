"""`client-pause --pause-at acquire` (the worker's stop point and the nemesis's wait for
it) and the options that only some backends take (`--pause-at acquire`, `--resource
etcd-txn`)."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

from lockcheck.errors import BadInput
from lockcheck.nemesis.client_pause import Holders
from lockcheck.spec import TestSpec, validate
from lockcheck.workloads.stop_point import ARM, DISARM, EVENT, AcquireStop


class Rig:
    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []
        self.flushes = self.stops = 0
        self.point = AcquireStop(self.record, self.flush, worker=3, stop=self.stop)

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


def _stop_event(worker: int, key: str = "k0") -> dict[str, Any]:
    return {"type": "event", "f": EVENT, "key": key, "process": worker, "worker": worker,
            "time": 5, "value": {"at": "acquire"}}


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

    h = holders.stopped_at_acquire(arm, {4, 5}, 5.0)
    assert h is not None and (h.worker, h.key) == (4, "k2")
    assert armed == [{4}]  # 5 never held a lock: it may still be starting


def test_no_worker_is_armed_before_it_held_a_lock() -> None:
    holders = Holders()
    armed: list[Any] = []
    assert holders.stopped_at_acquire(armed.append, {0, 1}, 0.05) is None
    assert armed == []


def test_an_event_before_arming_does_not_count() -> None:
    holders = Holders()
    holders.observe({"type": "event", "f": "enter", "key": "k0", "process": 1, "worker": 1,
                     "time": 1, "value": {}})
    holders.observe(_stop_event(1))
    assert holders.stopped_at_acquire(lambda ready: None, {1}, 0.05) is None


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
