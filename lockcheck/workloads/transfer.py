"""The `transfer` workload: one operation takes two (or `--locks-per-op`) locks at once.

A transfer between accounts locks both accounts. Taking several locks per operation
brings deadlock back: A holds x and waits for y while B holds y and waits for x. The
usual advice is to acquire in one global order (`--lock-order sorted`), to give every
lock a TTL so that nothing is held forever, and to prefer one coarser lock
(`--lock-scope coarse`); this workload measures each.

One operation (a round of the worker, `transfer_round`):

    begin (event) -> for each lock, in the chosen order: wait (event), acquire attempts
    until granted or the wait limit, waited (event), then (but after the last) a pause
    of hold/N, reading that account -> enter every lock (events) ->
    hold for --hold-ms, renewing each lease every TTL/3 -> exit every lock -> release
    them all -> end (event, with the operation's outcome)

Each acquire is blocking with a wait limit (`--wait-ms`, 0: no limit), made of the
lock client's own non-blocking attempts the worker's backoff apart, each recorded as an
ordinary `acquire`, so every checker of the lock reads them as it reads `mutex`'s.
While it waits, a worker does not renew what it already holds, as a blocked thread
of a client without a watchdog would not: the TTL of a held lock is what can break
a cycle. A lock it could not get within the wait limit: it releases what it holds and
the operation did not complete. The critical sections start only once every lock is
held (and every lease still valid), so a lease that ran out during the wait is never
inside a section.

Without a wait limit, a worker told to stop while it waits leaves without releasing
what it holds (a blocked thread never reaches its release): on a backend without
TTLs those locks stay held, and the recovery phase says so.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

from lockcheck.errors import BadInput
from lockcheck.workloads.api import KeyPlan, Reason, Section

if TYPE_CHECKING:
    from lockcheck.locks.api import Lease
    from lockcheck.spec import TestSpec
    from lockcheck.workloads.worker import CriticalSection, Worker

ORDERS = ("sorted", "random")
SCOPES = ("fine", "coarse")
COARSE_KEY = "all"  # the one lock of --lock-scope coarse
DEFAULT_WAIT_TTLS = 3  # the default wait limit, in TTLs


def plan(spec: TestSpec) -> KeyPlan:
    """The account locks a0..a<--keys - 1> (or the one coarse lock), and the options
    each worker needs to run a transfer."""
    order = getattr(spec, "lock_order", "sorted")
    scope = getattr(spec, "lock_scope", "fine")
    per_op = int(getattr(spec, "locks_per_op", 2))
    wait_ms = getattr(spec, "wait_ms", None)
    if order not in ORDERS:
        raise BadInput(f"--lock-order must be {' or '.join(ORDERS)}, got {order!r}")
    if scope not in SCOPES:
        raise BadInput(f"--lock-scope must be {' or '.join(SCOPES)}, got {scope!r}")
    if scope == "fine" and not 1 <= per_op <= spec.keys:
        raise BadInput(f"--locks-per-op {per_op} must be between 1 and --keys ({spec.keys})")
    if wait_ms is None:
        wait_ms = DEFAULT_WAIT_TTLS * spec.ttl_ms
    if wait_ms < 0:
        raise BadInput("--wait-ms must be 0 (no limit) or more")
    names = [COARSE_KEY] if scope == "coarse" else [f"a{i}" for i in range(spec.keys)]
    params = {"lock_order": order, "lock_scope": scope, "locks_per_op": per_op,
              "wait_ms": int(wait_ms)}
    return KeyPlan(names, params, list(names))


def body(section: Section) -> Reason:
    """Used only by the recovery phase's single-lock rounds (the operations themselves
    are `transfer_round`)."""
    return section.work(section.hold_time())


def lock_set(worker: Worker) -> list[str]:
    """The locks of the next operation, in the order it takes them."""
    params = worker.cfg.key_params
    names = worker.cfg.keys
    if params.get("lock_scope") == "coarse":
        return [COARSE_KEY]
    chosen = worker.rng.sample(names, int(params.get("locks_per_op", 2)))
    if params.get("lock_order") == "random":
        return chosen  # sample's order is already random
    return sorted(chosen, key=_account_order)


def _account_order(name: str) -> tuple[int, str]:
    """The global order: by account number (a10 after a9), then by name."""
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyz")
    return (int(digits), name) if digits.isdigit() else (-1, name)


class Transfer:
    """One operation of one worker."""

    def __init__(self, worker: Worker, op: int, keys: list[str]) -> None:
        self.w, self.op, self.keys = worker, op, keys
        self.held: list[Lease] = []
        wait_ms = int(worker.cfg.key_params.get("wait_ms", 3 * worker.cfg.ttl_ms))
        self.wait_ns = wait_ms * 1_000_000 if wait_ms > 0 else None

    def event(self, f: str, key: str, **value: Any) -> None:
        self.w.rec(self.w.process, "event", f, key, {"op": self.op, **value})

    def wait_for(self, key: str) -> str:
        """Take `key`, blocking up to the wait limit: "granted", "wait-limit",
        "stopped" (the run ends) or "indefinite" (an attempt's outcome is unknown)."""
        w = self.w
        self.event("wait", key, holds=[lease.key for lease in self.held],
                   limit_ms=None if self.wait_ns is None else self.wait_ns // 1_000_000)
        start = time.monotonic_ns()
        while True:
            process = w.process
            lease = w.acquire(key)
            if lease is not None:
                self.held.append(lease)
                outcome = "granted"
                break
            if w.process != process:  # an info: it may hold it now; stop here
                outcome = "indefinite"
                break
            if w.stopping.is_set() or w.rec.broken:
                outcome = "stopped"
                break
            if self.wait_ns is not None and time.monotonic_ns() - start >= self.wait_ns:
                outcome = "wait-limit"
                break
            w.backoff()
        self.event("waited", key, outcome=outcome)
        return outcome

    def hold(self, seconds: float) -> Reason:
        """Every lock held: enter them all, work for --hold-ms renewing each lease when
        due, exit them all. The reason the sections ended early, or None."""
        from lockcheck.workloads.worker import CriticalSection, granted_by

        w = self.w
        sections: list[CriticalSection] = []
        for lease in self.held:
            client = w.clients[lease.key]
            w.rec(w.process, "event", "enter", lease.key,
                  w.lease_value(lease, **granted_by(lease)))
            sections.append(CriticalSection(w, client, lease))
        end = time.monotonic_ns() + int(seconds * 1e9)
        reason: Reason = None
        while reason is None and time.monotonic_ns() < end and not w.stopping.is_set():
            for s in sections:
                if time.monotonic_ns() >= s.next_renew:
                    reason = s.renew()
                reason = reason or s.believes()
                if reason is not None:
                    break
            else:
                w.rec.flush()
                time.sleep(max(0.0, min((end - time.monotonic_ns()) / 1e9, 0.01)))
        for s in sections:
            w.rec(w.process, "event", "exit", s.key,
                  w.lease_value(s.lease, reason=reason or "done"))
        if any(s.retired for s in sections):
            w.retire()
        return reason

    def release_all(self) -> None:
        for lease in reversed(self.held):
            self.w.release(self.w.clients[lease.key], lease)
        self.held = []

    def run(self) -> str:
        """The operation's outcome: "completed", or why not."""
        self.event("begin", self.keys[0], keys=self.keys)
        outcome = "completed"
        hold_s = self.w.draw_hold(self.w.rng) / 1000.0
        for i, key in enumerate(self.keys):
            got = self.wait_for(key)
            if got != "granted":
                outcome = got
                break
            if i + 1 < len(self.keys):
                # reading this account before asking for the next one: the time in
                # which another operation can take the next lock first
                self.w.rec.flush()
                self.w.stopping.wait(hold_s / len(self.keys))
        if outcome == "completed":
            # a lease that ran out while this worker waited for the next lock: another
            # may hold that lock now, so the operation must not go on
            if any(not lease.still_holds() for lease in self.held):
                outcome = "lease-expired"
            else:
                outcome = self.hold(hold_s) or "completed"
        if outcome == "stopped" and self.wait_ns is None:
            # blocked with no limit: a thread stuck in its acquire never releases
            self.event("end", self.keys[0], keys=self.keys, outcome="stuck",
                       holds=[lease.key for lease in self.held])
            self.held = []
            return "stuck"
        self.release_all()
        self.event("end", self.keys[0], keys=self.keys, outcome=outcome)
        return outcome


# operation numbers: each worker is a process of its own, so a counter per process
# names its operations uniquely (the checker tells workers apart by `worker`)
_ops = itertools.count()


def transfer_round(worker: Worker) -> None:
    """One operation, then a pause of --backoff-ms if it did not complete."""
    outcome = Transfer(worker, next(_ops), lock_set(worker)).run()
    if outcome not in ("completed", "stuck") and not worker.stopping.is_set():
        worker.backoff()
