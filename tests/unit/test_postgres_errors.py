"""The one place psycopg's exceptions become Definite / Indefinite / NotOwner.

`Definite` -> `fail` (certainly not applied), `Indefinite` -> `info` (may have been
applied; the process retires). Part 1 raises every psycopg exception class inside
`lockcheck.locks.postgres.mapped_errors`, against a table written from the PostgreSQL
error-code appendix (what each SQLSTATE class means for an autocommit statement).
Part 2 drives the real `Session` and lock clients against tiny fake PostgreSQL servers
on localhost (the wire protocol's handshake, then a chosen behaviour), so the
exceptions are the ones psycopg really raises: refused, a connection that never
completes, no reply (the op timeout), a hang-up, error replies, rows.
"""

from __future__ import annotations

import contextlib
import inspect
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import psycopg.errors as pe
import pytest

from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, NotOwner
from lockcheck.locks.postgres import (
    AdvisoryClient,
    LeaseTableClient,
    Session,
    _short,
    mapped_errors,
    session_params,
    stable_key,
)
from tests.unit.error_kinds import error_kind

from .fake_tcp import tcp_server


def kind_of(exc: BaseException, *, sent: bool = True) -> tuple[str, str]:
    """("NotOwner"|"Definite"|"Indefinite"|"passes", message) for an exception raised inside."""
    return error_kind(lambda: mapped_errors(sent=sent), exc)


# -- part 1: every exception class ------------------------------------------------------

# SQLSTATE classes (PostgreSQL docs, appendix A): the server answered that an autocommit
# statement failed, so its transaction rolled back -> Definite ...
SERVER_SAID_NO = {
    "02": "no data", "03": "SQL statement not yet complete",
    "09": "triggered action exception", "0A": "feature not supported",
    "0B": "invalid transaction initiation", "0F": "locator exception",
    "0L": "invalid grantor", "0P": "invalid role specification",
    "0Z": "diagnostics exception", "10": "XQuery error", "20": "case not found",
    "21": "cardinality violation", "22": "data exception",
    "23": "integrity constraint violation", "24": "invalid cursor state",
    "25": "invalid transaction state", "26": "invalid SQL statement name",
    "27": "triggered data change violation", "28": "invalid authorization specification",
    "2B": "dependent privilege descriptors still exist",
    "2D": "invalid transaction termination", "2F": "SQL routine exception",
    "34": "invalid cursor name", "38": "external routine exception",
    "39": "external routine invocation exception", "3B": "savepoint exception",
    "3D": "invalid catalog name", "3F": "invalid schema name",
    "40": "transaction rollback (serialization failure, deadlock)",
    "42": "syntax error or access rule violation", "44": "WITH CHECK OPTION violation",
    "53": "insufficient resources", "54": "program limit exceeded",
    "55": "object not in prerequisite state (lock not available)", "72": "snapshot failure",
    "F0": "configuration file error", "HV": "foreign data wrapper error",
    "P0": "PL/pgSQL error",
}
# ... except where the outcome is unknown or the session is gone mid-statement
UNSURE = {
    "08": "connection exception", "57": "operator intervention: canceled, terminated",
    "58": "system error (I/O)", "XX": "internal error",
}
UNSURE_CODES = {"40003": "statement completion unknown",
                "25P03": "idle-in-transaction session timeout",
                "25P04": "transaction timeout"}
# raised by psycopg/libpq itself, without a SQLSTATE: after the request may have left
NO_SQLSTATE = {"Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
               "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
               "ConnectionTimeout", "CancellationTimeout", "_WaitTimeout", "PipelineAborted"}


def psycopg_error_classes() -> list[type[psycopg.Error]]:
    return [c for _, c in inspect.getmembers(pe, inspect.isclass)
            if issubclass(c, psycopg.Error)]


def expected_kind(cls: type[psycopg.Error]) -> str:
    state = cls.sqlstate
    if state is None:
        assert cls.__name__ in NO_SQLSTATE, cls
        return "Indefinite"
    if state in UNSURE_CODES or state[:2] in UNSURE:
        return "Indefinite"
    assert state[:2] in SERVER_SAID_NO, (cls, state)
    return "Definite"


def test_every_psycopg_exception_class_is_looked_at() -> None:
    """A new SQLSTATE class, or a new client-side exception, must be looked at."""
    classes = psycopg_error_classes()
    assert len(classes) > 200
    prefixes = {c.sqlstate[:2] for c in classes if c.sqlstate}
    assert prefixes - set(SERVER_SAID_NO) - set(UNSURE) == set()
    assert {c.__name__ for c in classes if c.sqlstate is None} == NO_SQLSTATE


@pytest.mark.parametrize("cls", psycopg_error_classes(), ids=lambda c: c.__name__)
def test_every_class_after_sending(cls: type[psycopg.Error]) -> None:
    assert kind_of(cls("boom"))[0] == expected_kind(cls)


@pytest.mark.parametrize("cls", psycopg_error_classes(), ids=lambda c: c.__name__)
def test_every_class_while_connecting_is_definite(cls: type[psycopg.Error]) -> None:
    # nothing of the operation had left the client: even a timeout is a certain no
    assert kind_of(cls("boom"), sent=False)[0] == "Definite"


@pytest.mark.parametrize(("exc", "kind", "message"), [
    (pe.QueryCanceled("canceling statement due to statement timeout"), "Indefinite", "timeout"),
    (pe.AdminShutdown("terminating connection due to administrator command"),
     "Indefinite", "terminated"),
    (pe.CrashShutdown("terminating connection because of crash of another server process"),
     "Indefinite", "terminated"),
    (pe.SerializationFailure("could not serialize access"), "Definite", None),
    (pe.StatementCompletionUnknown("x"), "Indefinite", None),
    (pe.UniqueViolation("duplicate key value"), "Definite", None),
    (pe.UndefinedTable('relation "lockcheck_locks" does not exist'), "Definite", None),
    (psycopg.OperationalError("consuming input failed: server closed the connection "
                              "unexpectedly\n\tThis probably means the server terminated "
                              "abnormally"), "Indefinite", "connection lost"),
    (TimeoutError("timeout: no reply within 0.25 s"), "Indefinite", "timeout"),
    (ConnectionResetError(104, "Connection reset by peer"), "Indefinite", "connection lost"),
])
def test_the_cases_that_matter(exc: BaseException, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(exc)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


@pytest.mark.parametrize(("exc", "message"), [
    (psycopg.OperationalError('connection failed: connection to server at "10.77.0.11", '
                              'port 5432 failed: Connection refused\n\tIs the server '
                              'running on that host?'), "connection refused"),
    (psycopg.OperationalError('connection failed: connection to server at "10.77.0.11", '
                              'port 5432 failed: FATAL:  the database system is starting up'),
     "server not ready"),
    (pe.ConnectionTimeout("connection timeout expired"), "timeout"),
    (TimeoutError("connect timeout (0.25 s)"), "timeout"),
    (pe.TooManyConnections("sorry, too many clients already"),
     "sorry, too many clients already"),
])
def test_connect_failures_are_definite_with_a_short_reason(exc: BaseException,
                                                           message: str) -> None:
    assert kind_of(exc, sent=False) == ("Definite", message)


def test_warnings_and_other_exceptions_pass_through() -> None:
    assert kind_of(psycopg.Warning("x")) == ("passes", "Warning")
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")


def test_the_cause_is_kept() -> None:
    original = pe.AdminShutdown("terminating connection due to administrator command")
    with pytest.raises(Indefinite) as ei, mapped_errors():
        raise original
    assert ei.value.__cause__ is original


def test_short_keeps_long_messages_short() -> None:
    assert _short(RuntimeError("x" * 200)) == "x" * 80
    assert _short(RuntimeError("two\n  lines")) == "two lines"


# -- part 2: what psycopg really raises ---------------------------------------------------

OP_TIMEOUT = 0.3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def msg(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(payload) + 4) + payload


def error_response(sqlstate: str, text: str, severity: str = "ERROR") -> bytes:
    fields = b"".join(code + value.encode() + b"\0" for code, value in
                      ((b"S", severity), (b"V", severity), (b"C", sqlstate), (b"M", text)))
    return msg(b"E", fields + b"\0")


READY = msg(b"Z", b"I")


INT8, BOOL = 20, 16  # type oids


def rows(*values: str | None, tag: str = "SELECT 1", oid: int = INT8) -> bytes:
    """The extended protocol's answer: parse/bind complete, one column (text format)."""
    desc = msg(b"T", struct.pack("!h", 1) + b"x\0" + struct.pack("!ihihih", 0, 0, oid, -1, -1, 0))
    data = b"".join(msg(b"D", struct.pack("!h", 1) + (struct.pack("!i", -1) if v is None else
                                                      struct.pack("!i", len(v)) + v.encode()))
                    for v in values)
    return msg(b"1") + msg(b"2") + desc + data + msg(b"C", tag.encode() + b"\0") + READY


def handshake() -> bytes:
    params = b"".join(msg(b"S", k.encode() + b"\0" + v.encode() + b"\0") for k, v in (
        ("server_version", "15.18"), ("client_encoding", "UTF8"),
        ("standard_conforming_strings", "on"), ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"), ("TimeZone", "UTC")))
    return (msg(b"R", struct.pack("!i", 0)) + params +
            msg(b"K", struct.pack("!ii", 4242, 1)) + READY)


def recv_exact(c: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = c.recv(n - len(out))
        if not chunk:
            raise ConnectionError("client went away")
        out += chunk
    return out


# (socket, the request's message types) -> False to hang up
Behaviour = Callable[[socket.socket, list[bytes]], bool]


@contextlib.contextmanager
def fake_postgres(behaviour: Behaviour, *, answer_startup: bool = True,
                  seen: list[list[bytes]] | None = None) -> Iterator[int]:
    """Speaks the startup handshake (or, `answer_startup=False`, never answers it);
    each request (messages up to Sync) goes to `behaviour` and into `seen`."""
    seen = seen if seen is not None else []
    stop = threading.Event()

    def serve(c: socket.socket) -> None:
        try:
            while True:  # SSL/GSS requests are refused with "N", then the startup
                n, code = struct.unpack("!ii", recv_exact(c, 8))
                recv_exact(c, n - 8)
                if code not in (80877103, 80877104):
                    break
                c.sendall(b"N")
            if not answer_startup:
                stop.wait()
                return
            c.sendall(handshake())
            request: list[bytes] = []
            while not stop.is_set():
                kind = recv_exact(c, 1)
                (n,) = struct.unpack("!i", recv_exact(c, 4))
                recv_exact(c, n - 4)
                if kind == b"X":
                    return
                request.append(kind)
                if kind in (b"S", b"Q"):
                    seen.append(request)
                    if not behaviour(c, request):
                        return
                    request = []
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                c.close()

    with tcp_server(serve, stop) as port:
        yield port


def session(port: int) -> Session:
    opts = ClientOptions(ttl_ms=1000, op_timeout_s=OP_TIMEOUT, worker=3)
    return Session(session_params({"host": "127.0.0.1", "port": port}, opts), OP_TIMEOUT)


def lease_table(port: int) -> LeaseTableClient:
    return LeaseTableClient(session(port), ttl_ms=1000, drift=0.01)


def lease(fence: int | None = 1) -> Lease:
    return Lease(key="k0", token="t" * 32, fence=fence, ttl_ms=1000, valid_until_ns=0)


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """The block must return within `seconds` (the op timeout, plus scheduling slack)."""
    t0 = time.monotonic()
    yield
    assert time.monotonic() - t0 < seconds, "the operation outlived its op timeout"


def test_refused_connection_is_definite() -> None:
    with within(OP_TIMEOUT + 1.0), pytest.raises(Definite) as ei:
        lease_table(free_port()).acquire("k0")
    assert not isinstance(ei.value, NotOwner)
    assert str(ei.value) == "connection refused"


def test_a_connection_that_never_completes_is_definite_within_the_op_timeout() -> None:
    # libpq would wait 2 s (its minimum connect_timeout): we give up at the op timeout
    with fake_postgres(lambda c, r: True, answer_startup=False) as port, \
            within(OP_TIMEOUT + 1.0), pytest.raises(Definite) as ei:
        lease_table(port).acquire("k0")
    assert str(ei.value) == "timeout"


def test_no_reply_is_indefinite_within_the_op_timeout() -> None:
    seen: list[list[bytes]] = []
    with fake_postgres(lambda c, r: True, seen=seen) as port, \
            within(OP_TIMEOUT + 1.0), pytest.raises(Indefinite) as ei:
        lease_table(port).acquire("k0")  # psycopg alone would wait for ever
    assert str(ei.value) == "timeout"
    assert seen and seen[0][-1] == b"S", "the statement never reached the server"


def test_a_hang_up_after_the_statement_is_indefinite() -> None:
    seen: list[list[bytes]] = []
    with fake_postgres(lambda c, r: False, seen=seen) as port, pytest.raises(Indefinite) as ei:
        lease_table(port).renew(lease())
    assert str(ei.value) == "connection lost"
    assert seen


@pytest.mark.parametrize(("reply", "kind", "message"), [
    (error_response("40001", "could not serialize access") + READY, Definite, None),
    (error_response("42P01", 'relation "lockcheck_locks" does not exist') + READY,
     Definite, None),
    (error_response("57014", "canceling statement due to statement timeout") + READY,
     Indefinite, "timeout"),
    (error_response("57P01", "terminating connection due to administrator command",
                    "FATAL"), Indefinite, "terminated"),
    (error_response("40003", "statement completion unknown") + READY, Indefinite, None),
], ids=["serialization-failure", "undefined-table", "statement-timeout", "terminated",
        "completion-unknown"])
def test_error_replies(reply: bytes, kind: type[Exception], message: str | None) -> None:
    def answer(c: socket.socket, request: list[bytes]) -> bool:
        c.sendall(reply)
        return b"SFATAL" not in reply  # after a FATAL error the server hangs up

    with fake_postgres(answer) as port, pytest.raises(kind) as ei:
        lease_table(port).release(lease())
    assert not isinstance(ei.value, NotOwner)
    if message is not None:
        assert str(ei.value) == message


def test_after_an_unknown_outcome_the_next_operation_uses_a_new_session() -> None:
    replies = iter([b"", rows("7", tag="INSERT 0 1")])

    def answer(c: socket.socket, request: list[bytes]) -> bool:
        r = next(replies)
        c.sendall(r)
        return bool(r)  # the first request: hang up

    seen: list[list[bytes]] = []
    with fake_postgres(answer, seen=seen) as port:
        client = lease_table(port)
        first = client.session
        with pytest.raises(Indefinite):
            client.acquire("k0")
        assert first.conn is None  # dropped: its state is unknown
        got = client.acquire("k0")
    assert got is not None and got.fence == 7 and got.key == "k0"
    assert len(seen) == 2


def test_lease_table_busy_grant_and_not_owner() -> None:
    replies = iter([rows(tag="INSERT 0 0"), rows("12", tag="INSERT 0 1"),
                    rows(tag="UPDATE 0"), rows(tag="UPDATE 0"), rows("12", tag="UPDATE 1")])

    def answer(c: socket.socket, request: list[bytes]) -> bool:
        c.sendall(next(replies))
        return True

    with fake_postgres(answer) as port:
        client = lease_table(port)
        assert client.acquire("k0") is None  # the row is held and not expired
        got = client.acquire("k0")
        assert got is not None and got.fence == 12 and len(got.token) == 32
        with pytest.raises(NotOwner):
            client.renew(got)  # expired, or taken by another owner
        with pytest.raises(NotOwner):
            client.release(got)
        client.release(got)  # UPDATE 1: ours, marked free


def test_advisory_busy_grant_and_not_owner() -> None:
    replies = iter([rows(v, oid=BOOL) for v in "fttff"])

    def answer(c: socket.socket, request: list[bytes]) -> bool:
        c.sendall(next(replies))
        return True

    with fake_postgres(answer) as port:
        client = AdvisoryClient(session(port), ttl_ms=1000, drift=0.01, key_of=stable_key)
        assert client.acquire("k0") is None
        got = client.acquire("k0")
        assert got is not None and got.fence is None
        client.renew(got)  # pg_locks says this session holds it
        with pytest.raises(NotOwner):
            client.renew(got)  # a new session, or the lock is gone
        with pytest.raises(NotOwner):
            client.release(got)  # pg_advisory_unlock: not held by this session


def test_stable_keys_are_stable_and_distinct() -> None:
    keys = [stable_key(f"k{i}") for i in range(1000)]
    assert len(set(keys)) == 1000
    assert stable_key("k0") == stable_key("k0")
    assert all(-(2 ** 63) <= k < 2 ** 63 for k in keys)
