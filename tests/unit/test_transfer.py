"""The transfer workload's operation against an in-memory lock service: well-formed
histories with several locks held at once; random order deadlocks and a TTL breaks it,
sorted order never deadlocks; without a wait limit a stopped waiter keeps its locks."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.deadlock import check_deadlock
from lockcheck.checker.mutual_exclusion import check_mutual_exclusion
from lockcheck.errors import BadInput
from lockcheck.history import Op, op_from_json, validate_processes
from lockcheck.spec import TestSpec
from lockcheck.workloads import transfer
from lockcheck.workloads.worker import Recorder, Worker, WorkerConfig
from tests.unit.test_worker import MemoryClient, MemoryLocks

TTL_MS = 200


def run_workers(order: str, *, n: int = 4, keys: int = 3, seconds: float = 1.5,
                wait_ms: int = 600, ttl_ms: int = TTL_MS, hold_ms: tuple[int, int] = (5, 15),
                scope: str = "fine", seed: int = 1) -> list[Op]:
    service = MemoryLocks()
    t0 = time.monotonic_ns()
    spec = TestSpec(workload="transfer", keys=keys, ttl_ms=ttl_ms, lock_order=order,
                    wait_ms=wait_ms, lock_scope=scope)
    plan = transfer.plan(spec)
    outs, workers = [], []
    for i in range(n):
        out = io.StringIO()
        cfg = WorkerConfig(worker=i, process_stride=n + 1, backend="redis",
                           workload="transfer", client_config={}, keys=plan.names,
                           ttl_ms=ttl_ms, hold_ms=hold_ms, seed=seed, t0_ns=t0,
                           op_timeout_s=0.05, backoff_ms=(2, 6), key_params=plan.params)
        client = MemoryClient(service, ttl_ms)
        w = Worker(cfg, dict.fromkeys(plan.names, client), Recorder(out, t0, i),
                   transfer.body)
        w.round = transfer.transfer_round
        outs.append(out)
        workers.append(w)
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    for w in workers:
        w.stopping.set()
    for t in threads:
        t.join(5)
    for w in workers:
        w.rec.flush()
    rows = [json.loads(line) for out in outs for line in out.getvalue().splitlines()]
    rows.sort(key=lambda r: r["time"])
    ops = [op_from_json({"index": i, **r}) for i, r in enumerate(rows)]
    validate_processes(ops)
    return ops


def test_plan_checks_its_options() -> None:
    p = transfer.plan(TestSpec(workload="transfer", keys=4, ttl_ms=500))
    assert p.names == ["a0", "a1", "a2", "a3"]
    assert p.params == {"lock_order": "sorted", "lock_scope": "fine", "locks_per_op": 2,
                        "wait_ms": 1500}
    assert transfer.plan(TestSpec(workload="transfer", lock_scope="coarse")).names == ["all"]
    with pytest.raises(BadInput, match="--lock-order"):
        transfer.plan(TestSpec(workload="transfer", lock_order="shuffled"))
    with pytest.raises(BadInput, match="--locks-per-op"):
        transfer.plan(TestSpec(workload="transfer", keys=2, locks_per_op=3))


def test_the_global_order_is_by_account_number() -> None:
    assert sorted(["a10", "a9", "a1"], key=transfer._account_order) == ["a1", "a9", "a10"]


def test_random_order_deadlocks_and_a_ttl_breaks_it() -> None:
    ops = run_workers("random", keys=2, seconds=2.0)
    r = check_deadlock(ops, CheckOptions())
    assert r["valid"] is False, r["summary"]
    assert r["cycle_count"] >= 1 and r["broken_by"].get("expiry", 0) >= 1, r
    # a TTL breaks a cycle at about one TTL (the first held lock runs out)
    assert all(c["duration_s"] <= 3 * TTL_MS / 1000 for c in r["cycles"]
               if c["broken_by"] == "expiry")
    assert r["outcomes"].get("lease-expired", 0) + r["outcomes"].get("wait-limit", 0) >= 1
    # the lease that ran out during the wait is never inside a section
    assert check_mutual_exclusion(ops, CheckOptions())["valid"] is True


def test_sorted_order_never_deadlocks() -> None:
    ops = run_workers("sorted", keys=2, seconds=1.5)
    r = check_deadlock(ops, CheckOptions())
    assert r["valid"] is True, r["summary"]
    assert r["completed"] > 10 and r["throughput_per_s"] > 0
    assert check_mutual_exclusion(ops, CheckOptions())["valid"] is True


def test_one_coarse_lock_never_deadlocks() -> None:
    ops = run_workers("random", scope="coarse", seconds=1.0)
    r = check_deadlock(ops, CheckOptions())
    assert r["valid"] is True and r["completed"] > 5, r["summary"]
    assert {o.key for o in ops if o.f == "acquire"} == {"all"}


def test_operations_are_recorded_as_the_history_format_says() -> None:
    ops = run_workers("sorted", n=2, keys=3, seconds=0.5)
    mine = [o for o in ops if o.worker == 0]
    begin = next(o for o in mine if o.f == "begin")
    keys = begin.value["keys"]
    assert len(keys) == 2 and keys == sorted(keys)
    fs = [(o.type, o.f, o.key) for o in mine if (o.value and o.value.get("op") ==
          begin.value["op"]) or (o.type == "event" and o.f in ("enter", "exit"))]
    assert fs[0] == ("event", "begin", keys[0])
    assert ("event", "wait", keys[1]) in fs and ("event", "waited", keys[1]) in fs
    sections = [o for o in mine if o.f in ("enter", "exit")]
    assert {o.key for o in sections} >= set(keys)


class NoTTLClient(MemoryClient):
    """A lock with no expiry (redis-no-ttl): held until released. Its first grant
    waits at `barrier`, so that both workers hold their first lock before either asks
    for its second: the cycle is made on purpose."""

    def __init__(self, service: MemoryLocks, barrier: threading.Barrier) -> None:
        super().__init__(service, 10**9)
        self.barrier: threading.Barrier | None = barrier

    def acquire(self, key: str) -> Any:
        lease = super().acquire(key)
        if lease is not None and self.barrier is not None:
            self.barrier.wait(2)
            self.barrier = None
        return lease


def test_without_ttl_or_wait_limit_the_deadlock_lasts_and_the_locks_stay_held() -> None:
    service = MemoryLocks()
    t0 = time.monotonic_ns()
    plan = transfer.plan(TestSpec(workload="transfer", keys=2, ttl_ms=TTL_MS,
                                  lock_order="random", wait_ms=0))
    workers, outs = [], []
    barrier = threading.Barrier(2)
    for i in range(2):
        out = io.StringIO()
        cfg = WorkerConfig(worker=i, process_stride=3, backend="redis", workload="transfer",
                           client_config={}, keys=plan.names, ttl_ms=TTL_MS,
                           hold_ms=(50, 50), seed=1, t0_ns=t0, op_timeout_s=0.05,
                           backoff_ms=(2, 4), key_params=plan.params)
        w = Worker(cfg, dict.fromkeys(plan.names, NoTTLClient(service, barrier)),
                   Recorder(out, t0, i), transfer.body)
        workers.append(w)
        outs.append(out)
    threads = [threading.Thread(target=transfer.Transfer(w, 0, order).run)
               for w, order in zip(workers, (["a0", "a1"], ["a1", "a0"]), strict=True)]
    for t in threads:
        t.start()
    time.sleep(0.6)
    for w in workers:
        w.stopping.set()
    for t in threads:
        t.join(5)
    rows = [json.loads(line) for out in outs for line in out.getvalue().splitlines()]
    rows.sort(key=lambda r: r["time"])
    ops = [op_from_json({"index": i, **r}) for i, r in enumerate(rows)]
    r = check_deadlock(ops, CheckOptions())
    assert r["cycle_count"] == 1 and r["never_broken"] == 0
    assert r["cycles"][0]["duration_s"] >= 0.4
    assert r["broken_by"] == {"run-end": 1}, r
    assert r["outcomes"] == {"stuck": 2}
    assert service.held.keys() == {"a0", "a1"}  # never released
