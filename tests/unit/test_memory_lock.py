"""lockcheck's own lock server (`db/memory_server.py`) and its client (`locks/memory.py`).

The lock table alone, on a clock the test moves; then the real server process with
the real client: grants, fences, a refused owner, a kill (restarted empty, fences
back to 1), a pause (the client gives up on a grant the server makes later), and the
one place the client's failures become Definite / Indefinite / NotOwner.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockcheck.db.memory_server import LockTable, answer
from lockcheck.locks.api import Definite, Indefinite, NotOwner
from lockcheck.locks.memory import (
    MemoryLockClient,
    NotConnected,
    NotOwnerReply,
    Refused,
    mapped_errors,
)
from tests.unit.error_kinds import error_kind

# -- the lock table -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_held_lock_is_refused_until_it_expires_or_is_released() -> None:
    clock = Clock()
    t = LockTable(clock=clock)
    assert t.acquire("k", "a", 1000) == 1
    assert t.acquire("k", "b", 1000) is None
    assert t.acquire("other", "b", 1000) == 2  # one counter for every name
    clock.t += 0.999
    assert t.acquire("k", "b", 1000) is None
    assert t.renew("k", "a", 1000)  # a whole TTL from now
    clock.t += 0.999
    assert t.acquire("k", "b", 1000) is None
    clock.t += 0.001
    assert t.acquire("k", "b", 1000) == 3  # expired by the server's own clock
    assert not t.renew("k", "a", 1000) and not t.release("k", "a")  # a's grant is gone
    assert t.release("k", "b") and not t.release("k", "b")
    assert t.acquire("k", "a", 1000) == 4


def test_without_ttl_a_lock_is_held_until_released() -> None:
    clock = Clock()
    t = LockTable(ttl=False, clock=clock)
    assert t.acquire("k", "a", 1) == 1
    clock.t += 3600
    assert t.acquire("k", "b", 1) is None
    assert t.release("k", "a") and t.acquire("k", "b", 1) == 2


def test_without_exclusion_every_request_is_granted() -> None:
    t = LockTable(exclusion=False, clock=Clock())
    assert t.acquire("k", "a", 1000) == 1 and t.acquire("k", "b", 1000) == 2
    assert t.renew("k", "a", 1000) and t.release("k", "a") and t.release("k", "a")
    assert t.acquire("k", "c", 1000) == 3


def test_one_line_in_one_line_out() -> None:
    table = LockTable()
    for line, reply in [
        ("PING", "PONG"), ("ACQUIRE k a 100", "OK 1"), ("acquire k b 100", "BUSY"),
        ("RENEW k b 100", "NOTOWNER"), ("RENEW k a 100", "OK"), ("RELEASE k b", "NOTOWNER"),
        ("RELEASE k a", "OK"), ("", "ERR empty request"),
        ("ACQUIRE k a soon", "ERR invalid literal for int() with base 10: 'soon'"),
        ("ACQUIRE k a 0", "ERR ttl_ms must be positive, got 0"),
        ("DELETE k", "ERR unknown request delete with 1 argument(s)"),
        ("PING extra", "ERR unknown request ping with 1 argument(s)"),
    ]:
        assert answer(table, line) == reply, line

# -- the client's errors --------------------------------------------------------------------


@pytest.mark.parametrize(("exc", "kind"), [
    (NotOwnerReply(), ("NotOwner", "not-owner")),
    (Refused("unknown request"), ("Definite", "unknown request")),
    (NotConnected("x"), ("Definite", "x")),
    (ConnectionResetError("reset"), ("Indefinite", "connection lost")),
    (BrokenPipeError("pipe"), ("Indefinite", "connection lost")),
    (TimeoutError("timed out"), ("Indefinite", "timeout")),
    (OSError("no route"), ("Indefinite", "no route")),
    (ValueError("a bug"), ("passes", "ValueError")),
])
def test_every_failure_of_the_client_has_one_kind(exc: BaseException,
                                                  kind: tuple[str, str]) -> None:
    assert error_kind(mapped_errors, exc) == kind


def test_a_refused_connection_says_so() -> None:
    try:
        raise NotConnected("x") from ConnectionRefusedError(111, "refused")
    except NotConnected as e:
        assert error_kind(mapped_errors, e) == ("Definite", "connection refused")


# -- the real server and client -------------------------------------------------------------


class Server:
    def __init__(self, tmp: Path, *extra: str, port: int = 0) -> None:
        self.tmp, self.extra = tmp, extra
        self.port = port
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lockcheck.db.memory_server", "--port", str(self.port),
             "--data-dir", str(self.tmp), *self.extra],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        m = re.search(r":(\d+) ", self.proc.stdout.readline())
        assert m, "the server did not say where it listens"
        self.port = int(m.group(1))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(5)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.kill()


def client(s: Server, timeout: float = 1.0, **kw: bool) -> MemoryLockClient:
    return MemoryLockClient("127.0.0.1", s.port, ttl_ms=500, op_timeout_s=timeout, **kw)


def test_grant_renew_release_and_a_restart_that_forgets(server: Server) -> None:
    a, b = client(server), client(server)
    lease = a.acquire("k")
    assert lease is not None and lease.fence == 1 and lease.still_holds()
    assert b.acquire("k") is None
    a.renew(lease)
    a.release(lease)
    with pytest.raises(NotOwner):
        a.release(lease)
    lease = b.acquire("k")
    assert lease is not None and lease.fence == 2
    server.kill()
    with pytest.raises(Indefinite):  # the connection it had went down with the server
        b.renew(lease)
    with pytest.raises(Indefinite):  # so did a's: its request may have been read
        a.acquire("k")
    with pytest.raises(Definite, match="refused"):  # a new connection: nothing listens
        a.acquire("k")
    server.start()  # same port, empty
    again = a.acquire("k")
    assert again is not None and again.fence == 1  # the fence went back
    with pytest.raises(NotOwner):
        b.renew(lease)
    a.close()
    b.close()


def test_a_paused_server_grants_after_the_client_gave_up(tmp_path: Path) -> None:
    for extra, still_held in (((), False), (("--no-ttl",), True)):
        s = Server(tmp_path, *extra)
        try:
            a, b = client(s, timeout=0.3, ttl=not extra), client(s)
            s.proc.send_signal(signal.SIGSTOP)
            with pytest.raises(Indefinite, match="timeout"):
                a.acquire("k")
            s.proc.send_signal(signal.SIGCONT)
            time.sleep(0.7)  # past the 500 ms TTL of the grant nobody saw
            assert (b.acquire("k") is None) is still_held
        finally:
            s.kill()


def test_an_error_reply_is_definite(server: Server) -> None:
    c = client(server)
    with pytest.raises(Definite, match="ttl_ms must be positive"):
        MemoryLockClient("127.0.0.1", server.port, ttl_ms=0, op_timeout_s=1.0).acquire("k")
    assert c.acquire("k") is not None
