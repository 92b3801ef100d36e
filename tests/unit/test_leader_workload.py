"""The leader workload's body and its term store (workloads/leader.py,
workloads/term_resource.py), with the in-memory lock service of test_worker."""

from __future__ import annotations

import threading
import time
from typing import Any

from lockcheck.workloads import leader
from lockcheck.workloads.term_resource import TermState
from lockcheck.workloads.worker import CriticalSection
from tests.unit.test_worker import MemoryClient, MemoryLocks, make_worker, ops_of


class Store:
    """The term store in this process, as the worker's client sees it."""

    def __init__(self, mode: str) -> None:
        self.state = TermState(mode=mode)

    def act(self, key: str, term: int | None, process: Any) -> dict[str, Any]:
        return self.state.act(key, term, process)


def test_a_store_that_refuses_stale_terms_takes_equal_ones() -> None:
    s = TermState(mode="fenced")
    assert s.act("e", 2, 0)["accepted"] and s.act("e", 2, 0)["accepted"]
    r = s.act("e", 1, 1)
    assert r["accepted"] is False and r["max_term"] == 2 and r["seq"] == 3
    assert s.act("e", None, 1)["accepted"] is False
    assert s.act("other", 1, 1)["accepted"]  # elections are apart
    u = TermState(mode="unfenced")
    u.act("e", 2, 0)
    r = u.act("e", 1, 1)
    assert r["accepted"] is True and r["max_term"] == 2


def test_a_leader_acts_through_its_term_stamped_with_its_fence() -> None:
    client = MemoryClient(MemoryLocks(), ttl_ms=300)
    w, out = make_worker(client, hold_ms=(400, 400), body=leader.body,
                         resource=Store("fenced"))
    assert w.one_round("k0")
    ops = ops_of(out)
    fence = next(o for o in ops if o.f == "enter").fence
    acts = [o for o in ops if o.f == "act" and o.type == "ok"]
    assert len(acts) == leader.ACTS_PER_TERM
    assert {o.value["term"] for o in acts} == {fence}
    assert [o.value["n"] for o in acts] == list(range(1, leader.ACTS_PER_TERM + 1))
    assert any(o.f == "renew" and o.type == "ok" for o in ops)  # it led past a TTL
    assert next(o for o in ops if o.f == "exit").value["reason"] == "done"


def test_a_leader_that_knows_it_lost_does_not_act() -> None:
    client = MemoryClient(MemoryLocks())
    w, _ = make_worker(client, hold_ms=(400, 400), resource=Store("fenced"))
    lease = client.acquire("k0")
    assert lease is not None
    lease.valid_until_ns = 0
    assert leader.body(CriticalSection(w, client, lease)) == "lease-expired"
    assert w.resource.state.seq == {}


def test_a_leader_deposed_during_a_unit_of_work_acts_once_more() -> None:
    """The window a pause lands in: the lease runs out inside the unit of work, whose
    result is still sent; the next check steps down."""
    client = MemoryClient(MemoryLocks(), ttl_ms=60_000)
    w, out = make_worker(client, hold_ms=(800, 800), resource=Store("unfenced"))
    lease = client.acquire("k0")
    assert lease is not None
    threading.Timer(0.03, lambda: setattr(lease, "valid_until_ns", 0)).start()
    assert leader.body(CriticalSection(w, client, lease)) == "lease-expired"
    assert [o.type for o in ops_of(out) if o.f == "act"] == ["invoke", "ok"]


def test_a_stopping_worker_steps_down_at_once() -> None:
    client = MemoryClient(MemoryLocks(), ttl_ms=60_000)
    w, out = make_worker(client, hold_ms=(5000, 5000), resource=Store("fenced"))
    lease = client.acquire("k0")
    assert lease is not None
    threading.Timer(0.05, w.stopping.set).start()
    t0 = time.monotonic()
    assert leader.body(CriticalSection(w, client, lease)) is None
    assert time.monotonic() - t0 < 2.0
    assert sum(1 for o in ops_of(out) if o.f == "act") <= 2
