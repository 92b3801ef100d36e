"""PALs (PostgreSQL advisory locks through SQLAlchemy), unmodified, on the postgres backend.

`Locker(app, url).lock(name, blocking=False).acquire()` takes a session advisory lock
(`pg_try_advisory_lock` on a key from SHA-1 of the name) on a connection checked out
of SQLAlchemy's pool for as long as it is held; `release()` unlocks and returns the
connection. No TTL and no renewal: the lock lives as long as the session. A holder
is not told when its session ends (a terminated backend, a restart): another client
gets the lock at once, and the old holder learns only at its next query, its release.

The lease has no end of its own; `renew()` is recorded as refused (`NO_RENEW`),
since PALs has nothing to renew with. Timeouts: libpq's connect_timeout and
tcp_user_timeout (a partition ends a query instead of hanging it). No fence.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pals
import sqlalchemy as sa
import sqlalchemy.exc as sax

from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, LockClient, NotOwner

FOREVER_NS = 2**63 - 1
NO_RENEW = "PALs has no renewal: the lock lives as long as its session"


@contextmanager
def mapped_errors() -> Iterator[None]:
    try:
        yield
    except sax.DBAPIError as e:
        text = " ".join(str(e.orig or e).split())
        connecting = "connection to server at" in text and "failed" in text
        if connecting or "could not connect" in text or "refused" in text:
            raise Definite(_short(text)) from e
        raise Indefinite(_short(text)) from e
    except sax.SQLAlchemyError as e:
        raise Indefinite(" ".join(str(e).split())[:80]) from e


def _short(text: str) -> str:
    m = text.lower()
    if "refused" in m:
        return "connection refused"
    if "timeout" in m or "timed out" in m:
        return "timeout"
    if "terminating connection" in m or "closed the connection" in m:
        return "connection lost"
    return text[:80]


class PalsClient:
    def __init__(self, config: Mapping[str, Any], *, ttl_ms: int, op_timeout_s: float,
                 worker: int) -> None:
        url = (f"postgresql+psycopg2://{config['user']}@{config['host']}:{config['port']}/"
               f"{config['dbname']}")
        connect_args = {"connect_timeout": max(1, math.ceil(op_timeout_s)),
                        "tcp_user_timeout": max(1, int(op_timeout_s * 1000)),
                        "application_name": f"lockcheck-pals-{worker}"}
        self.locker = pals.Locker("lockcheck", create_engine_callable=lambda: sa.create_engine(
            url, connect_args=connect_args, pool_pre_ping=False))
        self.ttl_ms = ttl_ms
        self.locks: dict[str, pals.core.Lock] = {}
        self.grants = 0

    def acquire(self, key: str) -> Lease | None:
        lock = self.locker.lock(key, blocking=False)
        with mapped_errors():
            if not lock.acquire():
                # back to the pool, as the Lock's garbage collection would (its release
                # would unlock a lock this session does not hold)
                if lock.conn is not None:
                    lock.conn.close()
                    lock.conn = None
                return None
        self.grants += 1
        token = f"{id(self)}-{self.grants}"
        self.locks[token] = lock
        return Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=FOREVER_NS)

    def renew(self, lease: Lease) -> None:
        raise Definite(NO_RENEW)

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with mapped_errors():
            released = lock.release()
        if not released:
            raise NotOwner("not-owner")

    def close(self) -> None:
        self.locker.engine.dispose()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    client = PalsClient(config, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s,
                        worker=opts.worker)
    return {k: client for k in keys}
