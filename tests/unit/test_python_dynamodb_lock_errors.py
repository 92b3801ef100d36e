"""python-dynamodb-lock's adapter: where the library's exceptions become Definite /
Indefinite / NotOwner (`lockcheck.locks.python_dynamodb_lock.mapped_errors`).

The library wraps every botocore error in `DynamoDBLockError(UNKNOWN, str(e))` raised
inside its `except`, so the original is the wrapper's context; the table builds each
wrapper the same way. Part 2 drives the adapter's client against a port that refuses
and a socket that never answers, so the exceptions are the ones really raised.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import botocore.exceptions as bx
import pytest
from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLockError

from lockcheck.locks import python_dynamodb_lock as pdl
from lockcheck.locks.api import Definite, Indefinite
from tests.unit.error_kinds import error_kind


def wrapped(original: BaseException) -> DynamoDBLockError:
    """The library's wrapper, raised as the library raises it (inside the except)."""
    try:
        try:
            raise original
        except Exception as e:
            raise DynamoDBLockError(DynamoDBLockError.UNKNOWN, str(e))  # noqa: B904
    except DynamoDBLockError as w:
        return w
    raise AssertionError("unreachable")


def client_error(code: str, status: int) -> bx.ClientError:
    return bx.ClientError({"Error": {"Code": code, "Message": "m"},
                           "ResponseMetadata": {"HTTPStatusCode": status}}, "PutItem")


TABLE: list[tuple[str, BaseException, str]] = [
    ("stolen at release", DynamoDBLockError(DynamoDBLockError.LOCK_STOLEN, "x"), "NotOwner"),
    ("not owned", DynamoDBLockError(DynamoDBLockError.LOCK_NOT_OWNED, "x"), "NotOwner"),
    ("shut down", DynamoDBLockError(DynamoDBLockError.CLIENT_SHUTDOWN, "x"), "Definite"),
    ("unknown, no context", DynamoDBLockError(DynamoDBLockError.UNKNOWN, "x"), "Indefinite"),
    ("refused connection", wrapped(bx.EndpointConnectionError(endpoint_url="http://x")),
     "Definite"),
    ("connect timeout", wrapped(bx.ConnectTimeoutError(endpoint_url="http://x")), "Definite"),
    ("read timeout", wrapped(bx.ReadTimeoutError(endpoint_url="http://x")), "Indefinite"),
    ("connection closed", wrapped(bx.ConnectionClosedError(endpoint_url="http://x")),
     "Indefinite"),
    ("4xx: no table", wrapped(client_error("ResourceNotFoundException", 400)), "Definite"),
    ("5xx", wrapped(client_error("InternalServerError", 500)), "Indefinite"),
    ("not botocore", wrapped(KeyError("owner_name")), "Indefinite"),
]


@pytest.mark.parametrize(("name", "exc", "kind"), TABLE, ids=[t[0] for t in TABLE])
def test_each_library_error_maps_to_one_kind(name: str, exc: BaseException,
                                             kind: str) -> None:
    got, _ = error_kind(pdl.mapped_errors, exc)
    assert got == kind, (name, got)


def test_the_wrapper_keeps_botocores_error_as_its_context() -> None:
    w = wrapped(bx.ReadTimeoutError(endpoint_url="http://x"))
    assert isinstance(w.__context__, bx.ReadTimeoutError)


# -- part 2: the client against sockets that refuse or never answer ----------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listening socket that accepts into its backlog and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attempt(port: int) -> tuple[type[BaseException] | None, float]:
    c = pdl.PythonDynamoDBLockClient(f"http://127.0.0.1:{port}", ttl_ms=1000,
                                     op_timeout_s=0.2)
    t0 = time.monotonic()
    err: Any = None
    try:
        c.acquire("k")
    except (Definite, Indefinite) as e:
        err = type(e)
    finally:
        c.close()
    return err, time.monotonic() - t0


def test_a_refused_connection_is_definite() -> None:
    err, _ = attempt(closed_port())
    assert err is Definite


def test_a_server_that_never_answers_is_indefinite_within_the_retries(
        silent_port: int) -> None:
    err, took = attempt(silent_port)
    assert err is Indefinite
    assert took < 30, took  # 3 attempts of 0.2 s and their backoff, not a hang
