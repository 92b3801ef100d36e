"""Redis behind Sentinel: redis-py's `Sentinel.master_for`, and the `redis` backend's lock.

The client asks the Sentinels for the primary whenever it opens a connection, and
locks there with the same `FencedLock` Lua as `--backend redis` (SET NX PX + INCR of
a fence counter). Every lock name lives on the one primary. Replication to the
replicas is asynchronous, the fence counter's included: after a failover the new
primary may lack a granted key (the lock is granted twice) and its counter may be
behind (fences repeat or go backwards).

Retries are off everywhere, the Sentinel queries' included (redis-py 8.1's Sentinel
retries its own queries ten times by default). Time budget of one call, within the op
timeout: each Sentinel query a twelfth of it (three Sentinels: a quarter), the connect
to the primary a quarter, the command half.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel, SlaveNotFoundError

from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, LockClient
from lockcheck.locks.redis import FencedLockClient
from lockcheck.locks.redis import mapped_errors as redis_mapped_errors


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place Sentinel's errors become Definite; the rest is the `redis` map."""
    with redis_mapped_errors():
        try:
            yield
        except (MasterNotFoundError, SlaveNotFoundError) as e:
            # raised while connecting, before anything was sent: no Sentinel named one
            raise Definite("no primary") from e
        except rex.ConnectionError as e:
            # redis-py turns a READONLY reply on a primary's connection into "The
            # previous master is now a slave": a demoted primary refused the command
            if isinstance(e.__context__, rex.ReadOnlyError):
                raise Definite("readonly") from e
            raise


class SentinelLockClient(FencedLockClient):
    """The lock client for `--backend redis-sentinel`: every name on the primary.

    With `wait_replicas` (the `redis-sentinel-wait` variant) a grant or renewal counts
    only once that many replicas acknowledge it (`WAIT`); fewer in time is `info`:
    the primary applied it, but a failover may lose it.
    """

    errors = staticmethod(mapped_errors)

    def __init__(self, sentinels: Sequence[tuple[str, int]], service: str, *, ttl_ms: int,
                 op_timeout_s: float, drift: float = 0.01, wait_replicas: int = 0) -> None:
        self.wait_replicas = wait_replicas
        # replicas acknowledge in well under a millisecond here; an eighth of the op
        # timeout leaves the budget of the call as it is
        self.wait_ms = max(1, int(op_timeout_s * 1000 / 8))
        no_retry = Retry(NoBackoff(), 0)
        ask = op_timeout_s / 12
        self.sentinel = Sentinel(
            list(sentinels),
            sentinel_kwargs={"socket_timeout": ask, "socket_connect_timeout": ask,
                             "retry": no_retry, "health_check_interval": 0})
        super().__init__(self.sentinel.master_for(
            service, socket_timeout=op_timeout_s / 2,
            socket_connect_timeout=op_timeout_s / 4, retry=no_retry,
            health_check_interval=0), ttl_ms=ttl_ms, drift=drift)

    def _replicated(self) -> None:
        if self.wait_replicas:
            with self.errors():
                acked = int(self.redis.wait(self.wait_replicas, self.wait_ms))
            if acked < self.wait_replicas:
                raise Indefinite(f"replicated to {acked} of {self.wait_replicas}")

    def acquire(self, key: str) -> Lease | None:
        lease = super().acquire(key)
        if lease is not None:
            try:
                self._replicated()
            except Indefinite:
                self._locks.pop(lease.token, None)
                raise
        return lease

    def renew(self, lease: Lease) -> None:
        super().renew(lease)
        self._replicated()

    def close(self) -> None:
        super().close()
        self.sentinel.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client (one connection pool to whoever is primary) for every lock name."""
    sentinels = [(str(a), int(p)) for a, p in config["sentinels"]]
    # "all": every replica the ensemble started with
    wait = opts.options.get("wait_replicas", 0)
    client = SentinelLockClient(
        sentinels, str(config["service"]), ttl_ms=opts.ttl_ms,
        op_timeout_s=opts.op_timeout_s, drift=opts.drift,
        wait_replicas=int(config["replicas"]) if wait == "all" else int(wait))
    return dict.fromkeys(keys, client)
