"""redlock-py (SPSCommerce, unchanged since 2016), unmodified, on the redlock backend's masters.

`Redlock.lock(name, ttl)` sends SET NX PX to each master in turn and succeeds on a
quorum if the validity, TTL minus the elapsed time minus drift, is still positive.
The elapsed time is read from the wall clock (`time.time()`), so a client clock step
changes the validity. When a quorum said yes but some master raised, `lock()` raises
`MultipleRedlockException` *without unlocking*: its caller is told it failed while a
majority holds its key until the TTL runs out. That is how this adapter maps it
(`Definite`: what the caller is told), so that the checkers see the consequence.

One attempt per acquire (`retry_count=1`). The lease is the library's own validity
(`Lock.validity`, ms from the attempt's start). There is no extend: `renew()` is
recorded as refused (`NO_EXTEND`) and a holder stops when its validity runs out.
`unlock()` logs and swallows a master's errors; it raises only if a master could not
even be asked. No fence. The redis-py clients have the masters' timeouts and no
retries, as the redlock backend's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redlock

from lockcheck.locks import redis as lc_redis
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, LockClient

NO_EXTEND = "redlock-py cannot extend a lock"


@contextmanager
def mapped_errors() -> Iterator[None]:
    try:
        with lc_redis.mapped_errors():
            yield
    except redlock.MultipleRedlockException as e:
        raise Definite(f"failed: {str(e)[:60]}") from e


class RedlockPyClient:
    def __init__(self, masters: Sequence[tuple[str, int]], *, ttl_ms: int,
                 op_timeout_s: float) -> None:
        self.servers = [lc_redis.redis_client(a, p, op_timeout_s) for a, p in masters]
        self.dlm = redlock.Redlock(self.servers, retry_count=1)
        self.ttl_ms = ttl_ms
        self.locks: dict[str, redlock.Lock] = {}

    def acquire(self, key: str) -> Lease | None:
        t0 = time.monotonic_ns()
        with mapped_errors():
            got = self.dlm.lock(key, self.ttl_ms)
        if not got:
            return None
        token = got.key.decode()
        self.locks[token] = got
        return Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=t0 + int(got.validity) * 1_000_000)

    def renew(self, lease: Lease) -> None:
        raise Definite(NO_EXTEND)

    def release(self, lease: Lease) -> None:
        got = self.locks.pop(lease.token)
        try:
            with lc_redis.mapped_errors():
                self.dlm.unlock(got)
        except redlock.MultipleRedlockException as e:
            raise Indefinite(f"unlock: {str(e)[:60]}") from e

    def close(self) -> None:
        for s in self.servers:
            s.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    masters = [(str(a), int(p)) for a, p in config["masters"]]
    client = RedlockPyClient(masters, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s)
    return {k: client for k in keys}
