"""The redis-sentinel lock client: its error map, and what redis-py's Sentinel really raises.

`lockcheck.locks.sentinel.mapped_errors` is the `redis` map plus Sentinel's own cases:
no Sentinel named a primary (`MasterNotFoundError`, raised while connecting: nothing
was sent) and a demoted primary's READONLY reply, which redis-py turns into a
`ConnectionError` ("The previous master is now a slave"): the server refused the
command, so it is a definite `fail`, not the `info` a ConnectionError usually is.

Part 1 walks every exception class of `redis.exceptions` and `redis.sentinel`. Part 2
drives the real `SentinelLockClient` against fake Sentinels and primaries on
localhost (refused, silent, error replies), and against a real read-only redis-server
replica, and checks that every call returns within the op timeout.
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.exceptions as rex
import redis.sentinel as rsen

from lockcheck.locks.api import Definite, Indefinite, Lease, NotOwner
from lockcheck.locks.sentinel import SentinelLockClient, mapped_errors
from tests.conftest import did_not_hang
from tests.unit.error_kinds import error_kind
from tests.unit.test_redis_errors import TABLE as REDIS_TABLE
from tests.unit.test_redis_errors import fake_redis, free_port

# 1 s: a Sentinel query gets a quarter of it, and the fake servers here answer from
# threads of this process, which a loaded machine (clusters of other tests beside
# this one) delayed past 75 ms once
OP_TIMEOUT_S = 1.0


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


def demoted_primary_error() -> rex.ConnectionError:
    """What redis-py's SentinelManagedConnection raises on a READONLY reply: a new
    ConnectionError raised inside `except ReadOnlyError`, so that is its context."""
    e = rex.ConnectionError("The previous master is now a slave")
    e.__context__ = rex.ReadOnlyError("You can't write against a read only replica.")
    return e


SENTINEL_TABLE: list[tuple[str, BaseException, str, str | None]] = [
    ("MasterNotFoundError", rsen.MasterNotFoundError(
        "No master found for 'lockcheck' : Redis<...> - TimeoutError('Timeout reading')"),
     "Definite", "no primary"),
    ("SlaveNotFoundError", rsen.SlaveNotFoundError("No slave found for 'lockcheck'"),
     "Definite", "no primary"),
]

# (name, exception, kind, message): the redis table, where Sentinel changes nothing
TABLE = [*REDIS_TABLE, *SENTINEL_TABLE]


@pytest.mark.parametrize(("exc", "kind", "message"), [t[1:] for t in TABLE],
                         ids=[t[0] for t in TABLE])
def test_mapping_table(exc: BaseException, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(exc)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


def test_a_demoted_primary_is_definite() -> None:
    e = demoted_primary_error()
    assert isinstance(e.__context__, rex.ReadOnlyError)
    assert kind_of(e) == ("Definite", "readonly")


def test_a_connection_error_without_readonly_stays_indefinite() -> None:
    assert kind_of(rex.ConnectionError("Connection closed by server.")) == \
        ("Indefinite", "connection lost")


def test_every_exception_class_is_in_the_table() -> None:
    """A new redis-py or Sentinel exception class must be looked at, not mapped blindly."""
    # by class, not name: ReplicaNotFoundError is SlaveNotFoundError under a new name
    classes = {c for mod in (rex, rsen) for _, c in inspect.getmembers(mod, inspect.isclass)
               if issubclass(c, rex.RedisError)}
    covered = {type(t[1]) for t in TABLE} | {rex.BusyLoadingError}
    assert classes - covered == set()


def test_the_cause_is_kept() -> None:
    original = rsen.MasterNotFoundError("No master found")
    with pytest.raises(Definite) as ei, mapped_errors():
        raise original
    assert ei.value.__cause__ is original


# -- part 2: what redis-py's Sentinel really raises ---------------------------------------


def bulk(v: object) -> bytes:
    b = str(v).encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


def masters_reply(port: int) -> bytes:
    """SENTINEL MASTERS naming 127.0.0.1:`port` as the primary (a RESP3 map, as
    redis-py 8 negotiates)."""
    fields = {"name": "lockcheck", "ip": "127.0.0.1", "port": port, "flags": "master",
              "num-other-sentinels": 2, "config-epoch": 0}
    return (b"*1\r\n%%%d\r\n" % len(fields)
            + b"".join(bulk(k) + bulk(v) for k, v in fields.items()))


@contextlib.contextmanager
def fake_sentinel(primary_port: int, asked: list[int] | None = None) -> Iterator[int]:
    """A Sentinel that names 127.0.0.1:`primary_port`; counts the questions in `asked`."""
    asked = asked if asked is not None else []

    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        assert cmd[0].upper() == b"SENTINEL", cmd
        asked.append(1)
        c.sendall(masters_reply(primary_port))
        return True

    with fake_redis(answer) as port:
        yield port


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """Accepts connections (the kernel's backlog does) and never answers: a paused
    server, or one whose replies a partition drops."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    try:
        yield int(srv.getsockname()[1])
    finally:
        srv.close()


def client(sentinel_ports: list[int]) -> SentinelLockClient:
    return SentinelLockClient([("127.0.0.1", p) for p in sentinel_ports], "lockcheck",
                              ttl_ms=1000, op_timeout_s=OP_TIMEOUT_S)


def timed_acquire(c: SentinelLockClient) -> tuple[BaseException | Lease | None, float]:
    t0 = time.monotonic()
    try:
        out: BaseException | Lease | None = c.acquire("k0")
    except (Definite, Indefinite) as e:
        out = e
    return out, time.monotonic() - t0


def test_no_sentinel_answers_is_definite_and_prompt() -> None:
    c = client([free_port(), free_port(), free_port()])
    out, took = timed_acquire(c)
    assert isinstance(out, Definite) and not isinstance(out, NotOwner)
    assert str(out) == "no primary"
    assert took < did_not_hang(OP_TIMEOUT_S)


def test_silent_sentinels_are_definite_within_the_op_timeout() -> None:
    """Three Sentinels that never reply cost a quarter of the op timeout in all."""
    with silent_listener() as a, silent_listener() as b, silent_listener() as d:
        out, took = timed_acquire(client([a, b, d]))
    assert isinstance(out, Definite) and str(out) == "no primary"
    assert took < did_not_hang(OP_TIMEOUT_S)


def test_a_refused_primary_is_definite() -> None:
    with fake_sentinel(free_port()) as s:
        out, took = timed_acquire(client([s]))
    assert isinstance(out, Definite) and str(out) == "connection refused"
    assert took < did_not_hang(OP_TIMEOUT_S)


def test_a_primary_that_never_replies_is_indefinite_within_the_op_timeout() -> None:
    seen: list[list[bytes]] = []
    with fake_redis(lambda c, cmd: True, seen) as primary, fake_sentinel(primary) as s, \
            silent_listener() as dead:
        # the first Sentinel is silent too: its share of the budget is spent first
        out, took = timed_acquire(client([dead, s]))
    assert isinstance(out, Indefinite) and str(out) == "timeout"
    assert [c[0].upper() for c in seen] == [b"EVALSHA"], "the script reached the primary"
    assert took < did_not_hang(OP_TIMEOUT_S)


def test_a_grant_on_the_named_primary_carries_the_fence() -> None:
    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        c.sendall(b":42\r\n")
        return True

    with fake_redis(answer) as primary, fake_sentinel(primary) as s:
        got = client([s]).acquire("k0")
    assert got is not None and got.fence == 42 and got.key == "k0"


# -- a real read-only replica: the demoted primary ----------------------------------------


@pytest.fixture
def readonly_replica(tmp_path: Path) -> Iterator[int]:
    """A real redis-server on localhost, a replica of nothing (so read-only)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not installed (scripts/install installs it)")
    port = free_port()
    p = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                          "--appendonly", "no", "--dir", str(tmp_path),
                          "--replicaof", "127.0.0.1", str(free_port())],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        timeout=0.2):
                break
            assert time.monotonic() < deadline and p.poll() is None, "redis did not start"
            time.sleep(0.02)
        yield port
    finally:
        p.kill()
        p.wait(timeout=10)


def test_a_demoted_primary_refuses_definitely_and_the_client_asks_again(
        readonly_replica: int) -> None:
    asked: list[int] = []
    with fake_sentinel(readonly_replica, asked) as s:
        c = client([s])
        for _ in range(2):
            out, took = timed_acquire(c)
            assert isinstance(out, Definite) and str(out) == "readonly", out
            assert took < did_not_hang(OP_TIMEOUT_S)
    # the READONLY dropped the connection: the second acquire asked the Sentinels again
    assert len(asked) == 2


def test_no_client_side_retries_anywhere() -> None:
    """redis-py 8.1's master_for client does not retry by default, but the Sentinel's own
    clients retry ten times; either default may change with the version, so both are
    set, and checked here where no fake server can tell them apart."""
    c = client([free_port(), free_port()])
    retries = [c.redis.get_retry(), *(s.get_retry() for s in c.sentinel.sentinels)]
    assert all(r is not None and r.get_retries() == 0 for r in retries), retries


@pytest.mark.parametrize(("acked", "granted"), [(2, True), (1, False), (0, False)])
def test_with_wait_a_grant_counts_once_every_replica_has_it(acked: int, granted: bool) -> None:
    """`redis-sentinel-wait`: a grant the replicas did not all acknowledge may be lost
    in a failover, so it is info (the primary did apply it), never ok or fail."""
    seen: list[list[bytes]] = []

    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        c.sendall(b":%d\r\n" % (acked if cmd[0].upper() == b"WAIT" else 7))
        return True

    with fake_redis(answer, seen) as primary, fake_sentinel(primary) as s:
        c = SentinelLockClient([("127.0.0.1", s)], "lockcheck", ttl_ms=1000,
                               op_timeout_s=OP_TIMEOUT_S, wait_replicas=2)
        out, took = timed_acquire(c)
        if granted:
            assert isinstance(out, Lease) and out.fence == 7
            c.renew(out)
        else:
            assert isinstance(out, Indefinite) and str(out) == f"replicated to {acked} of 2"
            assert c._locks == {}
    assert [x[0].upper() for x in seen][:2] == [b"EVALSHA", b"WAIT"]
    assert seen[1][1:] == [b"2", str(c.wait_ms).encode()]
    if granted:  # the renewal waited too
        assert [x[0].upper() for x in seen][2:] == [b"EVALSHA", b"WAIT"]
    assert took < did_not_hang(OP_TIMEOUT_S)
