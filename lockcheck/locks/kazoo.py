"""ZooKeeper locks with kazoo's own `Lock` recipe: one session per worker, all members.

The recipe is kazoo's: each contender creates an ephemeral sequential znode under
`/locks/<key>`; the lowest one holds the lock, the others watch their predecessor.
What this client adds around it, and why:

* **Retries off.** The recipe retries forever by default, and a retry that runs out of
  time is reported as "not acquired" (it swallows `RetryFailedError`), which would
  record a lost connection as "busy". The recipe takes no retry policy, so we set its
  `_retry` to one that calls once; every error then comes out as itself. The client's
  `command_retry` tries once too (the recipe's `release` would use it).
* **A deadline per operation.** kazoo's blocking calls wait without a bound while the
  client is reconnecting (requests queue until a connection is back). Our handler's
  results and events give up at the op's deadline (the op timeout, TTL/4), so
  `acquire`, `renew` and `release` return in time; a call that gave up may still be
  sent later, so it is `info`.
* **No contender left behind** (kazoo#732). When an acquire fails half-way (a timeout,
  a dropped connection while the recipe cleaned up after itself, which it does
  silently), its znode may still exist, or be created later from the queue; it would
  then become the holder of a lock nobody uses. We remember its name prefix and
  delete what matches before the next acquire (after a `sync`, so a lagging member
  cannot hide it). A release that timed out is remembered the same way.
* **The fence** is the lock znode's `czxid` (read with `exists` right after the
  grant): zxids are ensemble-wide and only grow, and the recipe grants in sequence
  order, which is creation order. The sequence suffix grows too, but only per parent
  znode and only while the parent is never deleted and recreated (a reset counter,
  or a wrap at 2^31); `zookeeper-seq-fence` uses it as a control.
* **Release** deletes the lock's own znode (as the recipe does) but does not swallow
  `NoNodeError`: a release after the session expired is recorded as not-owner. It
  waits for a reconnect rather than failing at once: the queued delete still goes
  out on the same session, so a release that gave up is `info`.

The default client treats SUSPENDED as lost (kazoo's documented requirement: a
SUSPENDED client may already have lost its session, and it only hears LOST after it
reconnects), keeps its own lease clock (the session timeout from the last confirmed
contact) and renews by asking the server whether its znode still exists under its
session. The variants (`options`) show what goes wrong with less:

* `listen`: "suspended" (default), "lost" (only LOST ends the lease, the common usage),
  or None (no state listener at all);
* `trust_flag`: no lease clock, and `renew` answers from the recipe's `is_acquired`
  without asking the server (which never resets that flag on a session loss);
* `fence`: "czxid" (default) or "sequence".

Each grant and renewal names the member the session was connected to when it was
answered (`granted_by`), so a fault can be aimed at the member a holder relies on.

A state listener is always installed to count connection drops, so that the
leftover clean-up above knows when the recipe's own may have been cut off; only
`listen` decides whether a state change ends a lease.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kazoo.exceptions as kex
from kazoo.client import KazooClient
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import KazooState
from kazoo.recipe.lock import Lock
from kazoo.retry import ForceRetryError, KazooRetry

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

LOCKS_ROOT = "/locks"
FOREVER_NS = 2**62  # "no lease clock": the client believes until told otherwise
WAIT_SHARE = 0.6  # of the op budget the recipe may wait for its predecessor; the rest
#                   is for deleting its own znode when it gives up
CONNECT_WAIT_S = 10.0
CLOSE_WAIT_S = 1.0


@contextlib.contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place kazoo's exceptions become Definite, Indefinite or NotOwner."""
    try:
        yield
    except kex.LockTimeout as e:
        # the predecessor did not go away within the op's budget; the recipe deleted
        # our contender (if that failed, the caller saw the drop and raised ConnectionLoss)
        raise Definite("busy") from e
    except kex.ConnectionClosedError as e:
        raise Definite("client closed") from e  # refused before sending: we closed it
    except (kex.SessionExpiredError, kex.NoNodeError) as e:
        # the session is over (its ephemeral znodes with it) or our znode is gone
        raise NotOwner("not-owner") from e
    except (kex.ConnectionLoss, kex.OperationTimeoutError, kex.RequestTimeoutError,
            kex.ConnectionDropped) as e:
        raise Indefinite("connection lost") from e  # may have been sent and applied
    except KazooTimeoutError as e:
        raise Indefinite("timeout") from e  # our deadline: it may still be sent later
    except kex.ZookeeperError as e:
        code = getattr(e, "code", None)
        if code is not None and (code <= kex.APIError.code or code == 0):
            # the server looked at the request and refused it (or rolled it back)
            raise Definite(type(e).__name__) from e
        raise Indefinite(type(e).__name__) from e  # a server-side system error
    except kex.ZookeeperStoppedError as e:
        raise Definite("client stopped") from e
    except (kex.KazooException, ForceRetryError, OSError) as e:
        # CancelledError, RetryFailedError, ... and a recipe asked to retry (its znode
        # vanished under it): we cannot tell what was applied
        raise Indefinite(type(e).__name__) from e


# -- bounded blocking calls --------------------------------------------------------------


@dataclass
class Deadline:
    """When the op that the worker's thread is running must be over.

    kazoo's own threads (connection, callbacks) are never cut short: only the thread
    that opened the deadline is."""

    owner: int | None = None
    until: float | None = None  # results (requests) give up here
    wait_until: float | None = None  # events (the recipe's wait) give up here

    @contextlib.contextmanager
    def of(self, seconds: float) -> Iterator[None]:
        now = time.monotonic()
        self.owner = threading.get_ident()
        self.until, self.wait_until = now + seconds, now + seconds * WAIT_SHARE
        try:
            yield
        finally:
            self.owner = self.until = self.wait_until = None

    def cap(self, timeout: float | None, until: float | None) -> float | None:
        if until is None or threading.get_ident() != self.owner:
            return timeout
        left = max(0.0, until - time.monotonic())
        return left if timeout is None else min(timeout, left)


class BoundedResult(AsyncResult):
    def __init__(self, handler: Any, deadline: Deadline) -> None:
        super().__init__(handler)
        self.deadline = deadline

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return super().get(block, self.deadline.cap(timeout, self.deadline.until))


class BoundedEvent(threading.Event):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(self.deadline.cap(timeout, self.deadline.wait_until))


class BoundedHandler(SequentialThreadingHandler):
    """kazoo's threading handler, whose results and events respect a `Deadline`."""

    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def async_result(self) -> BoundedResult:
        return BoundedResult(self, self.deadline)

    def event_object(self) -> BoundedEvent:
        return BoundedEvent(self.deadline)


class CallOnce:
    """A retry policy for the recipe that does not retry (see the module docstring)."""

    deadline: float | None = None

    def copy(self) -> CallOnce:
        return CallOnce()

    def __call__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)


# -- the client ---------------------------------------------------------------------------


@dataclass
class Held:
    lock: Lock
    lease: Lease
    session: int | None  # the session that created the znode


@dataclass(frozen=True)
class Leftover:
    """A znode name prefix under `path` that may still exist and must be deleted."""

    path: str
    prefix: str


@dataclass
class KazooLockClient:
    """The `LockClient` of every zookeeper backend: one kazoo session serves all keys
    (a worker holds one lock at a time); a fresh recipe `Lock` per acquire."""

    zk: KazooClient
    deadline: Deadline
    session_ms: int
    ttl_ms: int
    op_timeout_s: float
    drift: float = 0.01
    listen: str | None = "suspended"
    trust_flag: bool = False
    fence: str = "czxid"
    identifier: str = ""
    members: Mapping[str, str] = field(default_factory=dict)  # "address:port" -> node name
    held: dict[str, Held] = field(default_factory=dict)
    leftovers: list[Leftover] = field(default_factory=list)
    drops: int = 0  # connection drops seen (SUSPENDED or LOST)
    session: int | None = None  # the session id while connected
    assured: set[str] = field(default_factory=set)  # lock paths known to exist
    _mu: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.zk.add_listener(self._on_state)
        cid = self.zk.client_id  # connected before the listener was there
        self.session = cid[0] if cid else None

    # kazoo calls this from its connection thread: only set flags here
    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            cid = self.zk.client_id
            self.session = cid[0] if cid else None
            return
        self.drops += 1
        if self.listen == "suspended" or (self.listen == "lost" and state == KazooState.LOST):
            with self._mu:
                for h in self.held.values():
                    h.lease.lost = True

    def _dropped_since(self, drops: int) -> bool:
        # kazoo fails pending requests before it calls the listeners, so look at the
        # live flag too: one of the two has moved if the connection dropped meanwhile
        return self.drops != drops or not self.zk.connected

    def _require_connected(self) -> None:
        if not self.zk.connected:
            raise Definite("not connected")  # nothing is sent while reconnecting

    def member(self) -> tuple[str, ...]:
        """The member this session is connected to right now, by node name (none if
        not connected or not named)."""
        sock = getattr(self.zk._connection, "_socket", None)
        try:
            address, port = sock.getpeername()[:2] if sock is not None else (None, None)
        except OSError:
            return ()
        name = self.members.get(f"{address}:{port}")
        return (name,) if name else ()

    @staticmethod
    def path(key: str) -> str:
        return f"{LOCKS_ROOT}/{key}"

    def _clean_leftovers(self) -> None:
        """Delete the znodes of failed acquires and releases (best effort, in budget)."""
        keep = []
        for lo in self.leftovers:
            try:
                self.zk.sync(lo.path)  # the member we talk to has seen every earlier write
                for child in self.zk.get_children(lo.path):
                    if child.startswith(lo.prefix):
                        with contextlib.suppress(kex.NoNodeError):
                            self.zk.delete(f"{lo.path}/{child}")
            except kex.NoNodeError:
                pass
            except (kex.KazooException, KazooTimeoutError):
                keep.append(lo)
        self.leftovers = keep

    def acquire(self, key: str) -> Lease | None:
        self._require_connected()
        t0 = time.monotonic_ns()
        path = self.path(key)
        with self.deadline.of(self.op_timeout_s), mapped_errors():
            if self.leftovers:
                self._clean_leftovers()
            drops, session = self.drops, self.session
            lock = Lock(self.zk, path, self.identifier)
            lock._retry = CallOnce()
            lock.assured_path = path in self.assured
            try:
                got = lock.acquire(blocking=True, timeout=self.op_timeout_s * WAIT_SHARE)
                self.assured.add(path)
                if not got:  # not with blocking=True and CallOnce, but the recipe may
                    raise kex.LockTimeout("not acquired")
                fence = self._fence(path, lock)
            except kex.LockTimeout:
                self.assured.add(path)
                if self._dropped_since(drops):
                    # the recipe's clean-up of our contender may have been cut off
                    self.leftovers.append(Leftover(path, lock.prefix))
                    raise kex.ConnectionLoss("connection dropped while giving up") from None
                raise
            except BaseException:
                self.leftovers.append(Leftover(path, lock.prefix))
                raise
        lease = Lease(key=key, token=str(lock.node), fence=fence, ttl_ms=self.ttl_ms,
                      valid_until_ns=FOREVER_NS if self.trust_flag else
                      lease_deadline(t0, self.session_ms, self.drift),
                      granted_by=self.member())
        with self._mu:
            self.held[lease.token] = Held(lock, lease, session)
            if self.listen == "suspended" and self._dropped_since(drops):
                lease.lost = True  # SUSPENDED while we were being granted it
        return lease

    def _fence(self, path: str, lock: Lock) -> int:
        node = str(lock.node)
        if self.fence == "sequence":
            return int(node[-10:])
        stat = self.zk.exists(f"{path}/{node}")
        if stat is None:  # granted, then gone before we could look (session expired)
            raise Indefinite("granted znode vanished")
        return int(stat.czxid)

    def renew(self, lease: Lease) -> None:
        h = self.held[lease.token]
        if self.trust_flag:
            # what code that trusts the recipe sees: a flag only release() resets
            if lease.lost or not h.lock.is_acquired:
                raise NotOwner("not-owner")
            lease.granted_by = ()  # no member was asked
            return
        self._require_connected()
        t0 = time.monotonic_ns()
        node = f"{self.path(lease.key)}/{lease.token}"
        with self.deadline.of(self.op_timeout_s), mapped_errors():
            self.zk.sync(node)  # read what the leader has, not a lagging member's view
            stat = self.zk.exists(node)
        if stat is None or stat.ephemeralOwner != h.session:
            raise NotOwner("not-owner")
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.session_ms, self.drift))
        lease.granted_by = self.member() or lease.granted_by

    def release(self, lease: Lease) -> None:
        with self._mu:
            self.held.pop(lease.token)
        path = self.path(lease.key)
        # No "not connected" short cut here: while kazoo reconnects, the delete waits in
        # its queue and goes out on the same session, so it may still take effect
        try:
            with self.deadline.of(self.op_timeout_s), mapped_errors():
                self.zk.delete(f"{path}/{lease.token}")
        except Indefinite:
            # it may never arrive (dropped with the connection) while the session
            # lives on: make sure before the next acquire
            self.leftovers.append(Leftover(path, lease.token))
            raise

    def close(self) -> None:
        """End the session (the server deletes its ephemeral znodes). kazoo waits up to
        10 s for a server that does not answer; we give it CLOSE_WAIT_S and go: the
        server then expires the session one timeout later, as after a crash."""
        def stop() -> None:
            with contextlib.suppress(Exception):
                self.zk.stop()
            with contextlib.suppress(Exception):
                self.zk.close()

        t = threading.Thread(target=stop, name="kazoo-close", daemon=True)
        t.start()
        t.join(CLOSE_WAIT_S)


def connect(hosts: Sequence[str], session_ms: int) -> tuple[KazooClient, Deadline]:
    """A started client (or one still connecting: ops fail as "not connected" until
    it is up), reconnecting quickly after a heal."""
    deadline = Deadline()
    zk = KazooClient(
        hosts=",".join(hosts), timeout=session_ms / 1000.0, handler=BoundedHandler(deadline),
        # reconnect forever, but never sleep long between rounds: heals must be quick
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5),
        command_retry=KazooRetry(max_tries=1))
    zk.start_async().wait(CONNECT_WAIT_S)
    return zk, deadline


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One session (one KazooClient, connected to every member) serves every key."""
    o = opts.options
    session_ms = int(config["session_timeout_ms"])
    hosts = [str(h) for h in config["hosts"]]
    zk, deadline = connect(hosts, session_ms)
    client = KazooLockClient(
        zk, deadline, session_ms=session_ms, ttl_ms=opts.ttl_ms,
        op_timeout_s=opts.op_timeout_s, drift=opts.drift,
        listen=o.get("listen", "suspended"), trust_flag=bool(o.get("trust_flag", False)),
        fence=str(o.get("fence", "czxid")), identifier=f"worker-{opts.worker}",
        members=dict(zip(hosts, (str(n) for n in config.get("names", ())), strict=False)))
    return {k: client for k in keys}
