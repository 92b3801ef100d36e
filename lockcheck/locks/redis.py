"""Single-instance Redis with redis-py's own `Lock`, plus a fencing token.

The grant and the fence come from one Lua script (SET NX PX, then INCR of a counter
per lock name), so no two grants can get the same fence while Redis keeps its data.
Release and renewal are redis-py's own token-checked Lua scripts. The client is
built without automatic retries: a retried SET NX whose first reply was lost would
turn a grant into "busy", and the history must show what was really sent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.lock import Lock
from redis.retry import Retry

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

FENCE_SUFFIX = ":fence"

ACQUIRE_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
"""


class FencedLock(Lock):
    """redis-py's Lock whose acquire also returns the next fencing token for the name."""

    fence: int | None = None
    lua_fenced_acquire: Any = None

    def register_scripts(self) -> None:
        super().register_scripts()
        cls = self.__class__
        client = self.redis
        if getattr(cls, "lua_fenced_acquire", None) is None:
            cls.lua_fenced_acquire = client.register_script(ACQUIRE_SCRIPT)

    def do_acquire(self, token: Any) -> bool:
        ttl = int(self.timeout * 1000) if self.timeout else 0
        fence = self.lua_fenced_acquire(
            keys=[self.name, self.name + FENCE_SUFFIX], args=[token, ttl], client=self.redis
        )
        if fence is None or fence is False:
            return False
        self.fence = int(fence)
        return True


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place redis-py's exceptions become Definite or Indefinite."""
    try:
        yield
    except rex.LockNotOwnedError as e:
        raise NotOwner("not-owner") from e
    except rex.BusyLoadingError as e:
        # a ConnectionError subclass, but the server answered LOADING without running it
        raise Definite("loading") from e
    except (rex.TimeoutError, rex.ConnectionError) as e:
        # redis-py reports a failed connect as "Error N connecting to ..." or
        # "Timeout connecting to server": nothing was sent. Anything else (reset,
        # read timeout) happened after the command may have reached the server.
        msg = str(e)
        if "connecting to" in msg or "Timeout connecting" in msg:
            raise Definite(_short(msg)) from e
        raise Indefinite(_short(msg)) from e
    except rex.ResponseError as e:
        # e.g. LOADING / BUSY / NOSCRIPT: the server answered without running it
        raise Definite(_short(str(e))) from e
    except rex.RedisError as e:
        raise Indefinite(_short(str(e))) from e
    except OSError as e:
        raise Indefinite(_short(str(e))) from e


def _short(msg: str) -> str:
    m = msg.lower()
    if "refused" in m:
        return "connection refused"
    if "timeout" in m or "timed out" in m:
        return "timeout"
    if "closed" in m or "reset" in m:
        return "connection lost"
    return msg[:80]


class FencedLockClient:
    """acquire/renew/release with `FencedLock` over any redis-py client; the errors
    go through `errors` (a subclass may extend the mapping for its connection kind)."""

    errors = staticmethod(mapped_errors)

    def __init__(self, client: redis.Redis, *, ttl_ms: int, drift: float = 0.01) -> None:
        self.ttl_ms = ttl_ms
        self.drift = drift
        self.redis = client
        self._locks: dict[str, FencedLock] = {}

    def _lock(self, key: str) -> FencedLock:
        # thread_local=False: the heartbeat thread renews what the main thread acquired
        return FencedLock(self.redis, key, timeout=self.ttl_ms / 1000.0, blocking=False,
                          thread_local=False)

    def acquire(self, key: str) -> Lease | None:
        lock = self._lock(key)
        token = uuid.uuid4().hex
        t0 = time.monotonic_ns()
        with self.errors():
            got = lock.acquire(blocking=False, token=token)
        if not got:
            return None
        self._locks[token] = lock
        return Lease(key=key, token=token, fence=lock.fence, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease: Lease) -> None:
        lock = self._locks[lease.token]
        t0 = time.monotonic_ns()
        with self.errors():
            lock.reacquire()
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def release(self, lease: Lease) -> None:
        lock = self._locks.pop(lease.token)
        lock.local.token = lease.token.encode()  # release() clears it before the round trip
        with self.errors():
            lock.release()

    def close(self) -> None:
        self.redis.close()


class RedisLockClient(FencedLockClient):
    """The lock client for `--backend redis`: one Redis master holds each lock name."""

    def __init__(self, address: str, port: int, *, ttl_ms: int, op_timeout_s: float,
                 drift: float = 0.01) -> None:
        super().__init__(redis.Redis(
            host=address, port=port, socket_timeout=op_timeout_s,
            socket_connect_timeout=op_timeout_s, retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        ), ttl_ms=ttl_ms, drift=drift)


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per master; each lock name lives on one master, names spread over them."""
    masters = [(str(a), int(p)) for a, p in config["masters"]]
    per_node = [RedisLockClient(a, p, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s,
                                drift=opts.drift) for a, p in masters]
    return {k: per_node[i % len(per_node)] for i, k in enumerate(keys)}
