"""python-redis-lock's `redis_lock.Lock`, unmodified, as its users call it.

`SET lock:<name> <id> NX EX <expire>` takes it (whole seconds: a TTL under 1 s is
rounded up, never to "no expiry"); `release()` and `extend()` are Lua scripts that
check the id. Two ways to hold it (the adapter's `auto_renewal` option):

* renewed by the holder: `renew()` is `extend()`; NotAcquired means the lock is gone;
* `auto_renewal=True`: the library's daemon thread extends the lock every 2/3 of the
  expiry, and the holder trusts it: its lease never ends on its own, and `renew()`
  does nothing (recorded as a refused renewal, `NO_RENEW`, so that no checker
  counts it as one the server confirmed). That thread has no error handling: one
  failed `extend()` (a timeout in a partition, NotAcquired after a pause) ends it
  without a word, and the lock expires under a holder that still works.

The redis-py client is the one the redis backend uses (no retries, timeouts set), and
its errors are mapped the same way (`locks.redis.mapped_errors`). No fence: the library
has none.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis_lock

from lockcheck.locks import redis as lc_redis
from lockcheck.locks.api import ClientOptions, Definite, Lease, LockClient, NotOwner, lease_deadline

FOREVER_NS = 2**63 - 1  # auto_renewal: the holder never expects its lease to end
# auto_renewal: the worker's renewal is recorded as refused (`fail`), so that no
# checker takes it for a renewal the server confirmed
NO_RENEW = "auto_renewal: the library's thread renews"


@contextmanager
def mapped_errors() -> Iterator[None]:
    try:
        with lc_redis.mapped_errors():
            yield
    except redis_lock.NotAcquired as e:
        raise NotOwner("not-owner") from e


class PythonRedisLockClient:
    def __init__(self, address: str, port: int, *, ttl_ms: int, op_timeout_s: float,
                 drift: float = 0.01, auto_renewal: bool = False) -> None:
        self.redis = lc_redis.redis_client(address, port, op_timeout_s)
        self.expire_s = max(1, math.ceil(ttl_ms / 1000))  # the library's unit
        self.ttl_ms = self.expire_s * 1000
        self.drift, self.auto_renewal = drift, auto_renewal
        self.locks: dict[str, redis_lock.Lock] = {}

    def acquire(self, key: str) -> Lease | None:
        lock = redis_lock.Lock(self.redis, key, expire=self.expire_s,
                               auto_renewal=self.auto_renewal)
        t0 = time.monotonic_ns()
        with mapped_errors():
            if not lock.acquire(blocking=False):
                return None
        self.locks[lock.id] = lock
        until = FOREVER_NS if self.auto_renewal else lease_deadline(t0, self.ttl_ms,
                                                                     self.drift)
        return Lease(key=key, token=lock.id, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=until)

    def renew(self, lease: Lease) -> None:
        if self.auto_renewal:  # the library's thread renews; its users do nothing here
            raise Definite(NO_RENEW)
        t0 = time.monotonic_ns()
        with mapped_errors():
            self.locks[lease.token].extend()
        lease.valid_until_ns = lease_deadline(t0, self.ttl_ms, self.drift)

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with mapped_errors():
            lock.release()  # stops the renewal thread first, if there is one

    def close(self) -> None:
        for lock in self.locks.values():  # a renewal thread must not outlive the worker
            lock._stop_lock_renewer()
        self.redis.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """As the redis backend: one client per master, lock names spread over them."""
    # the library logs a warning for every refused acquire: the history has them
    logging.getLogger("redis_lock.acquire").setLevel(logging.ERROR)
    masters = [(str(a), int(p)) for a, p in config["masters"]]
    per_node = [PythonRedisLockClient(a, p, ttl_ms=opts.ttl_ms,
                                      op_timeout_s=opts.op_timeout_s, drift=opts.drift,
                                      auto_renewal=bool(opts.options.get("auto_renewal")))
                for a, p in masters]
    return {k: per_node[i % len(per_node)] for i, k in enumerate(keys)}
