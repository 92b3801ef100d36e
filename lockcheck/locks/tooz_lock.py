"""OpenStack tooz, unmodified: `coordinator.get_lock(name)` through four of its drivers.

One adapter, the backend's servers decide the driver: the redis backend's masters
(`redis://`: redis-py's Lock), the zookeeper ensemble (`zookeeper://`: kazoo's Lock
recipe), the etcd cluster (`etcd3+http://`: one transaction on a key with a lease)
and the postgres server (`postgresql://`: a session advisory lock on a connection of
its own). Lock TTLs are whole seconds in tooz (`lock_timeout`), at least 1.

The holder believes what tooz tells it, as tooz's users do: a lock is held while
`lock.acquired` says so (a flag kept in the client, never asked of the server), so
the lease has no clock of its own. `renew()` is the lock's `heartbeat()` where the
driver has one (redis: redis-py's reacquire; etcd: a lease refresh whose answer of
-1, "expired", tooz ignores), else the coordinator's, and then `acquired`.

tooz wraps each library's errors in `ToozConnectionError`/`ToozError`; they are
mapped by their cause where that is a redis-py error, else as unknown (`Indefinite`).
No fence: tooz has none.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import redis.exceptions as rex
import tooz
import tooz.coordination as tc

from lockcheck.locks import redis as lc_redis
from lockcheck.locks.api import ClientOptions, Indefinite, Lease, LockClient, NotOwner

FOREVER_NS = 2**63 - 1


@contextmanager
def mapped_errors() -> Iterator[None]:
    try:
        yield
    except tooz.ToozError as e:
        cause = e.__cause__
        if isinstance(cause, rex.LockNotOwnedError):
            raise NotOwner("not-owner") from e
        if isinstance(cause, rex.RedisError):
            with lc_redis.mapped_errors():
                raise cause from e
        raise Indefinite(f"{type(e).__name__}: {' '.join(str(e).split())}"[:80]) from e


def coordinator_url(config: Mapping[str, Any], opts: ClientOptions) -> str:
    """The tooz URL of the backend's servers (its client config says which ones)."""
    ttl_s = max(1, math.ceil(opts.ttl_ms / 1000))
    timeout_s = max(1, math.ceil(opts.op_timeout_s))
    if "masters" in config:
        host, port = config["masters"][0]
        return f"redis://{host}:{port}?timeout={timeout_s}&lock_timeout={ttl_s}"
    if "hosts" in config:
        first, *rest = config["hosts"]
        more = "".join(f"&hosts={quote(h)}" for h in rest)
        session_s = max(1, math.ceil(int(config.get("session_timeout_ms", 2000)) / 1000))
        return f"zookeeper://{first}?timeout={session_s}{more}"
    if "endpoints" in config:
        endpoint = str(config["endpoints"][opts.worker % len(config["endpoints"])])
        hostport = endpoint.split("://", 1)[-1].rstrip("/")
        return (f"etcd3+http://{hostport}?timeout={timeout_s}&lock_timeout={ttl_s}"
                "&api_version=v3")
    if "dbname" in config:
        return (f"postgresql://{config['user']}@{config['host']}:{config['port']}/"
                f"{config['dbname']}?connect_timeout={timeout_s}")
    raise KeyError(f"tooz has no driver for servers given as {', '.join(sorted(config))}")


class ToozClient:
    def __init__(self, url: str, *, member: str, ttl_ms: int) -> None:
        self.coord = tc.get_coordinator(url, member.encode())
        with mapped_errors():
            self.coord.start()
        self.ttl_ms = ttl_ms
        self.locks: dict[str, Any] = {}
        self.grants = 0

    def acquire(self, key: str) -> Lease | None:
        lock = self.coord.get_lock(key.encode())
        with mapped_errors():
            if not lock.acquire(blocking=False):
                return None
        self.grants += 1
        token = f"{id(self)}-{self.grants}-{time.monotonic_ns()}"
        self.locks[token] = lock
        return Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=FOREVER_NS)

    def renew(self, lease: Lease) -> None:
        lock = self.locks[lease.token]
        with mapped_errors():
            beat = getattr(lock, "heartbeat", None)
            if beat is not None:
                beat()
            else:
                self.coord.heartbeat()
        if not lock.acquired:
            lease.lost = True
            raise NotOwner("not-owner")

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with mapped_errors():
            released = lock.release()
        if not released:
            raise NotOwner("not-owner")

    def close(self) -> None:
        self.coord.stop()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    client = ToozClient(coordinator_url(config, opts), member=f"worker-{opts.worker}",
                        ttl_ms=opts.ttl_ms)
    return {k: client for k in keys}
