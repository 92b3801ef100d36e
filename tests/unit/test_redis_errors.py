"""The one place redis-py's exceptions become Definite / Indefinite / NotOwner.

`Definite` -> the op is recorded `fail` (certainly not applied); `Indefinite` -> `info`
(may have been applied, the process id retires); `NotOwner` (a Definite) -> `fail` with
error "not-owner". Recording `fail` for something that may have happened would let a
checker miss a violation, so the table below is the contract of
`lockcheck.locks.redis.mapped_errors`.

Part 1 raises every redis-py exception class inside `mapped_errors`. Part 2 drives the
real `RedisLockClient` against tiny fake servers on localhost, so the exceptions are
the ones redis-py really raises (refused, timeout, reset, closed, error replies).
"""

from __future__ import annotations

import contextlib
import inspect
import socket
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

import pytest
import redis.exceptions as rex

from lockcheck.locks.api import Definite, Indefinite, Lease, NotOwner
from lockcheck.locks.redis import RedisLockClient, _short, mapped_errors
from tests.unit.error_kinds import error_kind

from .fake_tcp import tcp_server

# RedisLockClient passes retry_on_timeout=False, which redis-py >= 6 calls deprecated
pytestmark = pytest.mark.filterwarnings("ignore:Call to '__init__' function with deprecated")


def kind_of(exc: BaseException,
            mapper: Callable[[], contextlib.AbstractContextManager[None]] = mapped_errors,
            ) -> tuple[str, str]:
    """What `mapper()` (redis-py's mapping by default) turns `exc` into."""
    return error_kind(mapper, exc)


# -- part 1: every exception class ------------------------------------------------------

# (exception instance, expected kind, expected short message or None to skip).
# Messages are the ones redis-py 5..8 produces (see redis/connection.py).
TABLE: list[tuple[str, BaseException, str, str | None]] = [
    # lock ownership: the token-checked Lua script said no
    ("LockNotOwnedError", rex.LockNotOwnedError("Cannot release a lock that's no longer owned"),
     "NotOwner", "not-owner"),
    # connect failures: nothing was sent
    ("ConnectionError refused", rex.ConnectionError(
        "Error 111 connecting to 10.77.0.11:6379. Connection refused."),
     "Definite", "connection refused"),
    ("ConnectionError unreachable", rex.ConnectionError(
        "Error 113 connecting to 10.77.0.11:6379. No route to host."),
     "Definite", "Error 113 connecting to 10.77.0.11:6379. No route to host."),
    # the server refused a connection past maxclients as it accepted it: its own class
    # from redis-py 8.2, a ConnectionError before
    ("MaxClientsReachedError", getattr(rex, "MaxClientsReachedError", rex.ConnectionError)(
        "max number of clients reached"), "Definite", "max clients"),
    ("ConnectionError no args", rex.ConnectionError("Error connecting to 10.77.0.11:6379."),
     "Definite", None),
    ("TimeoutError connect", rex.TimeoutError("Timeout connecting to server"),
     "Definite", "timeout"),
    # after the command may have reached the server
    ("TimeoutError read", rex.TimeoutError("Timeout reading from 10.77.0.11:6379"),
     "Indefinite", "timeout"),
    ("TimeoutError write", rex.TimeoutError("Timeout writing to socket"),
     "Indefinite", "timeout"),
    ("ConnectionError closed", rex.ConnectionError("Connection closed by server."),
     "Indefinite", "connection lost"),
    ("ConnectionError reset", rex.ConnectionError(
        "Error while reading from 10.77.0.11:6379 : (104, 'Connection reset by peer')"),
     "Indefinite", "connection lost"),
    ("ConnectionError write", rex.ConnectionError(
        "Error 32 while writing to socket. Broken pipe."), "Indefinite", None),
    ("OSError", OSError(104, "Connection reset by peer"), "Indefinite", "connection lost"),
    ("socket.timeout", TimeoutError("timed out"), "Indefinite", "timeout"),
    # the server answered with an error: it did not run the command
    ("ResponseError", rex.ResponseError("ERR unknown command"), "Definite", None),
    ("NoScriptError", rex.NoScriptError("No matching script."), "Definite", None),
    ("ReadOnlyError", rex.ReadOnlyError("You can't write against a read only replica."),
     "Definite", None),
    ("OutOfMemoryError", rex.OutOfMemoryError("command not allowed when used memory > "
                                              "'maxmemory'."), "Definite", None),
    ("ExecAbortError", rex.ExecAbortError("Transaction discarded"), "Definite", None),
    ("NoPermissionError", rex.NoPermissionError("no permission"), "Definite", None),
    ("TryAgainError", rex.TryAgainError("try again"), "Definite", None),
    ("MovedError", rex.MovedError("3999 127.0.0.1:6381"), "Definite", None),
    ("AskError", rex.AskError("3999 127.0.0.1:6381"), "Definite", None),
    ("ClusterDownError", rex.ClusterDownError("CLUSTERDOWN"), "Definite", None),
    ("MasterDownError", rex.MasterDownError("MASTERDOWN"), "Definite", None),
    ("ClusterCrossSlotError", rex.ClusterCrossSlotError("CROSSSLOT"), "Definite", None),
    ("ModuleError", rex.ModuleError("module"), "Definite", None),
    ("AuthenticationWrongNumberOfArgsError", rex.AuthenticationWrongNumberOfArgsError("x"),
     "Definite", None),
    ("NoSuchFieldsetError", rex.NoSuchFieldsetError("x"), "Definite", None),
    # other RedisError: may have been applied (conservative)
    ("RedisError", rex.RedisError("something"), "Indefinite", None),
    ("InvalidResponse", rex.InvalidResponse("Protocol Error: b'?'"), "Indefinite", None),
    ("DataError", rex.DataError("Invalid input of type"), "Indefinite", None),
    ("PubSubError", rex.PubSubError("x"), "Indefinite", None),
    ("WatchError", rex.WatchError("x"), "Indefinite", None),
    ("ClusterError", rex.ClusterError("x"), "Indefinite", None),
    ("LockError", rex.LockError("Cannot reacquire an unlocked lock"), "Indefinite", None),
    # ConnectionError subclasses raised on a reply: they land in the connection branch
    ("AuthenticationError", rex.AuthenticationError("invalid password"), "Indefinite", None),
    ("AuthorizationError", rex.AuthorizationError("x"), "Indefinite", None),
    ("MaxConnectionsError", rex.MaxConnectionsError("Too many connections"),
     "Indefinite", None),
    ("ExternalAuthProviderError", rex.ExternalAuthProviderError("x"), "Indefinite", None),
]


@pytest.mark.parametrize(("exc", "kind", "message"), [t[1:] for t in TABLE],
                         ids=[t[0] for t in TABLE])
def test_mapping_table(exc: BaseException, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(exc)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


def test_loading_is_definite() -> None:
    assert kind_of(rex.BusyLoadingError("Redis is loading the dataset in memory"))[0] == \
        "Definite"


def test_every_redis_py_exception_class_is_in_the_table() -> None:
    """A new redis-py exception class must be looked at, not silently mapped."""
    classes = {n for n, c in inspect.getmembers(rex, inspect.isclass)
               if issubclass(c, rex.RedisError)}
    covered = {t[1].__class__.__name__ for t in TABLE} | {"BusyLoadingError"}
    assert classes - covered == set()


def test_not_a_redis_error_passes_through() -> None:
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")


def test_no_exception_means_nothing_raised() -> None:
    with mapped_errors():
        pass


def test_the_cause_is_kept() -> None:
    original = rex.ConnectionError("Connection closed by server.")
    with pytest.raises(Indefinite) as ei, mapped_errors():
        raise original
    assert ei.value.__cause__ is original


@pytest.mark.parametrize(("msg", "short"), [
    ("Error 111 connecting to x. Connection refused.", "connection refused"),
    ("Timeout reading from x", "timeout"), ("timed out", "timeout"),
    ("Connection closed by server.", "connection lost"),
    ("Connection reset by peer", "connection lost"),
    ("x" * 200, "x" * 80),
])
def test_short(msg: str, short: str) -> None:
    assert _short(msg) == short


# -- part 2: what redis-py really raises -------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_command(f: BinaryIO) -> list[bytes] | None:
    """One RESP array of bulk strings, from the socket's reader."""
    head = f.readline()
    if not head:
        return None
    assert head[:1] == b"*", head
    out = []
    for _ in range(int(head[1:])):
        n = int(f.readline()[1:])
        out.append(f.read(n + 2)[:-2])
    return out


Behaviour = Callable[[socket.socket, list[bytes]], bool]  # False: stop serving this client


@contextlib.contextmanager
def fake_redis(behaviour: Behaviour, seen: list[list[bytes]] | None = None) -> Iterator[int]:
    """Answers the handshake (HELLO, CLIENT, SCRIPT) itself, every other command with
    `behaviour`; the other commands are appended to `seen`."""
    seen = seen if seen is not None else []
    stop = threading.Event()

    def serve_one(c: socket.socket) -> None:
        f = c.makefile("rb")
        try:
            while not stop.is_set():
                cmd = read_command(f)
                if cmd is None:
                    return
                name = cmd[0].upper()
                if name == b"HELLO":  # redis-py >= 8 speaks RESP3 by default
                    proto = cmd[1] if len(cmd) > 1 else b"2"
                    c.sendall(b"%1\r\n$5\r\nproto\r\n:" + proto + b"\r\n")
                elif name == b"CLIENT":
                    c.sendall(b"+OK\r\n")
                elif name == b"SCRIPT":
                    c.sendall(b"$40\r\n" + b"0" * 40 + b"\r\n")
                else:
                    seen.append(cmd)
                    if not behaviour(c, cmd):
                        return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.close()

    with tcp_server(serve_one, stop) as port:
        yield port


def client(port: int) -> RedisLockClient:
    return RedisLockClient("127.0.0.1", port, ttl_ms=1000, op_timeout_s=0.3)


def lease() -> Lease:
    return Lease(key="k0", token="t" * 32, fence=1, ttl_ms=1000, valid_until_ns=0)


def test_refused_connection_is_definite() -> None:
    c = client(free_port())
    with pytest.raises(Definite) as ei:
        c.acquire("k0")
    assert not isinstance(ei.value, NotOwner)
    assert str(ei.value) == "connection refused"


def lock_commands(seen: list[list[bytes]]) -> list[bytes]:
    return [c[0].upper() for c in seen if c[0].upper() in (b"EVALSHA", b"EVAL")]


def test_a_server_at_maxclients_is_definite() -> None:
    """What a real Redis does past `maxclients`: the error at accept, then it hangs up."""

    def serve_one(c: socket.socket) -> None:
        with contextlib.suppress(OSError):
            c.sendall(b"-ERR max number of clients reached\r\n")
            c.shutdown(socket.SHUT_RDWR)
        c.close()

    stop = threading.Event()
    with tcp_server(serve_one, stop) as port, pytest.raises(Definite) as ei:
        client(port).acquire("k0")
    assert str(ei.value) == "max clients"
    assert not isinstance(ei.value, NotOwner)


def test_no_reply_is_indefinite_timeout() -> None:
    seen: list[list[bytes]] = []
    # reads the command, never answers
    with fake_redis(lambda c, cmd: True, seen) as port, pytest.raises(Indefinite) as ei:
        client(port).acquire("k0")
    assert str(ei.value) == "timeout"
    assert lock_commands(seen), "the script never reached the server"


def test_connection_closed_after_the_command_is_indefinite() -> None:
    seen: list[list[bytes]] = []
    # reads it, then hangs up
    with fake_redis(lambda c, cmd: False, seen) as port, pytest.raises(Indefinite) as ei:
        client(port).acquire("k0")
    assert str(ei.value) == "connection lost"
    assert lock_commands(seen)


def test_connection_reset_after_the_command_is_indefinite() -> None:
    def reset(c: socket.socket, cmd: list[bytes]) -> bool:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()
        return False

    seen: list[list[bytes]] = []
    with fake_redis(reset, seen) as port, pytest.raises(Indefinite):
        client(port).acquire("k0")
    assert lock_commands(seen)


@pytest.mark.parametrize(("reply", "kind"), [
    (b"-ERR something went wrong\r\n", Definite),
    (b"-READONLY You can't write against a read only replica.\r\n", Definite),
    (b"-OOM command not allowed\r\n", Definite),
    (b"-LOADING Redis is loading the dataset in memory\r\n", Definite),
])
def test_error_replies(reply: bytes, kind: type[Exception]) -> None:
    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        c.sendall(reply)
        return True

    seen: list[list[bytes]] = []
    with fake_redis(answer, seen) as port, pytest.raises(kind) as ei:
        client(port).acquire("k0")
    assert not isinstance(ei.value, NotOwner)
    assert lock_commands(seen)


def test_busy_lock_is_none_and_a_grant_carries_the_fence() -> None:
    replies = iter([b"_\r\n", b":7\r\n"])  # RESP3 null (SET NX failed), then the fence

    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        assert cmd[0].upper() in (b"EVALSHA", b"EVAL")
        c.sendall(next(replies))
        return True

    with fake_redis(answer) as port:
        c = client(port)
        assert c.acquire("k0") is None
        got = c.acquire("k0")
    assert got is not None and got.fence == 7 and got.key == "k0"


def test_release_and_renew_of_a_lost_lock_are_not_owner() -> None:
    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        # the fenced acquire script has 2 keys; redis-py's release and extend scripts
        # have 1 and return 0 when the token does not own the lock
        if cmd[0].upper() in (b"EVALSHA", b"EVAL") and cmd[2] == b"1":
            c.sendall(b":0\r\n")
        else:
            c.sendall(b":1\r\n")
        return True

    with fake_redis(answer) as port:
        c = client(port)
        held = c.acquire("k0")
        assert held is not None and held.fence == 1
        with pytest.raises(NotOwner):
            c.renew(held)
        with pytest.raises(NotOwner):
            c.release(held)
