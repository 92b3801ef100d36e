"""consullock (wtsi-hgi, 4.2.0), unmodified, on the consul backend's servers.

`ConsulLockManager(consul_client=..., session_ttl_in_seconds=TTL)` as its README shows;
`acquire(key, blocking=False)` creates a session (`lock_delay=0`, `behavior="delete"`,
the manager's TTL) and takes the key with `PUT ?acquire=`; `release(key)` reads the key
and destroys the session that holds it *now*, whoever's that is. The manager's TTL is
the run's (`--ttl-ms`, whole seconds, 10 to 86400 as the library checks): the Python
API's default is no TTL at all (the README's example sets one; its command line
defaults to a day). No renewal: `renew()` is recorded as refused (`NO_RENEW`). The
holder believes it holds the lock for the session's TTL from the acquire's invoke
(Consul keeps a session at least its TTL). No fence: the library has none.

consullock wraps python-consul's ConsulException in its ConsulConnectionError (and an
"invalid session" acquire in SessionLostConsulError); the adapter maps them by their
cause, with python-consul's and `requests`' own (`python_consul.mapped_errors`).

`release(key)` returns the key whether or not the key was ours (and None when the key
is gone), so the adapter can tell NotOwner only from None.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import consullock.exceptions as cle
from consullock.managers import ConsulLockManager

from lockcheck.locks import python_consul as pc
from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

PREFIX = "lockcheck-consullock/"
NO_RENEW = "consullock has no renewal: the session lives its TTL"


@contextmanager
def mapped_errors() -> Iterator[None]:
    with pc.mapped_errors():
        try:
            yield
        except cle.SessionLostConsulError as e:
            raise Definite("invalid session") from e
        except cle.ConsulConnectionError as e:  # wraps python-consul's ConsulException
            if e.__cause__ is not None:
                raise e.__cause__ from e
            raise Definite("consullock: ConsulConnectionError") from e
        except cle.ConsulLockBaseError as e:  # refused before a request (bad key, ...)
            raise Definite(f"{type(e).__name__}: {e}"[:80]) from e


class ConsullockClient:
    def __init__(self, endpoint: str, *, ttl_ms: int, op_timeout_s: float,
                 drift: float) -> None:
        self.ttl_s = min(86400, max(10, math.ceil(ttl_ms / 1000)))
        self.ttl_ms, self.drift = self.ttl_s * 1000, drift
        self.manager = ConsulLockManager(consul_client=pc.consul_client(endpoint, op_timeout_s),
                                         session_ttl_in_seconds=self.ttl_s)
        self.grants = 0

    def acquire(self, key: str) -> Lease | None:
        t0 = time.monotonic_ns()
        with mapped_errors():
            info = self.manager.acquire(PREFIX + key, blocking=False)
        if info is None:
            return None
        self.grants += 1
        return Lease(key=key, token=str(info.session_id), fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease: Lease) -> None:
        raise Definite(NO_RENEW)

    def release(self, lease: Lease) -> None:
        with mapped_errors():
            released: Any = self.manager.release(PREFIX + lease.key)
        if released is None:  # no key: nobody held it (ours expired, nobody took it)
            raise NotOwner("not-owner")

    def close(self) -> None:
        with mapped_errors():
            self.manager.teardown()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    logging.getLogger("consullock").setLevel(logging.WARNING)
    client = ConsullockClient(pc.endpoint_of(config, opts.worker), ttl_ms=opts.ttl_ms,
                              op_timeout_s=opts.op_timeout_s, drift=opts.drift)
    return {k: client for k in keys}
