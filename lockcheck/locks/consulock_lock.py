"""consulock (haarcuba, 0.4.3), unmodified, on the consul backend's servers.

`ConsulLock(key, consul_client)`; `acquire(timeout=..., interval=...)` creates a session
with a TTL of one day (`ttl=24 * 3600`; python-consul's defaults otherwise: lock-delay
15 s, behavior release, the agent's serf health check), writes a priority key under
the lock's key, and tries `PUT ?acquire=` every `interval` until `timeout`; `release()`
is `PUT ?release=` with its session (false if the key was not its own), then it
destroys the session. No renewal (a day is the lease) and nothing that tells a holder
it lost the lock. No fence.

Try once: the library has no non-blocking call; `timeout=TRY_S` with `interval=TRY_S`
gives one attempt (after a refusal it sleeps `interval`, then times out, deletes its
priority key and destroys its session). The holder believes what the library tells
it: that it holds the lock until it releases, within the session's day
(`ttl_ms` = one day, so the worker never renews; `renew()` would be refused,
`NO_RENEW`).

consulock declares python-consul2, which installs the same `consul` module as
python-consul; lockcheck runs it on python-consul 1.1.0 (the one consullock and
consul-lock need), whose calls it makes (`session.create/destroy`, `kv.put/get/delete`,
`consul.base.ConsulException`) are the same. Errors: `python_consul.mapped_errors`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import consulock

from lockcheck.locks import python_consul as pc
from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

PREFIX = "lockcheck-consulock/"
ONE_DAY_MS = 24 * 3600 * 1000  # the library's session TTL
TRY_S = 0.05  # acquire's timeout and interval: one attempt
NO_RENEW = "consulock has no renewal: the session lives a day"


class ConsulockClient:
    def __init__(self, endpoint: str, *, op_timeout_s: float, drift: float) -> None:
        self.consul = pc.consul_client(endpoint, op_timeout_s)
        self.drift = drift
        self.locks: dict[str, Any] = {}

    def acquire(self, key: str) -> Lease | None:
        lock = consulock.ConsulLock(PREFIX + key, self.consul)
        t0 = time.monotonic_ns()
        with pc.mapped_errors():
            if not lock.acquire(timeout=TRY_S, interval=TRY_S):
                return None
        token = str(lock._sessionId)
        self.locks[token] = lock
        return Lease(key=key, token=token, fence=None, ttl_ms=ONE_DAY_MS,
                     valid_until_ns=lease_deadline(t0, ONE_DAY_MS, self.drift))

    def renew(self, lease: Lease) -> None:
        raise Definite(NO_RENEW)

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with pc.mapped_errors():
            released = lock.release()
        if not released:
            raise NotOwner("not-owner")

    def close(self) -> None:
        self.consul.http.session.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    client = ConsulockClient(pc.endpoint_of(config, opts.worker),
                             op_timeout_s=opts.op_timeout_s, drift=opts.drift)
    return {k: client for k in keys}
