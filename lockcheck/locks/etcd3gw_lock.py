"""etcd3gw's `Lock`, used the way its users write it: `with client.lock(name, ttl):`.

etcd3gw (OpenStack's client of etcd's JSON gateway, used by tooz) locks with one
transaction on `/locks/<name>`: put our uuid with a new lease if the key does not
exist. `Lock.__enter__` calls `acquire()` and ignores its answer, so the body of a
`with` runs whether or not the lock was granted (python-ecosystem.md §1.4). This client
does exactly what `with` does: `acquire(key)` always returns a lease, even when
someone else holds the lock. That is the `etcd3gw-with` variant: overlapping holders
with no fault at all.

The rest is etcd3gw as configured for a test: a request timeout (its default is none:
a blackholed member hangs forever), the API path given (no discovery request), and our
session (no retries, no proxies, a fresh connection per request). Renewal is
`Lock.refresh()` (-1: the lease is gone); release is `Lock.release()`, what
`__exit__` runs, with its answer kept. There is no fence: etcd3gw exposes none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import etcd3gw.exceptions as gwx
import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.lock import Lock

from lockcheck.locks import etcd
from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

# etcd3gw turns an HTTP status into an exception class; the status, for the mapping
STATUS = {gwx.InternalServerError: 500, gwx.ConnectionFailedError: 503,
          gwx.ConnectionTimeoutError: 504, gwx.PreconditionFailedError: 412}


@contextmanager
def mapped_errors() -> Iterator[None]:
    """etcd3gw's exceptions become Definite or Indefinite by what caused them.

    etcd3gw folds a refused connect and a connection lost after sending into one
    `ConnectionFailedError`, and a connect timeout and a read timeout into one
    `ConnectionTimeoutError`; the `requests` exception it was raised from still
    tells them apart, so that one is mapped, as in `locks.etcd`. An error reply is
    mapped by its gRPC code and message, as there."""
    try:
        yield
    except gwx.ApiVersionDiscoveryFailedError as e:
        raise Definite("api discovery failed") from e  # before any lock request
    except gwx.Etcd3Exception as e:
        with etcd.mapped_errors():
            raise _underlying(e) from e


def _underlying(e: gwx.Etcd3Exception) -> BaseException:
    cause = e.__context__
    if isinstance(cause, requests.RequestException):
        return cause
    status = next((s for cls, s in STATUS.items() if isinstance(e, cls)), None)
    text = e.detail_text or ""
    if status is None and text.lstrip().startswith("{"):
        status = 500  # an error reply with some other status: its gRPC code decides
    if status is None:  # raised by etcd3gw itself, or an unknown reply: unsure
        return etcd.EtcdReplyError(text or type(e).__name__, None, 500)
    return etcd.reply_error(text, status)


class Etcd3gwWithClient:
    """The lock client for `--backend etcd3gw-with`; one per worker, on one member."""

    def __init__(self, endpoint: str, *, ttl_ms: int, op_timeout_s: float,
                 drift: float = 0.01) -> None:
        self.ttl_ms, self.drift = ttl_ms, drift
        url = urlsplit(endpoint)
        self.client = Etcd3Client(host=url.hostname or "localhost", port=url.port or 2379,
                                  timeout=op_timeout_s, api_path="/v3/",
                                  session=etcd.http_session())
        self.locks: dict[str, Lock] = {}

    def acquire(self, key: str) -> Lease | None:
        t0 = time.monotonic_ns()
        lock = self.client.lock(key, ttl=etcd.server_ttl_s(self.ttl_ms))
        with mapped_errors():
            lock.__enter__()  # `with lock:` enters whatever acquire() answered
        self.locks[lock.uuid] = lock
        return Lease(key=key, token=lock.uuid, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease: Lease) -> None:
        t0 = time.monotonic_ns()
        with mapped_errors():
            ttl = self.locks[lease.token].refresh()
        if ttl <= 0:
            lease.lost = True
            raise NotOwner("not-owner")
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with mapped_errors():
            released = lock.release()
        if not released:
            raise NotOwner("not-owner")

    def close(self) -> None:
        self.client.session.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker for every lock name; workers on different members."""
    endpoints = [str(e) for e in config["endpoints"]]
    client = Etcd3gwWithClient(endpoints[opts.worker % len(endpoints)], ttl_ms=opts.ttl_ms,
                               op_timeout_s=opts.op_timeout_s, drift=opts.drift)
    return {k: client for k in keys}
