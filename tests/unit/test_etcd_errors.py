"""The one place where `requests` and etcd errors become Definite / Indefinite / NotOwner.

`Definite` -> `fail` (certainly not applied); `Indefinite` -> `info` (may have been
applied; the process retires); `NotOwner` (a Definite) -> `fail` "not-owner". The
tables are the contract of `lockcheck.locks.etcd.mapped_errors`.

Part 1 raises every `requests` exception class, and an etcd error reply with every
gRPC code, inside `mapped_errors`. Part 2 drives the real `EtcdLockClient` against
tiny fake gateways on localhost, so the exceptions are the ones `requests` really
raises (refused, no answer, hung up) and the lock's own decisions are seen: a lock
that does not come in time is revoked, and only a revoke that went through makes the
acquire a definite failure.
"""

from __future__ import annotations

import contextlib
import http.server
import inspect
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import etcd3gw.exceptions as gwx
import pytest
import requests.exceptions as rqe
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
)

from lockcheck.locks.api import Definite, Indefinite, Lease, NotOwner
from lockcheck.locks.etcd import (
    GRANT,
    KEEPALIVE,
    LOCK,
    RANGE,
    REVOKE,
    TIME_TO_LIVE,
    EtcdLockClient,
    EtcdReplyError,
    _short,
    b64,
    mapped_errors,
)
from lockcheck.locks.etcd3gw_lock import Etcd3gwWithClient
from lockcheck.locks.etcd3gw_lock import mapped_errors as gw_mapped_errors
from tests.conftest import did_not_hang
from tests.unit.error_kinds import error_kind


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


# -- part 1: every exception class ------------------------------------------------------

NOBODY: Any = None  # the pool and connection objects are not needed here
REFUSED = rqe.ConnectionError(MaxRetryError(NOBODY, "/v3/lease/keepalive", NewConnectionError(
    NOBODY, "Failed to establish a new connection: [Errno 111] Connection refused")))
HUNG_UP = rqe.ConnectionError(ProtocolError("Connection aborted.",
                                            ConnectionResetError(104, "reset by peer")))

# (name, exception, expected kind, expected short message or None to skip)
TABLE: list[tuple[str, BaseException, str, str | None]] = [
    # nothing was sent: the connection was never made, or the request never built
    ("ConnectionError refused", REFUSED, "Definite", "connection refused"),
    ("ConnectionError connect timeout", rqe.ConnectionError(MaxRetryError(
        NOBODY, "/", ConnectTimeoutError(NOBODY, "timed out"))), "Definite", "timeout"),
    ("ConnectTimeout", rqe.ConnectTimeout("timed out"), "Definite", "timeout connecting"),
    ("InvalidURL", rqe.InvalidURL("bad"), "Definite", None),
    ("InvalidProxyURL", rqe.InvalidProxyURL("bad"), "Definite", None),
    ("InvalidSchema", rqe.InvalidSchema("bad"), "Definite", None),
    ("MissingSchema", rqe.MissingSchema("bad"), "Definite", None),
    ("InvalidHeader", rqe.InvalidHeader("bad"), "Definite", None),
    ("URLRequired", rqe.URLRequired("bad"), "Definite", None),
    ("InvalidJSONError", rqe.InvalidJSONError("cannot encode the body"), "Definite", None),
    # the request may have reached the server
    ("ConnectionError hung up", HUNG_UP, "Indefinite", "connection lost"),
    ("ConnectionError bare", rqe.ConnectionError("something"), "Indefinite", None),
    ("ProxyError", rqe.ProxyError("proxy"), "Indefinite", None),
    ("SSLError", rqe.SSLError("ssl"), "Indefinite", None),
    ("ReadTimeout", rqe.ReadTimeout("Read timed out. (read timeout=0.25)"),
     "Indefinite", "timeout"),
    ("Timeout", rqe.Timeout("timed out"), "Indefinite", "timeout"),
    ("ChunkedEncodingError", rqe.ChunkedEncodingError("broken"), "Indefinite", None),
    ("ContentDecodingError", rqe.ContentDecodingError("broken"), "Indefinite", None),
    ("JSONDecodeError", rqe.JSONDecodeError("Expecting value", "<html>", 0),
     "Indefinite", "unreadable reply"),
    ("HTTPError", rqe.HTTPError("500"), "Indefinite", None),
    ("TooManyRedirects", rqe.TooManyRedirects("loop"), "Indefinite", None),
    ("RetryError", rqe.RetryError("retries"), "Indefinite", None),
    ("StreamConsumedError", rqe.StreamConsumedError("consumed"), "Indefinite", None),
    ("UnrewindableBodyError", rqe.UnrewindableBodyError("x"), "Indefinite", None),
    ("RequestException", rqe.RequestException("x"), "Indefinite", None),
    ("OSError", OSError(104, "Connection reset by peer"), "Indefinite", "connection lost"),
    ("socket timeout", TimeoutError("timed out"), "Indefinite", "timeout"),
]


@pytest.mark.parametrize(("exc", "kind", "message"), [t[1:] for t in TABLE],
                         ids=[t[0] for t in TABLE])
def test_mapping_table(exc: BaseException, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(exc)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


def test_every_requests_exception_class_is_in_the_table() -> None:
    """A new `requests` exception class must be looked at, not silently mapped."""
    classes = {n for n, c in inspect.getmembers(rqe, inspect.isclass)
               if issubclass(c, rqe.RequestException)}
    covered = {type(t[1]).__name__ for t in TABLE}
    assert classes - covered == set()


# gRPC code -> kind, for an error reply with an unremarkable message. Codes etcd uses
# for requests it refused before proposing are definite; the rest may follow a proposal.
GRPC: dict[int, str] = {
    0: "Indefinite",  # OK with an error body: nonsense, so unknown
    1: "Indefinite",  # Canceled
    2: "Indefinite",  # Unknown
    3: "Definite",  # InvalidArgument
    4: "Indefinite",  # DeadlineExceeded ("etcdserver: request timed out")
    5: "Definite",  # NotFound
    6: "Definite",  # AlreadyExists
    7: "Definite",  # PermissionDenied
    8: "Definite",  # ResourceExhausted ("too many requests")
    9: "Definite",  # FailedPrecondition
    10: "Indefinite",  # Aborted
    11: "Definite",  # OutOfRange
    12: "Definite",  # Unimplemented
    13: "Indefinite",  # Internal
    14: "Indefinite",  # Unavailable ("leader changed", "no leader")
    15: "Indefinite",  # DataLoss
    16: "Definite",  # Unauthenticated
}


@pytest.mark.parametrize("code", sorted(GRPC))
def test_every_grpc_code(code: int) -> None:
    status = 400 if GRPC[code] == "Definite" else 503
    assert kind_of(EtcdReplyError("etcdserver: something", code, status))[0] == GRPC[code]


@pytest.mark.parametrize(("err", "kind", "message"), [
    # a keepalive, revoke or lock of a lease that expired or never was
    (EtcdReplyError("etcdserver: requested lease not found", 5, 404), "NotOwner",
     "not-owner"),
    (EtcdReplyError("etcdserver: requested lease not found", 2, 500), "NotOwner",
     "not-owner"),
    # the Mutex recipe waited, then found its own key gone: nothing is held
    (EtcdReplyError("mutex: session is expired", 2, 500), "Definite", "lease expired"),
    (EtcdReplyError("etcdserver: request timed out", 14, 503), "Indefinite", "timeout"),
    # no gRPC code: a plain HTTP answer
    (EtcdReplyError("HTTP 404: Not Found", None, 404), "Definite", None),
    (EtcdReplyError("HTTP 502: Bad Gateway", None, 502), "Indefinite", None),
])
def test_error_replies(err: EtcdReplyError, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(err)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


def test_not_a_client_error_passes_through() -> None:
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")


def test_the_cause_is_kept() -> None:
    with pytest.raises(Indefinite) as ei, mapped_errors():
        raise HUNG_UP
    assert ei.value.__cause__ is HUNG_UP


@pytest.mark.parametrize(("msg", "short"), [
    ("[Errno 111] Connection refused", "connection refused"),
    ("Read timed out.", "timeout"), ("Connection aborted.", "connection lost"),
    ("x" * 200, "x" * 80),
])
def test_short(msg: str, short: str) -> None:
    assert _short(msg) == short


# -- part 2: what `requests` really raises, and what the client does about it ----------

# A behaviour answers one request: (status, JSON reply), "hang" (read it, never answer)
# or "close" (read it, hang up without a word).
Reply = tuple[int, dict[str, Any]] | str
Behaviour = Callable[[str, dict[str, Any]], Reply]


@contextlib.contextmanager
def fake_gateway(behaviour: Behaviour,
                 seen: list[tuple[str, dict[str, Any]]] | None = None) -> Iterator[str]:
    """An HTTP server on localhost that answers POSTs with `behaviour`; yields its URL."""
    log: list[tuple[str, dict[str, Any]]] = seen if seen is not None else []
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            log.append((self.path, body))
            reply = behaviour(self.path, body)
            if reply == "hang":
                stop.wait(5)
                return
            if reply == "close":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            assert isinstance(reply, tuple)
            status, data = reply
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        stop.set()
        srv.shutdown()
        srv.server_close()
        t.join(timeout=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(*urls: str, **kw: Any) -> EtcdLockClient:
    kw.setdefault("keepalive", False)  # no watcher thread unless a test wants one
    return EtcdLockClient(list(urls), ttl_ms=1000, op_timeout_s=0.3, **kw)


def held(c: EtcdLockClient, lease_id: int = 0x2A) -> Lease:
    lease = Lease(key="k0", token=f"{lease_id:x}", fence=7, ttl_ms=1000, valid_until_ns=0)
    c.leases[lease.token] = lease_id
    return lease


GRANTED = (200, {"ID": "42", "TTL": "2"})
LOCKED = (200, {"key": b64("k0/2a")})
RANGED = (200, {"kvs": [{"key": b64("k0/2a"), "create_revision": "17"}]})
OK: Reply = (200, {"header": {}})


def script(**replies: Reply) -> Behaviour:
    """Answer by path; the names are GRANT, LOCK, RANGE, REVOKE, KEEPALIVE, TIME_TO_LIVE."""
    paths = {GRANT: "grant", LOCK: "lock", RANGE: "range", REVOKE: "revoke",
             KEEPALIVE: "keepalive", TIME_TO_LIVE: "ttl"}
    return lambda path, body: replies[paths[path]]


def test_a_grant_carries_the_create_revision_as_fence() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with fake_gateway(script(grant=GRANTED, lock=LOCKED, range=RANGED), seen) as url:
        got = client(url).acquire("k0")
    assert got is not None and got.fence == 17 and got.token == "2a" and got.key == "k0"
    assert [p for p, _ in seen] == [GRANT, LOCK, RANGE]
    assert seen[0][1] == {"TTL": 1}  # whole seconds; etcd raises it to its minimum
    assert seen[1][1] == {"name": b64("k0"), "lease": "42"}
    assert seen[2][1] == {"key": b64("k0/2a")}


def test_the_lease_fence_variant_uses_the_lease_id() -> None:
    with fake_gateway(script(grant=GRANTED, lock=LOCKED)) as url:
        got = client(url, fence="lease").acquire("k0")
    assert got is not None and got.fence == 42


def test_refused_connection_is_definite() -> None:
    c = client(f"http://127.0.0.1:{free_port()}", keepalive=True)
    lease = held(c)
    with pytest.raises(Definite) as ei:
        c.renew(lease)
    assert not isinstance(ei.value, NotOwner) and str(ei.value) == "connection refused"
    with pytest.raises(Definite):
        c.acquire("k0")
    with pytest.raises(Definite):
        c.release(lease)
    c.close()


def test_no_answer_to_a_renew_is_indefinite_timeout() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with fake_gateway(script(keepalive="hang"), seen) as url:
        c = client(url, keepalive=True)
        with pytest.raises(Indefinite) as ei:
            c.renew(held(c))
        c.close()
    assert str(ei.value) == "timeout"
    assert seen == [(KEEPALIVE, {"ID": "42"})], "the keepalive never reached the server"


def test_hanging_up_after_the_request_is_indefinite() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with fake_gateway(script(revoke="close"), seen) as url:
        c = client(url)
        with pytest.raises(Indefinite) as ei:
            c.release(held(c))
    assert not isinstance(ei.value, Definite) and str(ei.value) == "connection lost"
    assert seen and seen[0][0] == REVOKE


def test_a_renew_of_a_lost_lease_is_not_owner() -> None:
    # etcd answers a keepalive of an unknown or expired lease with no TTL
    with fake_gateway(script(keepalive=(200, {"result": {"ID": "42"}}))) as url:
        c = client(url, keepalive=True)
        lease = held(c)
        with pytest.raises(NotOwner):
            c.renew(lease)
        c.close()
    assert lease.lost


def test_a_renew_moves_the_lease_clock() -> None:
    with fake_gateway(script(keepalive=(200, {"result": {"ID": "42", "TTL": "2"}}))) as url:
        c = client(url, keepalive=True)
        lease = held(c)
        t0 = time.monotonic_ns()
        c.renew(lease)
        c.close()
    assert lease.valid_until_ns >= t0 + 980_000_000 and not lease.lost


def test_a_release_of_an_expired_lease_is_not_owner() -> None:
    gone = (404, {"error": "etcdserver: requested lease not found", "code": 5,
                  "message": "etcdserver: requested lease not found"})
    with fake_gateway(script(revoke=gone)) as url:
        c = client(url)
        with pytest.raises(NotOwner):
            c.release(held(c))


def test_a_lock_that_does_not_come_in_time_is_revoked_and_fails() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with fake_gateway(script(grant=GRANTED, lock="hang", revoke=OK), seen) as url:
        t0 = time.monotonic()
        with pytest.raises(Definite) as ei:
            client(url).acquire("k0")
        took = time.monotonic() - t0
    assert "lease revoked" in str(ei.value)
    assert [p for p, _ in seen] == [GRANT, LOCK, REVOKE] and seen[2][1] == {"ID": "42"}
    assert took < did_not_hang(0.3), "an acquire returns at its op timeout"


def test_a_lock_whose_lease_cannot_be_revoked_is_indefinite() -> None:
    with fake_gateway(script(grant=GRANTED, lock="hang", revoke="hang")) as url, \
            pytest.raises(Indefinite) as ei:
        client(url).acquire("k0")
    assert not isinstance(ei.value, Definite) and str(ei.value) == "timeout"


def test_a_lost_grant_reply_is_indefinite_unless_revoked() -> None:
    with fake_gateway(script(grant=GRANTED, lock="close", revoke=OK)) as url, \
            pytest.raises(Definite):
        client(url).acquire("k0")
    with fake_gateway(script(grant=GRANTED, lock="close", revoke="close")) as url, \
            pytest.raises(Indefinite):
        client(url).acquire("k0")


def test_a_grant_that_times_out_locks_nothing() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with fake_gateway(script(grant="hang"), seen) as url, pytest.raises(Definite) as ei:
        client(url).acquire("k0")
    assert str(ei.value) == "grant: timeout" and [p for p, _ in seen] == [GRANT]


def test_a_session_expired_while_waiting_is_definite() -> None:
    expired = (500, {"error": "mutex: session is expired", "code": 2,
                     "message": "mutex: session is expired"})
    with fake_gateway(script(grant=GRANTED, lock=expired, revoke=OK)) as url, \
            pytest.raises(Definite) as ei:
        client(url).acquire("k0")
    assert str(ei.value) == "lease expired"


def test_a_grant_without_a_fence_is_given_back_as_unknown() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    with fake_gateway(script(grant=GRANTED, lock=LOCKED, range="hang", revoke=OK),
                      seen) as url, pytest.raises(Indefinite):
        client(url).acquire("k0")
    assert seen[-1] == (REVOKE, {"ID": "42"})


def test_after_an_error_the_next_request_goes_to_the_next_member() -> None:
    seen_a: list[tuple[str, dict[str, Any]]] = []
    seen_b: list[tuple[str, dict[str, Any]]] = []
    ttl = (200, {"result": {"ID": "42", "TTL": "2"}})
    with fake_gateway(script(keepalive="close"), seen_a) as a, \
            fake_gateway(script(keepalive=ttl), seen_b) as b:
        c = client(a, b, keepalive=True)
        lease = held(c)
        with pytest.raises(Indefinite):
            c.renew(lease)
        c.renew(lease)  # no retry inside: the worker asked again, on the next member
        c.close()
    assert len(seen_a) == 1 and len(seen_b) == 1


def test_the_watcher_marks_a_lease_the_service_no_longer_has() -> None:
    ttl = iter([(200, {"ID": "42", "TTL": "1"}), (200, {"ID": "42", "TTL": "-1"})])
    with fake_gateway(lambda path, body: (
            next(ttl, (200, {"ID": "42", "TTL": "-1"})) if path == TIME_TO_LIVE
            else script(grant=GRANTED, lock=LOCKED, range=RANGED)(path, body))) as url:
        c = client(url, keepalive=True)
        lease = c.acquire("k0")
        assert lease is not None and not lease.lost
        deadline = time.monotonic() + 3
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        c.close()
    assert lease.lost


# -- etcd3gw (the `etcd3gw-with` variant) ------------------------------------------------


def raised_from(exc: gwx.Etcd3Exception, cause: BaseException | None) -> gwx.Etcd3Exception:
    """`exc` as etcd3gw raises it: inside the `except` of `cause`, if any."""
    if cause is None:
        return exc
    try:
        try:
            raise cause
        except BaseException:
            raise exc from None  # etcd3gw sets no cause; keep the context
    except gwx.Etcd3Exception as e:
        e.__suppress_context__ = False
        return e


def lease_gone_text() -> str:
    return json.dumps({"error": "etcdserver: requested lease not found", "code": 5,
                       "message": "etcdserver: requested lease not found"})


# (name, exception, expected kind)
GW_TABLE: list[tuple[str, BaseException, str]] = [
    # etcd3gw folds these pairs into one class; the requests exception it came from
    # tells them apart
    ("ConnectionFailedError refused", raised_from(gwx.ConnectionFailedError("x"), REFUSED),
     "Definite"),
    ("ConnectionFailedError hung up", raised_from(gwx.ConnectionFailedError("x"), HUNG_UP),
     "Indefinite"),
    ("ConnectionTimeoutError connect", raised_from(gwx.ConnectionTimeoutError("x"),
                                                   rqe.ConnectTimeout("x")), "Definite"),
    ("ConnectionTimeoutError read", raised_from(gwx.ConnectionTimeoutError("x"),
                                                rqe.ReadTimeout("x")), "Indefinite"),
    # HTTP statuses
    ("ConnectionTimeoutError 504", gwx.ConnectionTimeoutError("", "Gateway Timeout"),
     "Indefinite"),
    ("ConnectionFailedError 503", gwx.ConnectionFailedError("", "Service Unavailable"),
     "Indefinite"),
    ("InternalServerError lease gone", gwx.InternalServerError(lease_gone_text(), "x"),
     "NotOwner"),
    ("InternalServerError timed out", gwx.InternalServerError(json.dumps(
        {"code": 14, "message": "etcdserver: request timed out"}), "x"), "Indefinite"),
    ("PreconditionFailedError", gwx.PreconditionFailedError("", "Precondition Failed"),
     "Definite"),
    ("Etcd3Exception 400", gwx.Etcd3Exception(json.dumps(
        {"code": 3, "message": "bad request"}), "Bad Request"), "Definite"),
    ("Etcd3Exception own", gwx.Etcd3Exception("lease must be acquired first"),
     "Indefinite"),
    ("WatchTimedOut", gwx.WatchTimedOut(), "Indefinite"),
    ("ApiVersionDiscoveryFailedError", gwx.ApiVersionDiscoveryFailedError("x"), "Definite"),
]


@pytest.mark.parametrize(("exc", "kind"), [t[1:] for t in GW_TABLE],
                         ids=[t[0] for t in GW_TABLE])
def test_etcd3gw_mapping_table(exc: BaseException, kind: str) -> None:
    assert error_kind(gw_mapped_errors, exc)[0] == kind


def test_every_etcd3gw_exception_class_is_in_the_table() -> None:
    classes = {n for n, c in inspect.getmembers(gwx, inspect.isclass)
               if issubclass(c, gwx.Etcd3Exception)}
    assert classes - {type(t[1]).__name__ for t in GW_TABLE} == set()


def gw_client(url: str) -> Etcd3gwWithClient:
    return Etcd3gwWithClient(url, ttl_ms=1000, op_timeout_s=0.3)


def test_etcd3gw_with_enters_although_the_lock_was_refused() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def answer(path: str, body: dict[str, Any]) -> Reply:
        if path == GRANT:
            return GRANTED
        if path == "/v3/kv/txn" and "success" in body and "failure" in body:
            return (200, {"succeeded": False})  # somebody else holds /locks/k0
        return (200, {"succeeded": False})  # the release: the value is not ours

    with fake_gateway(answer, seen) as url:
        c = gw_client(url)
        lease = c.acquire("k0")
        assert lease is not None and lease.fence is None  # entered anyway
        with pytest.raises(NotOwner):
            c.release(lease)
        c.close()
    assert [p for p, _ in seen] == [GRANT, "/v3/kv/txn", "/v3/kv/txn"]
    assert seen[1][1]["compare"][0]["key"] == b64("/locks/k0")


def test_etcd3gw_refused_is_definite_and_no_answer_indefinite() -> None:
    with pytest.raises(Definite) as ei:
        gw_client(f"http://127.0.0.1:{free_port()}").acquire("k0")
    assert not isinstance(ei.value, NotOwner)
    with fake_gateway(lambda path, body: "hang") as url, pytest.raises(Indefinite):
        gw_client(url).acquire("k0")


def test_etcd3gw_refresh_of_a_lost_lease_is_not_owner() -> None:
    def answer(path: str, body: dict[str, Any]) -> Reply:
        if path == GRANT:
            return GRANTED
        if path == KEEPALIVE:
            return (200, {"result": {"ID": "42"}})  # no TTL: expired
        return (200, {"succeeded": True})

    with fake_gateway(answer) as url:
        c = gw_client(url)
        lease = c.acquire("k0")
        assert lease is not None
        with pytest.raises(NotOwner):
            c.renew(lease)
    assert lease.lost
