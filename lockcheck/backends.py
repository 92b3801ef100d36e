"""Backends by name: which database runs on the nodes and which client library locks.

A backend is a database (`cluster/`) plus a lock client (`locks/`) plus the switches of
a variant. Adding one is a module in each folder and an entry in `BACKENDS`; nothing
else in lockcheck branches on backend names. Factories are named as "module:attr"
strings so that this table imports nothing heavy: a client worker loads only its own
client library, and the controller only the database it runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcheck.errors import BadInput

if TYPE_CHECKING:
    from lockcheck.cluster.api import DB
    from lockcheck.locks.api import ClientFactory
    from lockcheck.spec import TestSpec


@dataclass(frozen=True, kw_only=True)
class Backend:
    name: str
    family: str  # backends of one family share a database: redis, redlock, zookeeper, ...
    description: str
    db: str  # "module:factory", called as factory(spec, options) -> DB
    client: str  # "module:factory", a `locks.api.ClientFactory`
    library: str  # the PyPI distribution of the client library, for its version
    fence: str | None  # where fencing tokens come from; None: the backend issues none
    expect: str  # what a run is expected to show, in a sentence
    default_nodes: int = 1
    min_nodes: int = 1
    max_nodes: int | None = None
    binaries: tuple[str, ...] = ()  # server programs that must be installed
    options: Mapping[str, Any] = field(default_factory=dict)  # the variant's switches
    unsafe: bool = False  # a variant that exists to show a known failure

    def make_db(self, spec: TestSpec) -> DB:
        factory: Callable[..., DB] = load(self.db)
        return factory(spec, self.options)

    def client_factory(self) -> ClientFactory:
        factory: ClientFactory = load(self.client)
        return factory

    def library_version(self) -> str:
        try:
            return importlib.metadata.version(self.library)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"


def load(dotted: str) -> Any:
    """`"package.module:attr"` -> the attribute."""
    module, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(module), attr)


def _redis(**kw: Any) -> Backend:
    """Single-instance Redis backends: redis-py on one master per lock name."""
    base: dict[str, Any] = dict(
        family="redis", db="lockcheck.cluster.redis:RedisDB",
        client="lockcheck.locks.redis:make_clients", library="redis",
        binaries=("redis-server",))
    return Backend(**{**base, **kw})


def _postgres(**kw: Any) -> Backend:
    """One PostgreSQL 15 server; psycopg 3 on one autocommit session per worker."""
    base: dict[str, Any] = dict(
        family="postgres", db="lockcheck.cluster.postgres:PostgresDB",
        client="lockcheck.locks.postgres:make_clients", library="psycopg", max_nodes=1,
        binaries=("/usr/lib/postgresql/15/bin/postgres",))  # setpriv, unshare: util-linux
    return Backend(**{**base, **kw})


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        _redis(
            name="redis",
            description="single-instance Redis per lock name: redis-py Lock (SET NX PX, "
                        "token-checked Lua release/renew), a Lua fence counter",
            fence="INCR of a per-name counter in the same Lua script as the grant",
            expect="safe without faults; a master restarted empty (kill) or a paused "
                   "holder (client-pause) gives overlapping holders",
        ),
        _postgres(
            name="postgres",
            description="the brief's lease table: INSERT ... ON CONFLICT DO UPDATE WHERE "
                        "expired by the server's clock, renew/release by owner and fence",
            fence="the lease row's counter, +1 from the row on every grant, kept across "
                  "releases",
            expect="safe under server faults (the lease lives in a row, expired by the "
                   "server's clock); a paused holder (client-pause) overlaps the next one, "
                   "and the fence stops its stale write",
            options={"lock": "lease-table",
                     "setup": "lockcheck.locks.postgres:create_schema"},
        ),
        _postgres(
            name="postgres-advisory",
            description="session pg_try_advisory_lock on the worker's one autocommit "
                        "connection (tooz, django-pglocks); no TTL",
            fence=None,
            expect="a holder whose session is terminated (failover) keeps working until "
                   "its next query while another client already holds the lock; a paused "
                   "holder (client-pause) keeps its lock: there is no TTL",
            options={"lock": "advisory", "advisory_key": "stable"},
            unsafe=True,
        ),
        _postgres(
            name="postgres-advisory-hash",
            description="session advisory lock keyed by Python's hash(name) & 0x7FFFFFFF, "
                        "which is salted per process",
            fence=None,
            expect="no mutual exclusion even without faults: each worker process locks a "
                   "different key for the same name",
            options={"lock": "advisory", "advisory_key": "python-hash"},
            unsafe=True,
        ),
    ]
}


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise BadInput(f"unknown backend {name!r}; available: {', '.join(BACKENDS)} "
                       "(see: lockcheck backends)") from None


def key_names(n: int) -> list[str]:
    return [f"k{i}" for i in range(n)]


def families() -> Sequence[str]:
    return sorted({b.family for b in BACKENDS.values()})
