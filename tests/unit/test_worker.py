"""The worker loop against an in-memory lock service: well-formed histories, renewals,
retirement after `info`, leases named on every renew and release, the recovery mode.

The service is a dict with TTLs on the monotonic clock, like a single Redis; faults are
scripted per call ("the next renew times out"), so each rule is tested on purpose.
"""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.history import Op, op_from_json, validate_processes
from lockcheck.intake import in_layout
from lockcheck.locks.api import Definite, Indefinite, Lease, NotOwner, lease_deadline
from lockcheck.workloads import fenced, mutex
from lockcheck.workloads.worker import (
    HURRIED,
    HURRY,
    QUIET_FLUSH_NS,
    ROUND_FLUSH_NS,
    CriticalSection,
    Recorder,
    Worker,
    WorkerConfig,
    watch_stdin,
)

TTL_MS = 300


class MemoryLocks:
    """The lock service: key -> (token, expiry in monotonic ns); fences per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, tuple[str, int]] = {}
        self.fences: dict[str, int] = {}

    def _live(self, key: str, now: int) -> tuple[str, int] | None:
        h = self.held.get(key)
        return h if h is not None and h[1] > now else None

    def acquire(self, key: str, token: str, ttl_ms: int) -> int | None:
        with self.lock:
            now = time.monotonic_ns()
            if self._live(key, now) is not None:
                return None
            self.held[key] = (token, now + ttl_ms * 1_000_000)
            self.fences[key] = self.fences.get(key, 0) + 1
            return self.fences[key]

    def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        with self.lock:
            now = time.monotonic_ns()
            h = self._live(key, now)
            if h is None or h[0] != token:
                return False
            self.held[key] = (token, now + ttl_ms * 1_000_000)
            return True

    def release(self, key: str, token: str) -> bool:
        with self.lock:
            h = self._live(key, time.monotonic_ns())
            if h is None or h[0] != token:
                return False
            del self.held[key]
            return True


class MemoryClient:
    """A `LockClient` on `MemoryLocks`; `faults[f]` lists what the next calls raise."""

    def __init__(self, service: MemoryLocks, ttl_ms: int = TTL_MS) -> None:
        self.service, self.ttl_ms = service, ttl_ms
        self.faults: dict[str, list[BaseException | None]] = {}
        self.calls: list[str] = []

    def _fault(self, f: str) -> None:
        self.calls.append(f)
        pending = self.faults.get(f)
        if pending:
            e = pending.pop(0)
            if e is not None:
                raise e

    def acquire(self, key: str) -> Lease | None:
        self._fault("acquire")
        token = uuid.uuid4().hex
        t0 = time.monotonic_ns()
        fence = self.service.acquire(key, token, self.ttl_ms)
        if fence is None:
            return None
        return Lease(key=key, token=token, fence=fence, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, 0.01))

    def renew(self, lease: Lease) -> None:
        self._fault("renew")
        t0 = time.monotonic_ns()
        if not self.service.renew(lease.key, lease.token, self.ttl_ms):
            raise NotOwner("not-owner")
        lease.valid_until_ns = lease_deadline(t0, self.ttl_ms, 0.01)

    def release(self, lease: Lease) -> None:
        self._fault("release")
        if not self.service.release(lease.key, lease.token):
            raise NotOwner("not-owner")

    def close(self) -> None:
        pass


class FakeResource:
    def __init__(self) -> None:
        self.writes: list[tuple[str, int | None, Any]] = []
        self.fail_next: BaseException | None = None

    def write(self, key: str, fence: int | None, process: Any) -> dict[str, Any]:
        if self.fail_next is not None:
            e, self.fail_next = self.fail_next, None
            raise e
        self.writes.append((key, fence, process))
        return {"accepted": True, "seq": len(self.writes), "max_fence": None}


def make_worker(client: MemoryClient, *, keys: tuple[str, ...] = ("k0",),
                hold_ms: tuple[int, int] = (0, 0), body: Callable[..., Any] = mutex.body,
                resource: Any = None, **cfg: Any) -> tuple[Worker, io.StringIO]:
    out = io.StringIO()
    conf = WorkerConfig(worker=2, process_stride=6, backend="redis", workload="mutex",
                        client_config={}, keys=list(keys), ttl_ms=TTL_MS, hold_ms=hold_ms,
                        seed=1, t0_ns=time.monotonic_ns(), op_timeout_s=0.05,
                        backoff_ms=(0, 1), **cfg)
    return Worker(conf, dict.fromkeys(keys, client), Recorder(out, conf.t0_ns, 2), body,
                  resource), out


def ops_of(out: io.StringIO) -> list[Op]:
    return [op_from_json({"index": i, **json.loads(line)})
            for i, line in enumerate(out.getvalue().splitlines())]


class Died(BaseException):
    """The worker process ending on the spot (a client library's `os._exit`, a kill)."""


def test_a_worker_that_dies_after_a_release_has_sent_the_releases_invoke() -> None:
    """Lines go out in bulk, but a release's invoke goes before the release is sent: a
    worker that dies once its release took effect must not leave a history in which it
    still holds the lock (another client's grant would read as a violation)."""
    service = MemoryLocks()
    client = MemoryClient(service)
    w, out = make_worker(client)
    w.rec = Recorder(out, w.cfg.t0_ns, 2, prompt=False)
    real_release = client.release

    def release_then_die(lease: Lease) -> None:
        real_release(lease)
        raise Died

    client.release = release_then_die  # type: ignore[method-assign]
    with pytest.raises(Died):
        w.one_round("k0")
    assert "k0" not in service.held  # the release took effect
    sent = [(op.type, op.f) for op in ops_of(out)]
    assert sent[-1] == ("invoke", "release"), sent


def test_rounds_are_well_formed_and_name_their_leases() -> None:
    client = MemoryClient(MemoryLocks())
    w, out = make_worker(client, hold_ms=(250, 250))
    for _ in range(3):
        w.one_round("k0")
    ops = ops_of(out)
    assert validate_processes(ops) is None  # Jepsen's process rules
    assert [(o.type, o.f) for o in ops[:3]] == [("invoke", "acquire"), ("ok", "acquire"),
                                                 ("event", "enter")]
    by_lease: dict[str, list[Op]] = {}
    for o in ops:
        if isinstance(o.value, dict) and "lease" in o.value:
            by_lease.setdefault(o.value["lease"], []).append(o)
    assert len(by_lease) == 3  # three grants, each named by its own token
    named = [o for o in ops if o.f in ("renew", "release", "enter", "exit")]
    assert named and all(isinstance(o.value, dict) and o.value.get("lease") in by_lease
                         for o in named), "every renew/release/event names its lease"
    for lease_ops in by_lease.values():
        fs = [o.f for o in lease_ops]
        assert fs[0] == "acquire" and "enter" in fs and "exit" in fs and fs[-1] == "release"
        assert len({o.value["fence"] for o in lease_ops}) == 1
    # a 250 ms hold with a 300 ms TTL: renewed every TTL/3 = 100 ms, twice per section
    renews = [o for o in ops if o.f == "renew" and o.type == "ok"]
    assert 4 <= len(renews) <= 8, len(renews)
    assert all(o.process == 2 for o in ops)


def test_renewals_keep_a_long_hold_alive() -> None:
    service = MemoryLocks()
    client = MemoryClient(service)
    w, out = make_worker(client, hold_ms=(1000, 1000))  # 3x the TTL
    assert w.one_round("k0")
    ops = ops_of(out)
    exit_ = next(o for o in ops if o.f == "exit")
    assert exit_.value["reason"] == "done"
    assert [o.type for o in ops if o.f == "release"] == ["invoke", "ok"]


def test_without_renewals_the_client_stops_itself() -> None:
    """Break the renewals (every one refused as not-owner): the section must end early."""
    client = MemoryClient(MemoryLocks())
    client.faults["renew"] = [NotOwner("not-owner")] * 10
    w, out = make_worker(client, hold_ms=(10_000, 10_000))
    t0 = time.monotonic()
    w.one_round("k0")
    # ended at the first refused renewal (TTL/3), long before its 10 s hold; the reason
    # below says which
    assert time.monotonic() - t0 < 5.0
    ops = ops_of(out)
    assert next(o for o in ops if o.f == "exit").value["reason"] == "not-owner"
    assert [o.error for o in ops if o.f == "renew" and o.type == "fail"] == ["not-owner"]


def test_a_renew_that_failed_for_sure_is_retried_and_the_lease_clock_decides() -> None:
    client = MemoryClient(MemoryLocks())
    client.faults["renew"] = [Definite("connection refused")] * 10
    w, out = make_worker(client, hold_ms=(1000, 1000))
    w.one_round("k0")
    ops = ops_of(out)
    assert validate_processes(ops) is None  # Jepsen's process rules
    assert next(o for o in ops if o.f == "exit").value["reason"] == "lease-expired"
    assert sum(o.f == "renew" and o.type == "fail" for o in ops) >= 2


def test_info_on_renew_retires_and_the_new_process_releases_the_named_lease() -> None:
    client = MemoryClient(MemoryLocks())
    client.faults["renew"] = [Indefinite("timeout")]
    w, out = make_worker(client, hold_ms=(250, 250))
    w.one_round("k0")
    ops = ops_of(out)
    assert validate_processes(ops) is None  # Jepsen's process rules
    acq = next(o for o in ops if o.f == "acquire" and o.type == "ok")
    info = next(o for o in ops if o.type == "info")
    assert info.f == "renew" and info.process == 2
    exit_ = next(o for o in ops if o.f == "exit")
    assert exit_.process == 2 and exit_.value["reason"] == "indefinite"
    rel = [o for o in ops if o.f == "release"]
    assert {o.process for o in rel} == {8}  # 2 + stride 6
    assert all(o.value["lease"] == acq.value["lease"] for o in rel)
    assert rel[-1].type == "ok"  # it really was still ours: the release worked
    assert w.process == 8


def test_info_on_acquire_and_release_retire_too() -> None:
    client = MemoryClient(MemoryLocks())
    client.faults["acquire"] = [Indefinite("timeout")]
    client.faults["release"] = [Indefinite("connection lost")]
    w, out = make_worker(client)
    assert not w.one_round("k0")
    assert w.process == 8
    assert w.one_round("k0")
    ops = ops_of(out)
    assert validate_processes(ops) is None  # Jepsen's process rules
    assert [o.process for o in ops if o.type == "info"] == [2, 8]
    assert w.process == 14


def test_busy_and_refused_acquires_are_definite_fails() -> None:
    service = MemoryLocks()
    service.acquire("k0", "someone-else", 10_000)
    client = MemoryClient(service)
    client.faults["acquire"] = [Definite("connection refused")]
    w, out = make_worker(client)
    assert not w.one_round("k0") and not w.one_round("k0")
    ops = ops_of(out)
    assert [(o.type, o.error) for o in ops if o.type != "invoke"] == [
        ("fail", "connection refused"), ("fail", "busy")]
    assert w.process == 2


def test_a_write_that_timed_out_ends_the_section_and_retires() -> None:
    resource = FakeResource()
    resource.fail_next = TimeoutError("timed out")
    client = MemoryClient(MemoryLocks())
    w, out = make_worker(client, body=fenced.body, resource=resource)
    w.one_round("k0")
    ops = ops_of(out)
    assert validate_processes(ops) is None  # Jepsen's process rules
    assert [(o.type, o.process) for o in ops if o.f == "write"] == [("invoke", 2), ("info", 2)]
    assert next(o for o in ops if o.f == "exit").value["reason"] == "indefinite"
    assert {o.process for o in ops if o.f == "release"} == {8}


def test_the_fenced_body_writes_its_fence_even_when_its_clock_says_stale() -> None:
    """The client leaves that decision to the resource (what the fence is for)."""
    resource = FakeResource()
    client = MemoryClient(MemoryLocks())
    w, _ = make_worker(client, body=fenced.body, resource=resource)
    lease = client.acquire("k0")
    assert lease is not None
    lease.valid_until_ns = 0  # the client's own lease clock ran out (a pause, say)
    section = CriticalSection(w, client, lease)
    assert section.believes() == "lease-expired"
    assert fenced.body(section) is None
    assert resource.writes == [("k0", lease.fence, 2)]


@pytest.mark.parametrize("watch_clock", [True, False])
def test_a_lease_lost_by_the_library_ends_the_section_at_once(watch_clock: bool) -> None:
    client = MemoryClient(MemoryLocks(), ttl_ms=60_000)  # no renewal falls due meanwhile
    w, _ = make_worker(client)
    lease = client.acquire("k0")
    assert lease is not None
    section = CriticalSection(w, client, lease)
    threading.Timer(0.05, lambda: setattr(lease, "lost", True)).start()
    t0 = time.monotonic()
    assert section.work(10.0, watch_clock=watch_clock) == "not-owner"
    assert time.monotonic() - t0 < 5.0  # at the loss, not at the end of its 10 s


def test_recovery_takes_every_lock_once() -> None:
    service = MemoryLocks()
    service.acquire("k1", "left-behind", 150)  # a lease a killed worker left: it expires
    client = MemoryClient(service)
    w, out = make_worker(client, keys=("k0", "k1", "k2"), mode="recover", recover_s=5.0)
    w.recover()
    ops = ops_of(out)
    assert validate_processes(ops) is None  # Jepsen's process rules
    granted = [o.key for o in ops if o.f == "acquire" and o.type == "ok"]
    assert granted == ["k0", "k1", "k2"]
    assert sum(o.f == "acquire" and o.key == "k1" for o in ops if o.type == "invoke") > 1


@pytest.mark.parametrize("mode", ["run", "recover"])
def test_stopping_ends_the_loop(mode: str) -> None:
    service = MemoryLocks()
    service.acquire("k0", "forever", 60_000)
    client = MemoryClient(service)
    w, _ = make_worker(client, mode=mode, recover_s=30.0)
    t = threading.Thread(target=w.recover if mode == "recover" else w.run)
    t.start()
    time.sleep(0.1)
    w.stopping.set()
    t.join(timeout=2)
    assert not t.is_alive()


@pytest.fixture
def pipe() -> Iterator[tuple[int, IO[str]]]:
    """(read end, a buffered writer on the write end), as a worker's stdout to the
    controller is: what is not flushed is not readable."""
    r, w = os.pipe()
    out = open(w, "w", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
    try:
        yield r, out
    finally:
        out.close()
        os.close(r)


def readable(fd: int) -> bytes:
    got = b""
    while select.select([fd], [], [], 0)[0]:
        got += os.read(fd, 65536)
    return got


@pytest.mark.parametrize(("type_", "f"), [("invoke", "acquire"), ("ok", "acquire"),
                                          ("fail", "release"), ("info", "renew"),
                                          ("event", "enter"), ("event", "probe")])
def test_a_prompt_recorder_sends_every_kind_of_op_at_once(
        pipe: tuple[int, IO[str]], type_: str, f: str) -> None:
    """With `prompt` each line is in the pipe when the call returns, whatever its type:
    an `event` left in the buffer would reach a fault that waits for it only when the
    worker next flushes (never, for a process that waits on something else)."""
    r, out = pipe
    rec = Recorder(out, time.monotonic_ns(), 0, prompt=True)
    rec(0, type_, f, "k0", {"fence": 1})
    line = readable(r)
    assert line.endswith(b"\n") and json.loads(line)["type"] == type_


def test_without_prompt_lines_wait_for_a_flush(pipe: tuple[int, IO[str]]) -> None:
    r, out = pipe
    rec = Recorder(out, time.monotonic_ns(), 0, prompt=False)
    rec(0, "ok", "acquire", "k0", {"fence": 1})
    rec(0, "event", "enter", "k0", {"fence": 1})
    assert readable(r) == b""
    rec.flush()
    assert [json.loads(x)["type"] for x in readable(r).splitlines()] == ["ok", "event"]


def test_hurry_on_stdin_sends_lines_sooner_and_its_end_stops_the_worker(
        pipe: tuple[int, IO[str]], capsys: pytest.CaptureFixture[str]) -> None:
    """Until a fault watches who holds a lock a worker sends its lines every 5 ms of
    back-to-back rounds; the controller's `HURRY` on its stdin makes that 1 ms, and the
    end of its stdin asks it to stop."""
    _, out = pipe
    rec = Recorder(out, time.monotonic_ns(), 0, prompt=False)
    assert rec.spool.every_ns == QUIET_FLUSH_NS
    r, w = os.pipe()
    worker = types.SimpleNamespace(rec=rec, stopping=threading.Event())
    try:
        watch_stdin(cast(Worker, worker), r)
        os.write(w, b"not a request\n")
        os.write(w, HURRY)
        deadline = time.monotonic() + 5
        while rec.spool.every_ns != ROUND_FLUSH_NS and time.monotonic() < deadline:
            time.sleep(0.001)
        assert rec.spool.every_ns == ROUND_FLUSH_NS
        assert not worker.stopping.is_set()
        os.close(w)
        w = -1
        assert worker.stopping.wait(5)
        assert capsys.readouterr().err.splitlines() == [HURRIED]
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)


def test_a_worker_that_ends_while_its_stdin_is_open_exits_cleanly() -> None:
    """A worker's main thread ends (its time is up) while the controller still holds
    its stdin open: the thread reading stdin must not make the exit abort."""
    code = ("import threading, time, types\n"
            "from lockcheck.workloads.worker import watch_stdin\n"
            "watch_stdin(types.SimpleNamespace(rec=None, stopping=threading.Event()))\n"
            "time.sleep(0.3)\n")  # the reader is blocked in its read by then
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        code_ = p.wait(timeout=30)
        assert p.stderr is not None
        assert (code_, p.stderr.read().decode()) == (0, "")
    finally:
        p.kill()
        p.wait()
        for f in (p.stdin, p.stderr):
            if f is not None:
                f.close()


def test_a_value_changed_after_the_call_is_recorded_as_it_was(
        pipe: tuple[int, IO[str]]) -> None:
    """Lines are made when they go out; the value is taken when the op is recorded."""
    r, out = pipe
    rec = Recorder(out, time.monotonic_ns(), 0, prompt=False)
    value = {"fence": 1, "seq": [1]}
    rec(0, "invoke", "write", "k0", value)
    value["fence"] = 2
    value["seq"].append(2)  # type: ignore[attr-defined]
    rec.flush()
    assert json.loads(readable(r))["value"] == {"fence": 1, "seq": [1]}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6) | st.sampled_from(["nemesis"]),
                          st.sampled_from(["invoke", "ok", "fail", "info", "event"]),
                          st.sampled_from(["acquire", "release", "write", "enter"]),
                          st.none() | st.text(max_size=8), json_values,
                          st.none() | st.text(max_size=12)), max_size=6),
       st.integers(0, 40))
def test_lines_are_the_ops_in_the_layout(ops: list[tuple[Any, str, str, str | None, Any,
                                                         str | None]],
                                         worker: int) -> None:
    """Each op is one ASCII line in the layout the intake copies without decoding, and
    decodes to the op's fields in the documented order."""
    buf = io.StringIO()
    rec = Recorder(buf, 0, worker, prompt=False)
    for p, type_, f, key, value, error in ops:
        rec(p, type_, f, key, value, error)
    rec.flush()
    lines = buf.getvalue().encode().splitlines(keepends=True)
    assert len(lines) == len(ops)
    for line, (p, type_, f, key, value, error) in zip(lines, ops, strict=True):
        assert in_layout(line)
        got = json.loads(line)
        want = {"time": got["time"], "process": p, "type": type_, "f": f, "key": key,
                "value": value, **({} if error is None else {"error": error}),
                "worker": worker}
        assert list(got) == list(want) and got == want
