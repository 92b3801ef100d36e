"""A client worker process: the loop every workload shares, one JSON op per line on stdout.

acquire -> enter -> body (work, renewals, resource calls) -> exit -> release, over and
over, on random lock names, with jittered backoff after a refusal. One thread issues
every operation, so a process never has two in flight, as in Jepsen; renewals
happen between steps of the body, every TTL/3. The client stops its critical section
by itself as soon as it can no longer believe it holds the lock: a renew was
refused, its own lease clock ran out, or its library said the lock is gone.

An `info` of any operation retires the process id (the op may still take effect):
the worker continues as `process + process_stride`. After an `info` inside a
critical section the section ends and the lease is released under the new id; the
release names the lease, so checkers know whose it was.

In `recover` mode (the run's last phase, after every fault is healed), the worker
takes each lock once, retrying until `recover_s` runs out: a service that serves
again lets it through quickly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import select
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Protocol, SupportsIndex, cast

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
)
from lockcheck.workloads.api import Outcome, Reason
from lockcheck.workloads.hold import sampler


@dataclass(frozen=True)
class WorkerConfig:
    worker: int
    process_stride: int
    backend: str
    workload: str
    client_config: dict[str, Any]
    keys: list[str]
    ttl_ms: int
    hold_ms: tuple[int, int]
    seed: int
    t0_ns: int
    op_timeout_s: float
    drift: float = 0.01
    backoff_ms: tuple[int, int] = (5, 30)
    resource: dict[str, Any] | None = None
    mode: str = "run"  # "run" or "recover"
    recover_s: float = 10.0
    recovery_keys: list[str] | None = None  # what `recover` takes (default: every key)
    key_params: dict[str, Any] = field(default_factory=dict)  # the workload's KeyPlan
    options: dict[str, Any] = field(default_factory=dict)
    hold_dist: str | None = None  # a long-tail law (workloads/hold.py); None: uniform
    # recording on and off in turns of this many seconds (benchmarks/bench_overhead.py)
    record_phase_s: float | None = None
    # send every op the moment it is recorded (a fault acts on them as they arrive)
    prompt: bool = True
    # where `client-pause` stops a worker (spec.PAUSE_AT): "acquire" and "release" hand
    # the lock client a stop point (workloads/stop_point.py)
    pause_at: str = "section"
    # `reply-loss`: the op ("acquire", "renew", "release") before whose send the worker,
    # when armed, stops itself (workloads/stop_point.py)
    stop_before: str | None = None
    # `--client`: the factory ("module:attr") run instead of the backend's, and the
    # folder it imports from (lockcheck/clients.py)
    client: str | None = None
    client_path: str | None = None
    # where the spool keeps the lines not yet sent (the controller reads what a worker
    # that died left there); None: no file, and each release's invoke is sent first
    keep_path: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(s: str) -> WorkerConfig:
        d = json.loads(s)
        d["hold_ms"] = tuple(d["hold_ms"])
        d["backoff_ms"] = tuple(d["backoff_ms"])
        return WorkerConfig(**d)


# an op kept until it goes out, by the Python spool: (time, process, type, f, key, value
# as JSON, error)
Pending = tuple[int, Any, str, str, str | None, str, str | None]
# without `prompt`: lines go out at a round's start once this long has passed since they
# last went (and before every sleep): how late a fault aimed at a holder sees a grant in
# back-to-back rounds, and, without a keep file, what a killed worker can lose. Once a fault
# watches who holds a lock (the controller writes `HURRY` to the worker's stdin) it is
# `ROUND_FLUSH_NS`; until then `QUIET_FLUSH_NS`, when nothing reads the lines sooner
# than the intake's 50 ms gather anyway (docs/benchmarks.md, "Harness overhead")
ROUND_FLUSH_NS = 1_000_000
QUIET_FLUSH_NS = 5_000_000
HURRY = b"hurry\n"
HURRIED = "a fault watches who holds a lock: lines go out every 1 ms of rounds from now"


class Recorder:
    """Records ops as JSON lines, from any thread (a client library's own thread may log).

    A call puts the op's line, at the time it reads from the clock, into a spool
    (`_crecord.Spool`, in C: a few hundred nanoseconds, the clock read and the decision
    to send included; where it was not built, `PySpool` keeps the op and makes its line
    when it goes out). A value is encoded at the call unless it is `Encoded`, so a
    caller's later change to it cannot reach the history. The lines are written in
    bulk: before every sleep (`flush`) and at the start of a round (the `invoke` of an
    acquire) if 5 ms have passed since they last went (`QUIET_FLUSH_NS`; 1 ms,
    `ROUND_FLUSH_NS`, once a fault watches who holds a lock: `hurry`); with `prompt` (a
    fault acts on ops as they arrive: client-pause), at every op, whatever its type (an
    `event` of a critical section is what the fault waits for), so that no line waits
    while the worker waits. So back-to-back rounds cost a write to the pipe every few
    milliseconds instead of six per round (docs/benchmarks.md, "Harness overhead").

    A killed worker loses none of its lines: with `keep` (an open file, the run's
    `workers/<name>.unsent`) the compiled spool holds the lines it has not sent in a
    shared mapping of that file, and the controller takes them from there when the
    worker's pipe ends (`lockcheck/intake.py`). Without it (the Python spool, or no
    file), a release's `invoke` goes out before the release is sent, and a killed
    worker loses at most its last 5 ms or round, never a release: what is recorded is
    always a prefix of what it did, what was lost reads as ops cut off, and a lock it
    gave up is never read as still held.

    A line goes into the spool whole, without a lock (the spool lets no other thread in
    while it copies a line); taking the lines and writing them is under `lock`, so each
    worker's lines reach the pipe in the order they were recorded.

    The layout is fixed, `{"time": T, "process": P, "type": "t", "f": "f", "key": ...,
    "value": ..., ["error": ...,] "worker": W}`, ASCII, so that the controller can copy
    a line without decoding it (`lockcheck/intake.py`); only key, value and error go
    through the JSON encoder. `out` is a binary stream, or a text one (written the
    lines decoded)."""

    def __init__(self, out: IO[str] | IO[bytes], t0_ns: int, worker: int,
                 prompt: bool = True, keep: int | None = None) -> None:
        self.write = byte_sink(out)
        self.t0 = t0_ns
        self.worker = worker
        self.prompt = prompt
        self.lock = threading.Lock()
        self.broken = False
        # the lines not yet written (and, with `keep`, a file that holds them too)
        self.spool = make_spool(worker, t0_ns, prompt, keep=keep)

    def __call__(self, process: int, type_: str, f: str, key: str | None, value: Any = None,
                 error: str | None = None) -> None:
        if self.spool.record(process, type_, f, key, value, error):
            self.flush()

    def hurry(self) -> None:
        """A fault watches who holds a lock: lines go out every `ROUND_FLUSH_NS` of
        back-to-back rounds from now on. Any thread."""
        self.spool.every_ns = ROUND_FLUSH_NS

    def flush(self) -> None:
        """Before the worker waits: everything recorded goes out."""
        with self.lock:
            try:
                self.write(self.spool.take())
            except (BrokenPipeError, ValueError, OSError):
                self.broken = True  # the controller is gone: stop
            else:
                self.spool.sent()


def byte_sink(out: IO[str] | IO[bytes]) -> Callable[[bytes], None]:
    """Writes and flushes bytes into `out`: a binary stream; a text stream over one (what
    is pending in the text stream goes first); or a text stream alone (a test's
    StringIO), given the bytes decoded."""
    if not isinstance(out, io.TextIOBase):
        binary = cast(IO[bytes], out)

        def put(data: bytes) -> None:
            if data:
                binary.write(data)
            binary.flush()
        return put
    text = out
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        def put_text(data: bytes) -> None:
            if data:
                text.write(data.decode())
            text.flush()
        return put_text

    def put_under(data: bytes) -> None:
        text.flush()
        if data:
            buffer.write(data)
        buffer.flush()
    return put_under


class PySpool:
    """`_crecord.Spool` in Python, where it was not built: each op kept as it came, its
    line made when the lines go out (`take`), outside the critical section."""

    def __init__(self, worker: int, escape: Callable[[str], str],
                 dumps: Callable[[Any], str], raw: type, t0: int = 0, prompt: bool = False,
                 every_ns: int = QUIET_FLUSH_NS) -> None:
        self.worker, self.dumps, self.raw = worker, dumps, raw
        self.t0, self.prompt, self.every_ns = t0, prompt, every_ns
        self.flushed = 0
        self.pending: list[Pending] = []
        self.lock = threading.Lock()  # a take must not lose an op added meanwhile

    def add(self, t: int, process: Any, type_: str, f: str, key: str | None, value: Any,
            error: str | None) -> None:
        v = cast(str, value) if type(value) is self.raw else "null" if value is None else \
            self.dumps(value)
        with self.lock:
            self.pending.append((t, process, type_, f, key, v, error))

    def record(self, process: Any, type_: str, f: str, key: str | None, value: Any = None,
               error: str | None = None) -> bool:
        t = time.monotonic_ns() - self.t0
        self.add(t, process, type_, f, key, value, error)
        if self.prompt:
            return True
        # a release goes out before it is sent (see `_crecord.c`)
        return type_ == "invoke" and (
            f == "release" or (f == "acquire" and t - self.flushed >= self.every_ns))

    def take(self) -> bytes:
        with self.lock:
            pending, self.pending = self.pending, []
            self.flushed = time.monotonic_ns() - self.t0
        return lines(self.worker, pending).encode() if pending else b""

    def sent(self) -> None:
        """Nothing to do: this spool keeps no file (its releases go out at once)."""


def lines(worker: int, ops: list[Pending]) -> str:
    """The Recorder's lines for `ops`, in one string."""
    tail = f', "worker": {worker}}}\n'
    return "".join([
        f'{{"time": {t}, "process": {p if type(p) is int else _dumps(p)}, "type": "{ty}", '
        f'"f": "{f}", "key": {"null" if k is None else _string(k)}, "value": {v}'
        f'{"" if e is None else _error(e)}{tail}'
        for t, p, ty, f, k, v, e in ops])


def _error(e: str) -> str:
    return f', "error": {_string(e)}'


def _json_encoder() -> Callable[[Any], str]:
    """json's own C encoder, made once: `json.dumps` makes one per call, and that was
    most of what it cost a worker per op (docs/benchmarks.md). The same output."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the plain way
        return json.JSONEncoder().encode

    def refuse(o: Any) -> Any:
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    it = make(None, refuse, json.encoder.encode_basestring_ascii, None, ": ", ", ", False,
              False, True)
    return lambda v: "".join(it(v, 0))


_dumps = _json_encoder()
_string = json.encoder.encode_basestring_ascii


class Encoded(str):
    """A value already in JSON: the Recorder writes it as it is (a lease's value is
    recorded four or five times a round; it is encoded once)."""




class Spool(Protocol):
    def add(self, t: int, process: Any, type_: str, f: str, key: str | None, value: Any,
            error: str | None, /) -> None: ...

    def record(self, process: Any, type_: str, f: str, key: str | None, value: Any = None,
               error: str | None = None, /) -> bool: ...

    def take(self) -> bytes: ...

    def sent(self) -> None: ...

    every_ns: int


def make_spool(worker: int, t0_ns: int = 0, prompt: bool = False,
               compiled: bool = True, keep: int | None = None) -> Spool:
    """The compiled spool if it was built (and `compiled`), else the Python one. `keep`:
    an open file the compiled spool keeps its lines in until they were written, so
    that the controller finds them if the worker dies first (`lockcheck/intake.py`);
    the Python spool has none, and sends a release's `invoke` before the release."""
    try:
        from lockcheck._crecord import Spool as CSpool
    except ImportError:
        compiled = False
    if compiled:
        return cast(Spool, CSpool(worker, _string, _dumps, Encoded, t0=t0_ns, prompt=prompt,
                                  every_ns=QUIET_FLUSH_NS,
                                  keep=-1 if keep is None else keep))
    return PySpool(worker, _string, _dumps, Encoded, t0_ns, prompt)


class AlternatingRecorder(Recorder):
    """What recording costs, measured in one run (benchmarks/bench_overhead.py): the
    same worker records in turns of `phase_s` from the start mark, off first. While
    off, an op costs a clock read and a count: ok acquires per 100 ms, written to
    stderr (the worker's log) when it exits."""

    BUCKET_NS = 100_000_000

    def __init__(self, out: IO[str] | IO[bytes], t0_ns: int, worker: int,
                 phase_s: float, keep: int | None = None) -> None:
        super().__init__(out, t0_ns, worker, prompt=False, keep=keep)
        self.phase_ns = int(phase_s * 1e9)
        self.acquires: dict[int, int] = {}  # 100 ms bucket since t0 -> ok acquires, off
        self.busy: dict[int, int] = {}  # the same for acquires refused (the lock was held)

    def __call__(self, process: int, type_: str, f: str, key: str | None, value: Any = None,
                 error: str | None = None) -> None:
        since = time.monotonic_ns() - self.t0
        if since // self.phase_ns % 2:
            if self.spool.record(process, type_, f, key, value, error):
                self.flush()
        elif f == "acquire" and type_ in ("ok", "fail"):
            counts = self.acquires if type_ == "ok" else self.busy
            b = since // self.BUCKET_NS
            counts[b] = counts.get(b, 0) + 1

    def summary(self) -> str:
        return json.dumps({"worker": self.worker, "unrecorded_acquires": self.acquires,
                           "unrecorded_busy": self.busy})


class LeaseValues:
    """`{"fence": N, "lease": L, ...extra}` for the history, each lease encoded once."""

    def __init__(self) -> None:
        self.cache: dict[str, str] = {}  # token -> JSON, the last few leases

    def __call__(self, lease: Lease, **extra: Any) -> Encoded:
        base = self.cache.get(lease.token)
        if base is None:
            if len(self.cache) > 16:
                self.cache.clear()
            fence = lease.fence
            base = self.cache[lease.token] = (
                f'{{"fence": {fence}, "lease": {_string(lease.token)}}}'
                if type(fence) is int else _dumps({"fence": fence, "lease": lease.token}))
        if not extra:
            return Encoded(base)
        # field by field: a string (a section's reason) without the encoder's set-up
        out = base[:-1]
        for k, v in extra.items():
            out += f", {_string(k)}: {_string(v) if type(v) is str else _dumps(v)}"
        return Encoded(out + "}")


def granted_by(lease: Lease) -> dict[str, Any]:
    """The servers that granted and refused, for an ok acquire or renew and the enter
    event, when the client named them."""
    if not lease.granted_by:
        return {}
    return {"granted_by": list(lease.granted_by), "refused_by": list(lease.refused_by)}


# which lock the worker takes next (a workload's scheduler); may record ops of its own
Picker = Callable[["Worker"], str]


def recorded(rec: Recorder, process: int, f: str, key: str | None,
             value: Mapping[str, Any], fn: Callable[[int], Outcome]) -> Outcome:
    """Record `invoke f value`, run `fn(process)`, record its completion:
    OSError/TimeoutError or `Indefinite` is `info`, `Definite` is `fail`."""
    rec(process, "invoke", f, key, dict(value))
    try:
        out = fn(process)
    except (OSError, Indefinite) as e:
        out = Outcome("info", dict(value), str(e)[:80] or type(e).__name__)
    except Definite as e:
        out = Outcome("fail", dict(value), str(e)[:80])
    rec(process, out.type, f, key, out.value, out.error)
    return out


class CriticalSection:
    """The `workloads.api.Section` a body runs in; renews the lease when due."""

    def __init__(self, worker: Worker, client: LockClient, lease: Lease) -> None:
        self.worker, self.client, self.lease = worker, client, lease
        self.key = lease.key
        self.fence = lease.fence
        self.lease_token = lease.token
        self.resource = worker.resource
        self.interval_ns = lease.ttl_ms * 1_000_000 // 3
        self.next_renew = time.monotonic_ns() + self.interval_ns
        self.retired = False  # an op's outcome is unknown: the worker must retire

    def hold_time(self) -> float:
        return self.worker.draw_hold(self.worker.rng) / 1000.0

    def believes(self) -> Reason:
        if self.retired:
            return "indefinite"
        if self.lease.lost:
            return "not-owner"
        if not self.lease.still_holds():
            return "lease-expired"
        return None

    def work(self, seconds: float, *, watch_clock: bool = True) -> Reason:
        end = time.monotonic_ns() + int(seconds * 1e9)
        stopping = self.worker.stopping
        while True:
            reason = self.believes() if watch_clock else self._told_lost()
            if reason is not None:
                return reason
            now = time.monotonic_ns()
            # the end of the work comes before a renewal that is due: after a pause the
            # work carries on at once, as it would while a heartbeat thread renews
            if now >= end or stopping.is_set():
                return None
            if now >= self.next_renew:
                reason = self.renew()
                if reason is not None:
                    return reason
                continue
            # wake before the lease clock runs out, to notice it promptly
            wake = min(end, self.next_renew, self.lease.valid_until_ns)
            self.worker.rec.flush()
            time.sleep(max(0.0, min((wake - now) / 1e9, 0.01)))

    def _told_lost(self) -> Reason:
        if self.retired:
            return "indefinite"
        return "not-owner" if self.lease.lost else None

    def renew(self) -> Reason:
        w, lease = self.worker, self.lease
        p, key = w.process, self.key
        self.next_renew = time.monotonic_ns() + self.interval_ns
        w.rec(p, "invoke", "renew", key, w.lease_value(lease, ttl_ms=lease.ttl_ms))
        w.before_send("renew", key, lease.fence)
        try:
            self.client.renew(lease)
        except NotOwner:
            lease.lost = True
            w.rec(p, "fail", "renew", key, w.lease_value(lease), "not-owner")
            return "not-owner"
        except Definite as e:
            w.rec(p, "fail", "renew", key, w.lease_value(lease), str(e))
        except Indefinite as e:
            w.rec(p, "info", "renew", key, w.lease_value(lease), str(e))
            self.retired = True
            return "indefinite"
        else:
            w.rec(p, "ok", "renew", key, w.lease_value(lease, **granted_by(lease)))
        return None

    def call(self, f: str, value: Mapping[str, Any],
             fn: Callable[[int], Outcome]) -> Outcome:
        out = recorded(self.worker.rec, self.worker.process, f, self.key, value, fn)
        if out.type == "info":
            self.retired = True  # the section ends; the worker retires before releasing
        return out


class Worker:
    def __init__(self, cfg: WorkerConfig, clients: Mapping[str, LockClient], rec: Recorder,
                 body: Callable[[CriticalSection], Reason], resource: Any = None,
                 pick: Picker | None = None) -> None:
        self.cfg, self.clients, self.rec, self.body = cfg, clients, rec, body
        self.resource = resource
        self.pick = pick
        self.rng = random.Random(cfg.seed * 1_000_003 + cfg.worker)
        self.process = cfg.worker
        self.stopping = threading.Event()
        self.draw_hold = sampler(cfg.hold_ms, cfg.hold_dist)
        self.lease_value = LeaseValues()
        self.acquire_value = Encoded(_dumps({"ttl_ms": cfg.ttl_ms}))
        # called between an op's invoke record and its send: (f, key, fence)
        self.before_send: Callable[[str, str, Any], None] = _no_stop
        # a workload's own operation in place of `one_round` (Workload.round)
        self.round: Callable[[Worker], None] | None = None

    def retire(self) -> None:
        self.process += self.cfg.process_stride

    def backoff(self) -> None:
        lo, hi = self.cfg.backoff_ms
        self.rec.flush()
        self.stopping.wait(self.rng.uniform(lo, hi) / 1000.0)

    def next_key(self) -> str:
        return self.rng.choice(self.cfg.keys) if self.pick is None else self.pick(self)

    def call(self, f: str, key: str | None, value: Mapping[str, Any],
             fn: Callable[[int], Outcome]) -> Outcome:
        """A recorded op outside any critical section (a scheduler's query, say)."""
        out = recorded(self.rec, self.process, f, key, value, fn)
        if out.type == "info":
            self.retire()
        return out

    def run(self) -> None:
        while not self.stopping.is_set() and not self.rec.broken:
            if self.round is not None:
                self.round(self)  # the workload's own operation (several locks)
            else:
                self.one_round(self.next_key())

    def recover(self) -> None:
        """Take every lock once (retrying), as the last phase of a run."""
        deadline = time.monotonic() + self.cfg.recover_s
        keys = self.cfg.recovery_keys if self.cfg.recovery_keys is not None else self.cfg.keys
        for key in keys:
            while (time.monotonic() < deadline and not self.rec.broken
                   and not self.stopping.is_set()):
                if self.one_round(key, body=lambda s: None):
                    break

    def acquire(self, key: str) -> Lease | None:
        rec, client = self.rec, self.clients[key]
        p = self.process
        rec(p, "invoke", "acquire", key, self.acquire_value)
        self.before_send("acquire", key, None)
        try:
            lease = client.acquire(key)
        except Definite as e:
            rec(p, "fail", "acquire", key, None, str(e))
            return None
        except Indefinite as e:
            rec(p, "info", "acquire", key, None, str(e))
            self.retire()
            return None
        if lease is None:
            rec(p, "fail", "acquire", key, None, "busy")
            return None
        rec(p, "ok", "acquire", key, self.lease_value(lease, **granted_by(lease)))
        return lease

    def one_round(self, key: str,
                  body: Callable[[CriticalSection], Reason] | None = None) -> bool:
        """acquire, body, release; True if the lock was granted."""
        lease = self.acquire(key)
        if lease is None:
            self.backoff()
            return False
        client, rec = self.clients[key], self.rec
        p = self.process
        rec(p, "event", "enter", key, self.lease_value(lease, **granted_by(lease)))
        section = CriticalSection(self, client, lease)
        try:
            reason = (body or self.body)(section)
        except Exception as e:  # a body bug: leave the section, say so on stderr
            print(f"worker {self.cfg.worker}: body failed: {type(e).__name__}: {e}",
                  file=sys.stderr)
            reason = "error"
        rec(p, "event", "exit", key, self.lease_value(lease, reason=reason or "done"))
        if section.retired:
            self.retire()
        self.release(client, lease)
        return True

    def release(self, client: LockClient, lease: Lease) -> None:
        p, key, rec = self.process, lease.key, self.rec
        rec(p, "invoke", "release", key, self.lease_value(lease))
        self.before_send("release", key, lease.fence)
        try:
            client.release(lease)
        except NotOwner:
            rec(p, "fail", "release", key, self.lease_value(lease), "not-owner")
        except Definite as e:
            rec(p, "fail", "release", key, self.lease_value(lease), str(e))
        except Indefinite as e:
            rec(p, "info", "release", key, self.lease_value(lease), str(e))
            self.retire()
        else:
            rec(p, "ok", "release", key, self.lease_value(lease))


def _no_stop(f: str, key: str, fence: Any) -> None:
    return None


def aimed_send(op: str, stop: Callable[[str, Any], None]) -> Callable[[str, str, Any], None]:
    """The `before_send` of a worker aimed at by `reply-loss`: stop before `op` only."""
    def before(f: str, key: str, fence: Any) -> None:
        if f == op:
            stop(key, fence)

    return before


def watch_stdin(worker: Worker, fd: int = 0) -> None:
    """The controller asks us to stop by closing our stdin (or by dying), and to send
    lines sooner by writing `HURRY` to it (`Recorder.hurry`)."""
    parent = os.getppid()

    def run() -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader holds
        # its lock, and the interpreter aborts (SIGABRT) when it closes sys.stdin at exit
        pending = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(fd, 4096):
                *lines, pending = (pending + chunk).split(b"\n")
                if HURRY[:-1] in lines:
                    worker.rec.hurry()
                    print(HURRIED, file=sys.stderr, flush=True)
        worker.stopping.set()

    def orphan() -> None:
        while not worker.stopping.wait(0.5):
            if os.getppid() != parent:
                worker.stopping.set()

    threading.Thread(target=run, daemon=True).start()
    threading.Thread(target=orphan, daemon=True).start()


def select_sleep(seconds: float | SupportsIndex) -> None:
    """time.sleep without clock_nanosleep, which fails (EINVAL) under libfaketime with
    the monotonic clock left true (cluster/faketime.py)."""
    end = time.monotonic() + float(seconds)
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


def main(argv: list[str]) -> int:
    from lockcheck.backends import BACKENDS
    from lockcheck.cluster.faketime import FAKED_ENV
    from lockcheck.registry import load
    from lockcheck.workloads.registry import WORKLOADS
    from lockcheck.workloads.stop_point import POINTS, StopPoint

    if os.environ.get(FAKED_ENV):  # before the client library is imported
        time.sleep = select_sleep
    cfg = WorkerConfig.from_json(argv[0])
    # a buffered stdout of our own: lines go out when the Recorder says, not at every
    # write because PYTHONUNBUFFERED happens to be set where the run was started
    # (the Recorder writes bytes into the buffer; a library's print goes into it too,
    # through the text layer, in order)
    raw = io.FileIO(sys.stdout.fileno(), "w", closefd=False)
    out = io.BufferedWriter(raw, 1 << 16)
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    # the file the spool keeps unsent lines in: the controller reads it if we die
    keep = None if cfg.keep_path is None else \
        os.open(cfg.keep_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    rec = Recorder(out, cfg.t0_ns, cfg.worker, cfg.prompt, keep) \
        if cfg.record_phase_s is None else \
        AlternatingRecorder(out, cfg.t0_ns, cfg.worker, cfg.record_phase_s, keep)
    backend = BACKENDS[cfg.backend]
    workload = WORKLOADS[cfg.workload]
    # client-pause --pause-at acquire / release: the lock client stops the worker itself
    at = cfg.pause_at if cfg.pause_at in POINTS else None
    stop_point = StopPoint(rec, rec.flush, cfg.worker, at or "acquire")
    stop_point.install()
    opts = ClientOptions(ttl_ms=cfg.ttl_ms, op_timeout_s=cfg.op_timeout_s, drift=cfg.drift,
                         worker=cfg.worker, options={**backend.options, **cfg.options},
                         at_grant_reply=stop_point if at == "acquire" else None,
                         at_release_check=(lambda lease: stop_point(lease.key, lease.fence))
                         if at == "release" else None)
    if cfg.client is None:
        clients = backend.client_factory()(cfg.client_config, cfg.keys, opts)
    else:
        from lockcheck.clients import worker_clients

        clients = worker_clients(cfg.client, cfg.client_path, cfg.client_config, cfg.keys,
                                 opts)
    resource = None
    if cfg.resource is not None and workload.resource_client is not None:
        resource = load(workload.resource_client)(cfg.resource, cfg.op_timeout_s)
    w = Worker(cfg, clients, rec, load(workload.body), resource,
               load(workload.pick) if workload.pick else None)
    if workload.round is not None:
        w.round = load(workload.round)
    stop_point.process = lambda: w.process
    if cfg.stop_before is not None:  # reply-loss (validated: no other stop point then)
        stop_point.at = f"send-{cfg.stop_before}"
        w.before_send = aimed_send(cfg.stop_before, stop_point)
    watch_stdin(w)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            w.recover() if cfg.mode == "recover" else w.run()
    finally:
        rec.flush()
        for c in {id(c): c for c in clients.values()}.values():
            with contextlib.suppress(Exception):
                c.close()
        if isinstance(rec, AlternatingRecorder):
            print(rec.summary(), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
