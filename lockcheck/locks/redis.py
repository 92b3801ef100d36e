"""Single-instance Redis with redis-py's own `Lock`, plus a fencing token.

The grant and the fence come from one Lua script (SET NX PX, then INCR of a counter
per lock name), so no two grants can get the same fence while Redis keeps its data.
Release and renewal are redis-py's own token-checked Lua scripts. The client is
built without automatic retries: a retried SET NX whose first reply was lost would
turn a grant into "busy", and the history must show what was really sent.

Two instructive variants (backend options) change one thing each:

* `release: "get-del"`: release by GET, compare in the client, then DEL, as two round
  trips without Lua (a "latent outage"). A holder stalled between the two
  deletes whatever lock is there by then, someone else's included.
* `ttl: False`: SET NX without PX (redis-py's default `timeout=None`). Nothing expires,
  so a paused holder keeps the lock, but a lost release or a dead holder keeps it
  forever; renewal only confirms ownership.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
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

# the same grant without an expiry (the `ttl: False` variant)
ACQUIRE_NO_TTL_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return redis.call('INCR', KEYS[2])
end
return false
"""


class FencedLock(Lock):
    """redis-py's Lock whose acquire also returns the next fencing token for the name."""

    fence: int | None = None
    lua_fenced_acquire: Any = None
    lua_fenced_acquire_no_ttl: Any = None

    def register_scripts(self) -> None:
        super().register_scripts()
        cls = self.__class__
        client = self.redis
        if getattr(cls, "lua_fenced_acquire", None) is None:
            cls.lua_fenced_acquire = client.register_script(ACQUIRE_SCRIPT)
        if getattr(cls, "lua_fenced_acquire_no_ttl", None) is None:
            cls.lua_fenced_acquire_no_ttl = client.register_script(ACQUIRE_NO_TTL_SCRIPT)

    def do_acquire(self, token: Any) -> bool:
        keys = [self.name, self.name + FENCE_SUFFIX]
        if self.timeout:
            fence = self.lua_fenced_acquire(keys=keys, args=[token, int(self.timeout * 1000)],
                                            client=self.redis)
        else:
            fence = self.lua_fenced_acquire_no_ttl(keys=keys, args=[token], client=self.redis)
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
        if "max number of clients reached" in msg:
            # the server's answer to a connection it accepted past maxclients, before it
            # read a command (MaxClientsReachedError from redis-py 8.2): it ran nothing
            raise Definite("max clients") from e
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


def redis_client(address: str, port: int, timeout_s: float) -> redis.Redis:
    """A redis-py client that never retries and never sends anything unasked."""
    return redis.Redis(
        host=address, port=port, socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


NO_EXPIRY_NS = 2**63 - 1  # the `ttl: False` variant: a lease the client never sees end

RELEASES = ("lua", "get-del")


class FencedLockClient:
    """acquire/renew/release with `FencedLock` over any redis-py client; the errors
    go through `errors` (a subclass may extend the mapping for its connection kind)."""

    errors = staticmethod(mapped_errors)

    def __init__(self, client: redis.Redis, *, ttl_ms: int, drift: float = 0.01,
                 release: str = "lua", ttl: bool = True,
                 at_release_check: Callable[[Lease], None] | None = None) -> None:
        if release not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, not {release!r}")
        self.ttl_ms = ttl_ms
        self.drift = drift
        self.release_by = release
        # get-del: called between the GET that found our token and the DEL
        # (`client-pause --pause-at release` stops the worker there)
        self.at_release_check = at_release_check
        self.expires = ttl
        self.redis = client
        self._locks: dict[str, FencedLock] = {}

    def _lock(self, key: str) -> FencedLock:
        # thread_local=False: the heartbeat thread renews what the main thread acquired
        return FencedLock(self.redis, key, timeout=self.ttl_ms / 1000.0 if self.expires
                          else None, blocking=False, thread_local=False)

    def _deadline(self, t0: int) -> int:
        return lease_deadline(t0, self.ttl_ms, self.drift) if self.expires else NO_EXPIRY_NS

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
                     valid_until_ns=self._deadline(t0))

    def renew(self, lease: Lease) -> None:
        lock = self._locks[lease.token]
        t0 = time.monotonic_ns()
        with self.errors():
            if self.expires:
                lock.reacquire()
            elif not lock.owned():  # nothing to reset: confirm the lock is still ours
                raise NotOwner("not-owner")
        lease.valid_until_ns = max(lease.valid_until_ns, self._deadline(t0))

    def release(self, lease: Lease) -> None:
        lock = self._locks.pop(lease.token)
        if self.release_by == "get-del":
            self._get_then_del(lease)
            return
        lock.local.token = lease.token.encode()  # release() clears it before the round trip
        with self.errors():
            lock.release()

    def _get_then_del(self, lease: Lease) -> None:
        """The unsafe release: the check and the delete are two separate commands."""
        with self.errors():
            if self.redis.get(lease.key) != lease.token.encode():
                raise NotOwner("not-owner")
            if self.at_release_check is not None:
                self.at_release_check(lease)
            self.redis.delete(lease.key)

    def close(self) -> None:
        self.redis.close()


class RedisLockClient(FencedLockClient):
    """The lock client for `--backend redis`: one Redis master holds each lock name."""

    def __init__(self, address: str, port: int, *, ttl_ms: int, op_timeout_s: float,
                 drift: float = 0.01, release: str = "lua", ttl: bool = True,
                 at_release_check: Callable[[Lease], None] | None = None) -> None:
        super().__init__(redis_client(address, port, op_timeout_s), ttl_ms=ttl_ms,
                         drift=drift, release=release, ttl=ttl,
                         at_release_check=at_release_check)


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per master; each lock name lives on one master, names spread over them."""
    masters = [(str(a), int(p)) for a, p in config["masters"]]
    variant = {k: opts.options[k] for k in ("release", "ttl") if k in opts.options}
    per_node = [RedisLockClient(a, p, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s,
                                drift=opts.drift, at_release_check=opts.at_release_check,
                                **variant) for a, p in masters]
    return {k: per_node[i % len(per_node)] for i, k in enumerate(keys)}
