"""The one place kazoo's exceptions become Definite / Indefinite / NotOwner, and the
cases where getting it wrong would hide a violation.

`Definite` -> `fail` (certainly not applied); `Indefinite` -> `info` (may have been
applied, the process retires); `NotOwner` -> `fail` with "not-owner".

Part 1 raises every kazoo exception class inside `lockcheck.locks.kazoo.mapped_errors`.
Part 2 drives the real `KazooLockClient`: against tiny fake servers on localhost that
speak just enough of ZooKeeper's protocol (a handshake, then silence or a hang-up), and
against a real standalone ZooKeeper on 127.0.0.1 (paused with SIGSTOP, its sessions
expired, its lock znodes inspected).
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kazoo.exceptions as kex
import kazoo.retry as kretry
import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from lockcheck.cluster.node import pid_state
from lockcheck.db.zookeeper import (
    ZOOKEEPER_JAR,
    Timing,
    config_text,
    mode,
    server_argv,
    srvr,
)
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, NotOwner
from lockcheck.locks.kazoo import KazooLockClient, make_clients, mapped_errors
from tests.conftest import did_not_hang
from tests.unit.error_kinds import error_kind
from tests.unit.test_redis_errors import free_port


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


# -- part 1: every exception class ------------------------------------------------------

D, I, N = "Definite", "Indefinite", "NotOwner"  # noqa: E741
TABLE: list[tuple[BaseException, str, str | None]] = [
    # the recipe gave up waiting for its predecessor: the lock is held by someone else
    (kex.LockTimeout("Failed to acquire lock"), D, "busy"),
    # our znode or our whole session is gone: certainly not the owner any more
    (kex.NoNodeError(), N, "not-owner"),
    (kex.SessionExpiredError(), N, "not-owner"),
    # refused by the client before anything was sent
    (kex.ConnectionClosedError("Connection has been closed"), D, "client closed"),
    (kex.ZookeeperStoppedError(), D, "client stopped"),
    # sent, or maybe sent, and no answer: it may have been applied
    (kex.ConnectionLoss(), I, "connection lost"),
    (kex.ConnectionDropped("socket connection broken"), I, "connection lost"),
    (kex.OperationTimeoutError(), I, "connection lost"),
    (kex.RequestTimeoutError(), I, "connection lost"),
    (KazooTimeoutError("Value not received within 0.25 seconds"), I, "timeout"),
    # the server looked at it and said no (API errors), or rolled a multi back
    (kex.APIError(), D, "APIError"),
    (kex.NoAuthError(), D, "NoAuthError"),
    (kex.BadVersionError(), D, None),
    (kex.NoChildrenForEphemeralsError(), D, None),
    (kex.NodeExistsError(), D, "NodeExistsError"),
    (kex.NotEmptyError(), D, None),
    (kex.InvalidCallbackError(), D, None),
    (kex.InvalidACLError(), D, None),
    (kex.AuthFailedError(), D, None),
    (kex.SessionMovedError(), D, None),
    (kex.NotReadOnlyCallError(), D, None),
    (kex.EphemeralOnLocalSessionError(), D, None),
    (kex.NoWatcherError(), D, None),
    (kex.ReconfigDisabledError(), D, None),
    (kex.SessionClosedRequireSaslError(), D, None),
    (kex.QuotaExceededError(), D, None),
    (kex.ThrottledOpError(), D, None),
    (kex.RolledBackError(), D, None),
    # server-side system errors: we cannot tell what happened
    (kex.ZookeeperError("x"), I, "ZookeeperError"),
    (kex.SystemZookeeperError(), I, None),
    (kex.RuntimeInconsistency(), I, None),
    (kex.DataInconsistency(), I, None),
    (kex.MarshallingError(), I, None),
    (kex.UnimplementedError(), I, None),
    (kex.BadArgumentsError(), I, None),
    (kex.UnknownSessionError(), I, None),
    (kex.NewConfigNoQuorumError(), I, None),
    (kex.ReconfigInProcessError(), I, None),
    # other client-side trouble in the middle of an op: conservative
    (kex.KazooException("x"), I, "KazooException"),
    (kex.CancelledError(), I, "CancelledError"),
    (kex.ConfigurationError(), I, None),
    (kex.WriterNotClosedException(), I, None),
    (kex.SASLException(), I, None),
    (kretry.RetryFailedError("Too many retry attempts"), I, "RetryFailedError"),
    (kretry.InterruptedError(), I, None),
    (kretry.ForceRetryError(), I, "ForceRetryError"),
    (OSError(104, "Connection reset by peer"), I, "ConnectionResetError"),
]


@pytest.mark.parametrize(("exc", "kind", "message"), TABLE,
                         ids=[type(t[0]).__name__ for t in TABLE])
def test_mapping_table(exc: BaseException, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(exc)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


def library_exception_classes() -> set[type]:
    """kazoo's own exception classes (each once: kazoo.exceptions has C-style aliases)."""
    found: set[type] = {KazooTimeoutError}
    for module in (kex, kretry):
        found |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                  if issubclass(c, Exception) and c.__module__ == module.__name__}
    return found


def test_every_kazoo_exception_class_is_in_the_table() -> None:
    """A new kazoo exception class must be looked at, not silently mapped."""
    covered = {type(t[0]) for t in TABLE}
    assert {c.__name__ for c in library_exception_classes() - covered} == set()


def test_not_a_kazoo_error_passes_through() -> None:
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")
    assert kind_of(Definite("mine")) == ("Definite", "mine")


def test_the_cause_is_kept() -> None:
    original = kex.ConnectionLoss()
    with pytest.raises(Indefinite) as ei, mapped_errors():
        raise original
    assert ei.value.__cause__ is original


# -- part 2a: fake servers ---------------------------------------------------------------

TTL_MS = 1000
OP_TIMEOUT_S = 0.25  # the default's TTL/4


def read_frame(c: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = c.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack("!i", head)
    body = b""
    while len(body) < n:
        chunk = c.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def frame(body: bytes) -> bytes:
    return struct.pack("!i", len(body)) + body


def connect_response(session_id: int = 0x1234) -> bytes:
    # protocolVersion, timeOut, sessionId, passwd (16 bytes), readOnly
    return frame(struct.pack("!iiqi", 0, TTL_MS, session_id, 16) + b"\0" * 16 + b"\0")


PING_XID = -2
Behaviour = Callable[[socket.socket, int], bool]  # (conn, xid) -> keep serving?
EXISTS = 3  # ZooKeeper's opcode


@contextlib.contextmanager
def fake_zookeeper(after_handshake: Behaviour | None, seen: list[int]) -> Iterator[int]:
    """Answers the session handshake (unless `after_handshake` is None: then it never
    answers anything) and pings; every other request's opcode goes to `seen`, and its
    xid to `after_handshake`."""
    stop = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            c: socket.socket = self.request
            with contextlib.suppress(OSError):
                if read_frame(c) is None or after_handshake is None:
                    stop.wait()
                    return
                c.sendall(connect_response())
                while not stop.is_set() and (body := read_frame(c)) is not None:
                    xid, opcode = struct.unpack_from("!ii", body)
                    if xid == PING_XID:
                        c.sendall(frame(struct.pack("!iqi", PING_XID, 0, 0)))
                    else:
                        seen.append(opcode)
                        if not after_handshake(c, xid):
                            return

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads, server.block_on_close = True, False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def client(port: int, ttl_ms: int = TTL_MS, op_timeout_s: float = OP_TIMEOUT_S,
           **options: object) -> KazooLockClient:
    opts = ClientOptions(ttl_ms=ttl_ms, op_timeout_s=op_timeout_s, options=options)
    c = make_clients({"hosts": [f"127.0.0.1:{port}"], "session_timeout_ms": ttl_ms},
                     ["k0", "k1"], opts)["k0"]
    assert isinstance(c, KazooLockClient)
    return c


@contextlib.contextmanager
def closing(c: KazooLockClient) -> Iterator[KazooLockClient]:
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(autouse=True)
def short_connect_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # a client that cannot connect, or close, should not hold a test up
    monkeypatch.setattr("lockcheck.locks.kazoo.CONNECT_WAIT_S", 0.5)
    monkeypatch.setattr("lockcheck.locks.kazoo.CLOSE_WAIT_S", 0.2)


def test_refused_connection_is_definite() -> None:
    with closing(client(free_port())) as c, pytest.raises(Definite) as ei:
        c.acquire("k0")
    assert not isinstance(ei.value, NotOwner)
    assert str(ei.value) == "not connected"


def test_a_server_that_never_finishes_the_handshake_is_definite() -> None:
    seen: list[int] = []
    with fake_zookeeper(None, seen) as port, closing(client(port)) as c, \
            pytest.raises(Definite):
        c.acquire("k0")
    assert seen == []


def test_no_reply_after_sending_is_indefinite_and_in_time() -> None:
    seen: list[int] = []
    raised: list[BaseException] = []

    def acquire(c: KazooLockClient) -> None:
        try:
            c.acquire("k0")
        except BaseException as e:
            raised.append(e)

    with fake_zookeeper(lambda c, xid: True, seen) as port, closing(client(port)) as c:
        # in a thread: without our deadline kazoo would wait here forever
        t = threading.Thread(target=acquire, args=(c,), daemon=True)
        t0 = time.monotonic()
        t.start()
        t.join(did_not_hang(OP_TIMEOUT_S) + 2.0)
        elapsed = time.monotonic() - t0
        assert not t.is_alive(), "acquire did not return"
        assert elapsed < did_not_hang(OP_TIMEOUT_S), elapsed
        assert len(raised) == 1 and isinstance(raised[0], Indefinite), raised
        assert str(raised[0]) == "timeout"
        assert seen, "the request never reached the server"
        assert c.leftovers, "a contender that may exist must be remembered"


def test_the_recipe_does_not_retry() -> None:
    """kazoo's Lock retries "retryable" errors until its deadline and then reports "not
    acquired": an error would be recorded as busy. Ours sends once and says what came."""
    def operation_timeout(c: socket.socket, xid: int) -> bool:
        c.sendall(frame(struct.pack("!iqi", xid, 0, kex.OperationTimeoutError.code)))
        return True

    seen: list[int] = []
    with fake_zookeeper(operation_timeout, seen) as port, closing(client(port)) as c, \
            pytest.raises(Indefinite) as ei:
        c.acquire("k0")
    assert str(ei.value) == "connection lost"
    assert seen.count(EXISTS) == 1, seen  # the recipe's first request, sent once


def test_connection_closed_after_sending_is_indefinite() -> None:
    seen: list[int] = []
    with fake_zookeeper(lambda c, xid: False, seen) as port, closing(client(port)) as c, \
            pytest.raises(Indefinite) as ei:
        c.acquire("k0")
    assert str(ei.value) == "connection lost"
    assert seen


# -- part 2b: a real standalone ZooKeeper on 127.0.0.1 ----------------------------------

# Longer than part 2a's: several engineers' suites share this 2-core machine, and a
# starved JVM must not turn a slow answer into a failed test.
REAL_TTL_MS = 2000
REAL_OP_S = 1.0

needs_zookeeper = pytest.mark.skipif(
    shutil.which("java") is None or not ZOOKEEPER_JAR.is_file(),
    reason="needs java and the zookeeper package (scripts/install)")


class Standalone:
    """One ZooKeeper server on 127.0.0.1, started and stopped by PID."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        data = workdir / "data"
        data.mkdir(parents=True)
        (data / "myid").write_text("1\n")
        cfg = workdir / "zoo.cfg"
        cfg.write_text(config_text(1, ["127.0.0.1"], data, Timing.for_ttl(REAL_TTL_MS),
                                   "127.0.0.1", self.port))
        with (workdir / "zookeeper.log").open("ab") as log:
            self.popen = subprocess.Popen(server_argv(cfg, workdir), stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while mode(srvr("127.0.0.1", self.port)) != "standalone":
            assert self.popen.poll() is None, (workdir / "zookeeper.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "zookeeper did not start"
            time.sleep(0.05)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.popen.send_signal(signal.SIGSTOP)
        assert wait_for(lambda: pid_state(self.popen.pid) == "T"), "SIGSTOP not delivered"
        try:
            yield
        finally:
            self.popen.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.popen.send_signal(signal.SIGCONT)
        self.popen.kill()
        self.popen.wait(timeout=10)


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    if shutil.which("java") is None or not ZOOKEEPER_JAR.is_file():
        pytest.skip("needs java and the zookeeper package (scripts/install)")
    s = Standalone(tmp_path_factory.mktemp("zk"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def inspector(zk: Standalone) -> Iterator[KazooClient]:
    """A plain kazoo client to look at the lock znodes."""
    k = KazooClient(hosts=f"127.0.0.1:{zk.port}", timeout=REAL_TTL_MS / 1000)
    k.start(timeout=10)
    try:
        yield k
    finally:
        k.stop()
        k.close()


def real(port: int, **options: object) -> KazooLockClient:
    return client(port, ttl_ms=REAL_TTL_MS, op_timeout_s=REAL_OP_S, **options)


def children(k: KazooClient, key: str) -> list[str]:
    return sorted(k.get_children(f"/locks/{key}")) if k.exists(f"/locks/{key}") else []


def expire_session(zk: Standalone, c: KazooLockClient) -> None:
    """ZooKeeper's own test trick: a second client on the same session closes it."""
    cid = c.zk.client_id
    assert cid is not None
    other = KazooClient(hosts=f"127.0.0.1:{zk.port}", timeout=REAL_TTL_MS / 1000, client_id=cid)
    other.start(timeout=10)
    other.stop()
    other.close()


def wait_for(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def held(c: KazooLockClient, key: str) -> Lease:
    lease = c.acquire(key)
    assert lease is not None
    return lease


@needs_zookeeper
def test_grant_renew_release_and_czxid_fences_grow(zk: Standalone,
                                                   inspector: KazooClient) -> None:
    with closing(real(zk.port)) as a:
        first = held(a, "k0")
        assert children(inspector, "k0") == [first.token]
        stat = inspector.exists(f"/locks/k0/{first.token}")
        assert first.fence == stat.czxid and stat.ephemeralOwner == a.zk.client_id[0]
        before = first.valid_until_ns
        a.renew(first)
        assert first.valid_until_ns > before
        a.release(first)
        assert children(inspector, "k0") == []
        second = held(a, "k0")
        assert second.fence is not None and first.fence is not None
        assert second.fence > first.fence and second.token != first.token
        a.release(second)


@needs_zookeeper
def test_the_grant_and_its_renewals_name_the_member_they_came_through(zk: Standalone) -> None:
    """`granted_by` is the node the session is connected to, by the name the cluster
    gives it; without names it stays empty, as for any client that cannot tell."""
    opts = ClientOptions(ttl_ms=REAL_TTL_MS, op_timeout_s=REAL_OP_S)
    named = make_clients({"hosts": [f"127.0.0.1:{zk.port}"], "names": ["n7"],
                          "session_timeout_ms": REAL_TTL_MS}, ["k0"], opts)["k0"]
    assert isinstance(named, KazooLockClient)
    with closing(named) as a, closing(real(zk.port)) as anonymous:
        lease = held(a, "k0")
        assert lease.granted_by == ("n7",) and lease.refused_by == ()
        lease.granted_by = ()
        a.renew(lease)
        assert lease.granted_by == ("n7",)
        a.release(lease)
        other = held(anonymous, "k1")
        assert other.granted_by == ()
        anonymous.release(other)
    # a renewal answered from the recipe's flag names nobody: no member was asked
    trusting = make_clients({"hosts": [f"127.0.0.1:{zk.port}"], "names": ["n7"],
                             "session_timeout_ms": REAL_TTL_MS}, ["k0"],
                            ClientOptions(ttl_ms=REAL_TTL_MS, op_timeout_s=REAL_OP_S,
                                          options={"trust_flag": True}))["k0"]
    assert isinstance(trusting, KazooLockClient)
    with closing(trusting) as t:
        lease = held(t, "k0")
        assert lease.granted_by == ("n7",)
        t.renew(lease)
        assert lease.granted_by == ()
        t.release(lease)


@needs_zookeeper
def test_the_sequence_fence_is_the_znode_suffix(zk: Standalone) -> None:
    with closing(real(zk.port, fence="sequence")) as a:
        lease = held(a, "k1")
        assert lease.fence == int(lease.token[-10:])
        a.release(lease)


@needs_zookeeper
def test_busy_is_definite_in_time_and_leaves_no_contender(zk: Standalone,
                                                          inspector: KazooClient) -> None:
    with closing(real(zk.port)) as a, closing(real(zk.port)) as b:
        lease = held(a, "k0")
        t0 = time.monotonic()
        with pytest.raises(Definite) as ei:
            b.acquire("k0")
        assert str(ei.value) == "busy" and not isinstance(ei.value, Indefinite)
        assert time.monotonic() - t0 < did_not_hang(REAL_OP_S)
        assert children(inspector, "k0") == [lease.token]
        a.release(lease)


@needs_zookeeper
def test_a_waiter_whose_predecessor_gives_up_still_returns_in_time(zk: Standalone) -> None:
    """The recipe waits its full timeout again after each wake-up; our deadline caps
    the whole acquire."""
    with closing(real(zk.port)) as a, closing(real(zk.port)) as b, \
            closing(real(zk.port)) as c:
        lease = held(a, "k0")
        outcome: dict[str, float] = {}

        def contend(who: KazooLockClient, name: str) -> None:
            t0 = time.monotonic()
            with contextlib.suppress(Definite):
                who.acquire("k0")
            outcome[name] = time.monotonic() - t0

        tb = threading.Thread(target=contend, args=(b, "b"))
        tb.start()
        time.sleep(0.1)  # c queues behind b; b gives up while c waits, c waits on a
        contend(c, "c")
        tb.join()
        # uncapped, c would wait its full timeout a second time: about 1.2 s
        assert outcome["c"] < REAL_OP_S, outcome
        a.release(lease)


@needs_zookeeper
def test_a_timed_out_acquire_leaves_no_contender_behind(zk: Standalone,
                                                        inspector: KazooClient) -> None:
    """kazoo#732: the create reaches the server after we gave up; the znode would hold
    the lock for nobody until the session ends. The next acquire deletes it."""
    with closing(real(zk.port)) as a:
        first = held(a, "k1")  # the lock path exists now: acquire is one create away
        a.release(first)
        a.op_timeout_s = OP_TIMEOUT_S  # give up soon, long before kazoo drops the connection
        with zk.paused(), pytest.raises(Indefinite):
            a.acquire("k1")
        a.op_timeout_s = REAL_OP_S
        assert len(a.leftovers) == 1
        orphan = a.leftovers[0].prefix
        assert wait_for(lambda: any(n.startswith(orphan) for n in children(inspector, "k1")))
        lease = held(a, "k1")  # cleans up first, then is granted
        assert children(inspector, "k1") == [lease.token]
        assert a.leftovers == []
        a.release(lease)


@needs_zookeeper
def test_an_expired_session_is_not_owner_and_the_default_client_knows(zk: Standalone) -> None:
    with closing(real(zk.port)) as a:
        lease = held(a, "k0")
        expire_session(zk, a)
        assert wait_for(lambda: lease.lost), "SUSPENDED/LOST must end the lease"
        assert wait_for(lambda: a.zk.connected, 10)  # a new session
        with pytest.raises(NotOwner):
            a.renew(lease)
        with pytest.raises(NotOwner):
            a.release(lease)


@needs_zookeeper
def test_the_no_listener_client_keeps_believing(zk: Standalone, inspector: KazooClient) -> None:
    """python-ecosystem.md §1.3: is_acquired stays True after the session is gone."""
    with closing(real(zk.port, listen=None, trust_flag=True)) as a:
        lease = held(a, "k0")
        expire_session(zk, a)
        assert wait_for(lambda: lease.token not in children(inspector, "k0"))
        assert wait_for(lambda: a.zk.connected, 10)
        a.renew(lease)  # the recipe's flag says yes
        assert lease.still_holds() and not lease.lost
        with pytest.raises(NotOwner):
            release_when_answered(a, lease)  # the server says no


def release_when_answered(c: Any, lease: Any) -> None:
    """c.release(lease), again after a connection lost on the way (a 2 s session on a
    loaded machine loses one now and then): the answer is the server's, not the link's."""
    for _ in range(3):
        try:
            c.release(lease)
            return
        except Indefinite:
            assert wait_for(lambda: c.zk.connected, 10)
    c.release(lease)


@needs_zookeeper
@pytest.mark.parametrize(("listen", "lost"), [("suspended", True), ("lost", False),
                                              (None, False)])
def test_suspended_ends_the_lease_only_for_the_default(zk: Standalone, listen: str | None,
                                                       lost: bool) -> None:
    with closing(real(zk.port, listen=listen, trust_flag=listen != "suspended")) as a:
        lease = held(a, "k1")
        with zk.paused():  # longer than kazoo's read timeout (2/3 of the session)
            assert wait_for(lambda: not a.zk.connected, 3)
        assert lease.lost is lost
        assert wait_for(lambda: a.zk.connected, 10)
        with contextlib.suppress(NotOwner):
            a.release(lease)


@needs_zookeeper
def test_the_lease_clock_runs_out_without_contact(zk: Standalone) -> None:
    with closing(real(zk.port)) as a:
        lease = held(a, "k0")
        assert lease.still_holds()
        assert not lease.still_holds(lease.valid_until_ns)
        assert lease.valid_until_ns - time.monotonic_ns() < REAL_TTL_MS * 1_000_000
        a.release(lease)
