"""The Consul client's pure parts: where `requests` exceptions and Consul's error
replies become Definite / Indefinite / NotOwner, the Go durations it sends, the key
paths, the session it asks for, and the agent it goes to next.

`Definite` -> `fail` (certainly not applied); `Indefinite` -> `info` (may have been
applied; the process retires); `NotOwner` (a Definite) -> `fail` "not-owner". The
tables are the contract of `lockcheck.locks.consul.mapped_errors`. Nothing here
talks to a Consul server (tests/integration/test_consul.py does); the only network
use is a connection refused by a closed port on loopback.
"""

from __future__ import annotations

import inspect
import socket
import time
from typing import Any

import pytest
import requests.exceptions as rqe
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
)

from lockcheck.locks.api import ClientOptions, Definite, Indefinite, NotOwner
from lockcheck.locks.consul import (
    NO_EXPIRY_NS,
    PREFIX,
    PY_CONSUL_LOCK_DELAY,
    Agents,
    ConsulLockClient,
    ConsulReplyError,
    SessionGone,
    _reply_kind,
    duration,
    kv_path,
    make_clients,
    mapped_errors,
)
from tests.unit.error_kinds import error_kind


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


# -- every `requests` exception class ---------------------------------------------------

NOBODY: Any = None  # the pool and connection objects are not needed here
REFUSED = rqe.ConnectionError(MaxRetryError(NOBODY, "/v1/session/create", NewConnectionError(
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
    # a reply came, but not one we can read: the write may have been applied
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
    assert classes - {type(t[1]).__name__ for t in TABLE} == set()


# -- Consul's error replies -------------------------------------------------------------

# (name, reply, expected kind): replies as Consul 1.8 words them
REPLIES: list[tuple[str, ConsulReplyError, str]] = [
    # a renewal of a session Consul no longer has (invalidated, expired, destroyed)
    ("renew of a gone session", SessionGone("Session id 'a1b2' not found", 404),
     "NotOwner"),
    # refused before anything was proposed to Raft
    ("no leader", ConsulReplyError("No cluster leader", 500), "Definite"),
    ("acquire with a gone session", ConsulReplyError(
        'invalid session "a1b2-..."', 500), "Definite"),
    ("ACL", ConsulReplyError("Permission denied", 403), "Definite"),
    ("bad TTL", ConsulReplyError(
        "Request decode failed: Invalid Session TTL '1000000000', must be between [10s=24h0m0s]",
        400), "Definite"),
    ("rate limited", ConsulReplyError("HTTP 429", 429), "Definite"),
    ("bad method", ConsulReplyError("HTTP 405", 405), "Definite"),
    # may come after the write was proposed: unknown
    ("leadership lost", ConsulReplyError("leadership lost while committing log", 500),
     "Indefinite"),
    ("rpc timeout", ConsulReplyError(
        "rpc error making call: rpc error making call: timed out enqueuing operation", 500),
     "Indefinite"),
    ("rpc EOF", ConsulReplyError("rpc error making call: EOF", 500), "Indefinite"),
    ("bad gateway", ConsulReplyError("HTTP 502", 502), "Indefinite"),
    ("unavailable", ConsulReplyError("HTTP 503", 503), "Indefinite"),
]


@pytest.mark.parametrize(("err", "kind"), [t[1:] for t in REPLIES],
                         ids=[t[0] for t in REPLIES])
def test_error_replies(err: ConsulReplyError, kind: str) -> None:
    assert kind_of(err)[0] == kind


def test_a_gone_session_is_not_owner_by_name() -> None:
    assert kind_of(SessionGone("Session id 'x' not found", 404)) == ("NotOwner", "not-owner")


@pytest.mark.parametrize(("message", "status", "kind"), [
    ("No cluster leader", 500, Definite),
    ("no cluster leader", 503, Definite),  # the message decides, whatever the status
    ("Invalid session", 500, Definite),
    ("Permission denied", 500, Definite),
    ("something else", 400, Definite),
    ("something else", 499, Definite),
    ("something else", 500, Indefinite),
    ("something else", 599, Indefinite),
    ("something else", 302, Indefinite),  # not an error status Consul sends: unknown
])
def test_reply_kind(message: str, status: int, kind: type) -> None:
    got = _reply_kind(ConsulReplyError(message, status))
    assert type(got) is kind


def test_reply_kind_keeps_a_short_message() -> None:
    assert str(_reply_kind(ConsulReplyError("rpc error: i/o timeout", 500))) == "timeout"
    assert str(_reply_kind(ConsulReplyError("x" * 300, 500))) == "x" * 80


def test_not_a_client_error_passes_through() -> None:
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")


def test_the_cause_is_kept() -> None:
    with pytest.raises(Indefinite) as ei, mapped_errors():
        raise HUNG_UP
    assert ei.value.__cause__ is HUNG_UP


# -- what the client sends ----------------------------------------------------------------

@pytest.mark.parametrize(("ms", "text"), [(10_000, "10000ms"), (15_000, "15000ms"),
                                          (10_001, "10001ms"), (0, "0ms")])
def test_duration_is_a_go_duration_in_milliseconds(ms: int, text: str) -> None:
    assert duration(ms) == text


def test_kv_path_puts_the_lock_under_lockchecks_prefix_and_quotes_it() -> None:
    assert kv_path("k0") == "/v1/kv/" + PREFIX + "k0"
    assert kv_path("settle:m3:2026-09-16") == "/v1/kv/lockcheck-locks/settle:m3:2026-09-16"
    assert kv_path("a b?c") == "/v1/kv/lockcheck-locks/a%20b%3Fc"  # no query smuggled in


def client(**kw: Any) -> ConsulLockClient:
    kw.setdefault("ttl_ms", 10_000)
    return ConsulLockClient(["http://127.0.0.1:1"], op_timeout_s=0.3, **kw)


def test_the_session_has_the_ttl_and_a_lock_delay_of_the_ttl() -> None:
    assert client().session_body() == {"Name": "lockcheck", "TTL": "10000ms",
                                       "LockDelay": "10000ms", "Behavior": "release"}
    assert client(ttl_ms=12_500).session_body()["TTL"] == "12500ms"


def test_the_no_ttl_variant_sends_py_consuls_default_session() -> None:
    body = client(ttl=False).session_body()
    assert body == {"LockDelay": PY_CONSUL_LOCK_DELAY, "Behavior": "release"}
    assert "TTL" not in body and PY_CONSUL_LOCK_DELAY == "15s"


def test_the_belief_lasts_the_ttl_never_twice_it() -> None:
    """Consul may keep a session up to 2x its TTL; a rival can count on the TTL only."""
    c = client(drift=0.01)
    t0 = time.monotonic_ns()
    deadline = c._deadline(t0)
    assert deadline == t0 + int(10_000 * 1_000_000 * 0.99)
    assert deadline < t0 + 10_000 * 1_000_000
    assert client(ttl=False)._deadline(t0) == NO_EXPIRY_NS


def test_after_an_error_the_next_request_goes_to_the_next_agent() -> None:
    a = Agents(["http://a", "http://b", "http://c"], first=4)
    assert a.at == 1  # workers start on different agents
    a.move_on()
    a.move_on()
    assert a.endpoints[a.at] == "http://a"
    a.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_definite_and_moves_on() -> None:
    """A closed port on loopback: `requests` raises what it raises for a dead agent."""
    dead = f"http://127.0.0.1:{free_port()}"
    agents = Agents([dead, dead + "/"], first=0)
    with pytest.raises(Definite) as ei, mapped_errors():
        agents.call("PUT", "/v1/session/renew/x", 0.5)
    assert not isinstance(ei.value, NotOwner) and str(ei.value) == "connection refused"
    assert agents.at == 1
    agents.close()
    c = ConsulLockClient([dead], ttl_ms=10_000, op_timeout_s=0.5)
    with pytest.raises(Definite):  # the session was never made: nothing is held
        c.acquire("k0")
    c.close()


def test_make_clients_shares_one_client_per_worker_with_the_variants_switches() -> None:
    config = {"endpoints": ["http://10.0.0.1:8500", "http://10.0.0.2:8500"]}
    opts = ClientOptions(ttl_ms=10_000, op_timeout_s=1.0, worker=3,
                         options={"fence": "lock-index", "ttl": False})
    clients = make_clients(config, ["k0", "k1"], opts)
    assert set(clients) == {"k0", "k1"} and clients["k0"] is clients["k1"]
    c = clients["k0"]
    assert isinstance(c, ConsulLockClient)
    assert c.fence_source == "lock-index" and not c.expires and c.agents.at == 1
    c.close()
    plain = make_clients(config, ["k0"], ClientOptions(ttl_ms=10_000, op_timeout_s=1.0))
    p = plain["k0"]
    assert isinstance(p, ConsulLockClient)
    assert p.fence_source == "modify-index" and p.expires
    p.close()
