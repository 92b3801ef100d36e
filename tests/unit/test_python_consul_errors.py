"""The Consul lock libraries' adapters: where python-consul's, `requests`' and
consullock's exceptions become Definite / Indefinite / NotOwner.

`Definite` -> `fail` (certainly not applied); `Indefinite` -> `info` (may have been
applied; the process retires). The tables are the contract of
`lockcheck.locks.python_consul.mapped_errors` (consul-lock and consulock) and of
`lockcheck.locks.consullock_lock.mapped_errors` (consullock, which wraps
python-consul's errors in its own). Part 2 drives the python-consul client the
adapters build against a socket that refuses and one that never answers, so the
exceptions are the ones really raised and the request timeout is seen to hold.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import consul.base as cb
import consullock.exceptions as cle
import pytest
import requests.exceptions as rqe
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from lockcheck.locks import consullock_lock, python_consul
from lockcheck.locks.api import Definite, Indefinite
from tests.unit.error_kinds import error_kind

NOBODY: Any = None
REFUSED = rqe.ConnectionError(MaxRetryError(NOBODY, "/v1/session/create", NewConnectionError(
    NOBODY, "Failed to establish a new connection: [Errno 111] Connection refused")))
HUNG_UP = rqe.ConnectionError(ProtocolError("Connection aborted.",
                                            ConnectionResetError(104, "reset by peer")))

# (name, exception, kind, message or None)
TABLE: list[tuple[str, BaseException, str, str | None]] = [
    ("refused", REFUSED, "Definite", "connection refused"),
    ("ConnectTimeout", rqe.ConnectTimeout("timed out"), "Definite", "timeout connecting"),
    ("InvalidURL", rqe.InvalidURL("bad"), "Definite", None),
    ("hung up", HUNG_UP, "Indefinite", "connection lost"),
    ("ReadTimeout", rqe.ReadTimeout("read timed out"), "Indefinite", "timeout"),
    ("ChunkedEncodingError", rqe.ChunkedEncodingError("broken"), "Indefinite", None),
    ("python-consul Timeout (599)", cb.Timeout(), "Indefinite", "timeout"),
    ("400", cb.BadRequest("400 bad"), "Definite", None),
    ("403", cb.ACLPermissionDenied("Permission denied"), "Definite", None),
    ("404", cb.NotFound("not found"), "Definite", None),
    ("429", cb.ClientError("429 rate limited"), "Definite", None),
    ("500 invalid session", cb.ConsulException("500 invalid session \"x\""), "Definite", None),
    ("500 no leader", cb.ConsulException("500 No cluster leader"), "Definite", None),
    ("500 other", cb.ConsulException("500 leadership lost while committing log"),
     "Indefinite", None),
    ("not JSON", ValueError("Expecting value: line 1 column 1"), "Indefinite", None),
]


@pytest.mark.parametrize(("name", "exc", "kind", "message"), TABLE, ids=[t[0] for t in TABLE])
def test_python_consul_errors(name: str, exc: BaseException, kind: str,
                              message: str | None) -> None:
    got, text = error_kind(python_consul.mapped_errors, exc)
    assert got == kind, (name, text)
    if message is not None:
        assert text == message


def wrapped(cause: BaseException, cls: type[Exception] = cle.ConsulConnectionError) -> Exception:
    """What consullock's `_exception_converter` raises: its error, from python-consul's."""
    try:
        try:
            raise cause
        except Exception as e:
            raise cls() from e
    except Exception as outer:
        return outer
    raise AssertionError("unreachable")


CONSULLOCK: list[tuple[str, BaseException, str]] = [
    ("ConsulConnectionError from a 500", wrapped(cb.ConsulException("500 oops")), "Indefinite"),
    ("ConsulConnectionError from no leader",
     wrapped(cb.ConsulException("500 No cluster leader")), "Definite"),
    ("PermissionDeniedConsulError", wrapped(cb.ACLPermissionDenied("denied"),
                                            cle.PermissionDeniedConsulError), "Definite"),
    ("SessionLostConsulError", wrapped(cb.ConsulException("500 invalid session"),
                                       cle.SessionLostConsulError), "Definite"),
    ("bad key", cle.DoubleSlashKeyError("a//b"), "Definite"),
    ("refused, not wrapped", REFUSED, "Definite"),
    ("read timeout, not wrapped", rqe.ReadTimeout("read timed out"), "Indefinite"),
]


@pytest.mark.parametrize(("name", "exc", "kind"), CONSULLOCK, ids=[t[0] for t in CONSULLOCK])
def test_consullock_errors(name: str, exc: BaseException, kind: str) -> None:
    got, text = error_kind(consullock_lock.mapped_errors, exc)
    assert got == kind, (name, text)


# -- part 2: the client the adapters build, against real sockets --------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_definite() -> None:
    c = python_consul.consul_client(f"http://127.0.0.1:{free_port()}", 1.0)
    with pytest.raises(Definite, match="connection refused"), python_consul.mapped_errors():
        c.session.create(ttl=10)


def test_a_server_that_never_answers_times_out_as_indefinite() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts (the kernel does), never answers
        port = listener.getsockname()[1]
        c = python_consul.consul_client(f"http://127.0.0.1:{port}", 0.5)
        t0 = time.monotonic()
        with pytest.raises(Indefinite, match="timeout"), python_consul.mapped_errors():
            c.kv.put("k", "v", acquire="s")
        assert time.monotonic() - t0 < 30  # python-consul alone would wait for ever
