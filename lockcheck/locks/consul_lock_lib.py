"""consul-lock (oysterbooks, 0.1.6), unmodified, on the consul backend's servers.

`EphemeralLock(key, lock_timeout_seconds=TTL, consul_client=...)`, single use, as its
docstring shows: `acquire(fail_hard=False)` creates a session (`lock_delay=0`,
`ttl=lock_timeout_seconds`, `behavior="delete"`) and takes `locks/ephemeral/<key>`
with `PUT ?acquire=`; with the default `acquire_timeout_ms=0` it tries once.
`release()` destroys the lock's own session (the key goes with it). The adapter calls
`release()` after a refused acquire too, as the library's `hold()` does, so that the
session does not outlive the attempt. `lock_timeout_seconds` is the run's TTL (whole
seconds, 10 to 3600 as the library checks; its default is 180 s). No renewal:
`renew()` is recorded as refused (`NO_RENEW`). The holder believes it holds the lock
for the session's TTL from the acquire's invoke. No fence: the library has none.

consul-lock 0.1.6 does not import on Python 3: its `__init__.py` says `from lock_impl
import EphemeralLock` (Python 2's implicit relative import), and `import consul_lock`
fails with "No module named 'lock_impl'". A user on Python 3 must put the package's
folder on `sys.path`; the adapter does that (`load_library`) and imports its
`lock_impl`, unchanged.

Errors are python-consul's and `requests`' (`python_consul.mapped_errors`).
Destroying a session answers true whether or not it still existed, so a release
cannot tell NotOwner: it reports success.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lockcheck.locks import python_consul as pc
from lockcheck.locks.api import ClientOptions, Definite, Lease, LockClient, lease_deadline

NO_RENEW = "consul-lock has no renewal: the session lives its TTL"


def load_library() -> Any:
    """consul-lock's `lock_impl` module, with the package's folder on sys.path (its own
    `import consul_lock` fails on Python 3)."""
    spec = importlib.util.find_spec("consul_lock")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("consul-lock is not installed (pip install consul-lock==0.1.6)")
    folder = next(iter(spec.submodule_search_locations))
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module("lock_impl")


class ConsulLockLibClient:
    def __init__(self, endpoint: str, *, ttl_ms: int, op_timeout_s: float,
                 drift: float) -> None:
        self.impl = load_library()
        self.ttl_s = min(3600, max(10, math.ceil(ttl_ms / 1000)))
        self.ttl_ms, self.drift = self.ttl_s * 1000, drift
        self.consul = pc.consul_client(endpoint, op_timeout_s)
        self.locks: dict[str, Any] = {}

    def acquire(self, key: str) -> Lease | None:
        lock = self.impl.EphemeralLock(key, lock_timeout_seconds=self.ttl_s,
                                       consul_client=self.consul)
        t0 = time.monotonic_ns()
        with pc.mapped_errors():
            got = lock.acquire(fail_hard=False)
        if not got:
            with pc.mapped_errors():  # as hold() does: the session goes
                lock.release()
            return None
        self.locks[lock.session_id] = lock
        return Lease(key=key, token=str(lock.session_id), fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease: Lease) -> None:
        raise Definite(NO_RENEW)

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with pc.mapped_errors():
            lock.release()

    def close(self) -> None:
        self.consul.http.session.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    client = ConsulLockLibClient(pc.endpoint_of(config, opts.worker), ttl_ms=opts.ttl_ms,
                                 op_timeout_s=opts.op_timeout_s, drift=opts.drift)
    return {k: client for k in keys}
