"""portalocker's `RedisLock`, unmodified: a lock held by being a channel's one subscriber.

No key and no TTL: `acquire` counts the channel's subscribers; a holder answers pings
on the channel, and one that stays silent for `unavailable_timeout` (1 s) is CLIENT
KILLed and replaced. portalocker 4.2 rebuilt this after two exclusive holders were
reported (a killed holder silently re-subscribed by redis-py's retries): the
subscription connection never retries, the holder learns of the loss (`lost`), and
`fencing=True` draws a token from an INCR counter per channel at each grant.

This adapter uses all of that: the lease lasts until the library says it is lost
(its `on_lost` callback, on the keep-alive thread; no clock of its own), `renew()`
asks `lost`, the fence is `fence_token`. `interrupt_on_lost=False`: a loss
must not raise KeyboardInterrupt in the worker. Contended acquires fail at once
(`fail_when_locked`); a refusal may still take up to 1 s while the holder is pinged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import portalocker
import portalocker.exceptions as plx
import redis

from lockcheck.locks import redis as lc_redis
from lockcheck.locks.api import ClientOptions, Indefinite, Lease, LockClient, NotOwner

FOREVER_NS = 2**63 - 1


@contextmanager
def mapped_errors() -> Iterator[None]:
    try:
        with lc_redis.mapped_errors():
            yield
    except plx.AlreadyLocked:
        raise  # busy: the caller's answer is None
    except plx.LockLostError as e:
        raise NotOwner("not-owner") from e
    except plx.LockException as e:  # portalocker's own wrapping of what went wrong
        cause = e.__cause__ or e.__context__
        if isinstance(cause, redis.RedisError):
            with lc_redis.mapped_errors():
                raise cause from e
        raise Indefinite(str(e)[:80] or type(e).__name__) from e


class PortalockerClient:
    def __init__(self, address: str, port: int, *, ttl_ms: int, op_timeout_s: float) -> None:
        # redis-py's defaults but for the timeouts: what a user hands to RedisLock
        self.redis = redis.Redis(host=address, port=port, socket_timeout=op_timeout_s,
                                 socket_connect_timeout=op_timeout_s,
                                 decode_responses=True)
        self.ttl_ms = ttl_ms
        self.locks: dict[str, portalocker.RedisLock] = {}
        self.leases: dict[str, Lease] = {}

    def _on_lost(self, lock: portalocker.RedisLock) -> None:
        """portalocker's callback, on its keep-alive thread: the holder stops at once."""
        lease = self.leases.get(lock.holder_id)
        if lease is not None:
            lease.lost = True

    def acquire(self, key: str) -> Lease | None:
        lock = portalocker.RedisLock(key, connection=self.redis, fail_when_locked=True,
                                     timeout=0, interrupt_on_lost=False, fencing=True,
                                     on_lost=self._on_lost)
        try:
            with mapped_errors():
                lock.acquire()
        except plx.AlreadyLocked:
            return None
        self.locks[lock.holder_id] = lock
        lease = self.leases[lock.holder_id] = Lease(
            key=key, token=lock.holder_id, fence=lock.fence_token, ttl_ms=self.ttl_ms,
            valid_until_ns=FOREVER_NS, lost=lock.lost)
        return lease

    def renew(self, lease: Lease) -> None:
        if self.locks[lease.token].lost:
            lease.lost = True
            raise NotOwner("not-owner")

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        self.leases.pop(lease.token, None)
        lost = lock.lost
        with mapped_errors():
            lock.release()
        if lost:
            raise NotOwner("not-owner")

    def close(self) -> None:
        for lock in self.locks.values():
            lock.release()
        self.redis.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    masters = [(str(a), int(p)) for a, p in config["masters"]]
    per_node = [PortalockerClient(a, p, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s)
                for a, p in masters]
    return {k: per_node[i % len(per_node)] for i, k in enumerate(keys)}
