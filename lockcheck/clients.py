"""Lock clients run against a backend's servers: `--client NAME` or `--client MODULE:FACTORY`.

A backend (`backends.py`) is a database and lockcheck's own client of it. `--client`
swaps the client and keeps the database, its faults and the checkers: either an
adapter shipped with lockcheck for a library people use (`CLIENTS`, listed by
`lockcheck backends`), or the user's own factory (`mypkg.locks:make_clients`, or a file:
`examples/inhouse_lock.py:make_clients`), with the signature of
`lockcheck.api.ClientFactory`.

Everything a user can get wrong here is refused with one line (exit 254): a module that
does not import, a name that is not callable, a factory that returns the wrong shape or
cannot use the backend's servers. A client worker wraps the clients so that an
exception the adapter does not map is recorded as `info` (the outcome is unknown) with
its class name (`UNMAPPED`), never a dead worker.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.errors import BadInput
from lockcheck.locks.api import (
    ClientFactory,
    ClientOptions,
    Indefinite,
    Lease,
    LockClient,
    LockClientError,
)

UNMAPPED = "unmapped "  # the error of an op whose exception the adapter did not map
METHODS = ("acquire", "renew", "release", "close")


@dataclass(frozen=True, kw_only=True)
class ClientAdapter:
    """An adapter shipped with lockcheck for a lock library, on a backend's servers."""

    name: str
    library: str  # the PyPI distribution
    client: str  # "module:factory", a ClientFactory
    backends: tuple[str, ...]  # the backends whose servers it uses; the first is the default
    description: str
    fence: str | None
    expect: str
    options: Mapping[str, Any] = field(default_factory=dict)
    unsafe: bool = False


def _adapter(**kw: Any) -> ClientAdapter:
    return ClientAdapter(**kw)


CLIENTS: dict[str, ClientAdapter] = {a.name: a for a in [
    _adapter(
        name="python-redis-lock", library="python-redis-lock",
        client="lockcheck.locks.python_redis_lock:make_clients", backends=("redis",),
        description="python-redis-lock's redis_lock.Lock (SET NX EX in whole seconds, "
                    "Lua release and extend), renewed by extend()",
        fence=None,
        expect="safe without faults; a holder paused past its expiry (client-pause) "
               "overlaps the next holder, and nothing fences it",
    ),
    _adapter(
        name="python-redis-lock-auto-renewal", library="python-redis-lock",
        client="lockcheck.locks.python_redis_lock:make_clients", backends=("redis",),
        description="redis_lock.Lock(auto_renewal=True): a daemon thread extends the "
                    "lock every 2/3 of its expiry; the holder trusts it and never renews",
        fence=None, options={"auto_renewal": True}, unsafe=True,
        expect="safe without faults; a partition makes the renewal thread's extend() "
               "fail, the thread dies without a word, the lock expires and another "
               "client takes it while the holder works on",
    ),
    _adapter(
        name="portalocker", library="portalocker",
        client="lockcheck.locks.portalocker_lock:make_clients", backends=("redis",),
        description="portalocker's RedisLock: held by being the one subscriber of a "
                    "pub/sub channel; a holder silent for 1 s is CLIENT KILLed; "
                    "loss reported by `lost`; its own fencing token (fencing=True)",
        fence="portalocker's fence_token: INCR of a counter key per channel at each grant",
        expect="safe without faults; a paused holder (client-pause) is killed and "
               "replaced, overlaps the next holder until it resumes and sees `lost`, and "
               "its stale write is refused by the fence",
    ),
    _adapter(
        name="redlock-py", library="redlock-py",
        client="lockcheck.locks.redlock_py:make_clients", backends=("redlock",),
        description="redlock-py's Redlock (SPSCommerce, 2016): SET NX PX on each master "
                    "in turn, elapsed time by the wall clock; a quorum reached with errors "
                    "raises (and keeps the lock); no renewal",
        fence=None, unsafe=True,
        expect="safe without faults; with a master down (kill) a grant on a quorum "
               "raises MultipleRedlockException and the keys stay: the caller was told "
               "no while it holds the lock; a paused holder (client-pause) overlaps",
    ),
    _adapter(
        name="pals", library="pals",
        client="lockcheck.locks.pals_lock:make_clients", backends=("postgres",),
        description="PALs (SQLAlchemy): a session pg_try_advisory_lock on a pooled "
                    "connection, held until unlocked or the session ends; no TTL",
        fence=None, unsafe=True,
        expect="safe without faults; a holder whose session is terminated (failover) "
               "keeps working while another client takes the lock, and only its release "
               "fails",
    ),
    _adapter(
        name="python-dynamodb-lock", library="python-dynamodb-lock",
        client="lockcheck.locks.python_dynamodb_lock:make_clients", backends=("dynamodb",),
        description="python-dynamodb-lock's DynamoDBLockClient (a port of awslabs' "
                    "Java client): a waiting acquire_lock takes over a record version "
                    "seen unchanged for the lease; heartbeat thread every TTL/3; loss "
                    "told through the app callback (LOCK_STOLEN, LOCK_IN_DANGER)",
        fence=None,
        expect="safe without faults; a holder paused past its lease (client-pause) "
               "overlaps the next one until the callback tells it, and nothing fences it",
    ),
    _adapter(
        name="python-dynamodb-lock-no-callback", library="python-dynamodb-lock",
        client="lockcheck.locks.python_dynamodb_lock:make_clients", backends=("dynamodb",),
        description="python-dynamodb-lock with app_callback=None, its default: "
                    "LOCK_STOLEN and LOCK_IN_DANGER reach nobody",
        fence=None, options={"callback": False}, unsafe=True,
        expect="safe without faults; a holder paused past its lease (client-pause) is "
               "never told it lost the lock and works on beside the next holder",
    ),
    _adapter(
        name="python-dynamodb-lock-try", library="python-dynamodb-lock",
        client="lockcheck.locks.python_dynamodb_lock:make_clients", backends=("dynamodb",),
        description="python-dynamodb-lock with a 1 ms retry_timeout (a try that does not "
                    "wait): no try sees a record version stand for a lease",
        fence=None, options={"retry_timeout_ms": 1},
        expect="safe under client-pause (no try ever takes a lock over); a holder that "
               "stops heartbeating without releasing keeps its lock from everyone until "
               "it comes back",
    ),
    _adapter(
        name="tooz", library="tooz",
        client="lockcheck.locks.tooz_lock:make_clients",
        backends=("redis", "zookeeper", "etcd", "postgres"),
        description="OpenStack tooz's coordinator.get_lock() through its redis, "
                    "zookeeper, etcd3gw or postgresql driver; heartbeat() renews",
        fence=None,
        expect="safe without faults; the holder trusts tooz's local `acquired` flag, so "
               "a paused holder (client-pause) overlaps the next one; on etcd a heartbeat "
               "after the lease expired still succeeds (tooz ignores refresh()'s -1); "
               "against stopped servers the redis and zookeeper drivers hang past the "
               "request timeout (client-check)",
    ),
    _adapter(
        name="consullock", library="consullock",
        client="lockcheck.locks.consullock_lock:make_clients", backends=("consul",),
        description="consullock's ConsulLockManager (wtsi-hgi): a session per acquire "
                    "(TTL = --ttl-ms, lock-delay 0, behavior delete), no renewal; "
                    "release(key) destroys the session that holds the key now",
        fence=None, unsafe=True,
        expect="safe without faults; a holder paused past its session (client-pause over "
               "2x TTL) wakes, releases by key and ends the next holder's session: a third "
               "client takes the lock while the second still works, and each release "
               "after that does the same (client-check: a non-owner's release frees it)",
    ),
    _adapter(
        name="consul-lock", library="consul-lock",
        client="lockcheck.locks.consul_lock_lib:make_clients", backends=("consul",),
        description="consul-lock's EphemeralLock (oysterbooks): a session per lock "
                    "(TTL = --ttl-ms, lock-delay 0, behavior delete), no renewal; "
                    "release() destroys its own session",
        fence=None,
        expect="safe without faults and under kill; a release after the session "
               "expired is reported as a success (client-check reports it)",
    ),
    _adapter(
        name="consulock", library="consulock",
        client="lockcheck.locks.consulock_lock:make_clients", backends=("consul",),
        description="consulock's ConsulLock (haarcuba): a session with a one-day TTL "
                    "(lock-delay 15 s, behavior release), no renewal, no loss detection",
        fence=None, unsafe=True,
        expect="safe without faults; a holder cut off from the servers (partition-holder) "
               "leaves its lock held for the session's day: the recovery phase fails",
    ),
]}


# libraries people use that no backend's stand-in can run honestly: `--client NAME` is
# refused by this "module:function" (called with the backend's name), with one line
# naming the call whose precondition the stand-in ignores
REFUSED: dict[str, str] = {"gcslock": "lockcheck.locks.gcs_contract:refuse_gcslock"}


# -- resolving --client -------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedClient:
    """What `--client` named, resolved in the controller; workers load it the same way."""

    text: str  # as given
    factory: str  # "module:attr"
    path: str | None = None  # a folder to put on sys.path first (a file, or the cwd)
    adapter: ClientAdapter | None = None

    @property
    def label(self) -> str:
        """A short name for run folders: the adapter, or the factory's module."""
        if self.adapter is not None:
            return self.adapter.name
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", self.factory.replace(":", "."))

    @property
    def options(self) -> Mapping[str, Any]:
        return self.adapter.options if self.adapter else {}

    def info(self) -> dict[str, Any]:
        """The client, for test.json and the report."""
        a = self.adapter
        version = None
        if a is not None:
            try:
                version = importlib.metadata.version(a.library)
            except importlib.metadata.PackageNotFoundError:
                version = "not installed"
        return {"name": self.label, "factory": self.factory, "path": self.path,
                "library": a.library if a else None, "version": version,
                "fence": a.fence if a else None, "shipped": a is not None}


def resolve_client(text: str, backend: str) -> ResolvedClient:
    """`--client` as a shipped adapter's name or MODULE:FACTORY, imported and checked to
    be callable; raises BadInput with one line."""
    if text in REFUSED:
        from lockcheck.registry import load

        load(REFUSED[text])(backend)
    adapter = CLIENTS.get(text)
    if adapter is not None:
        if backend not in adapter.backends:
            raise BadInput(f"client {text} runs against the servers of "
                           f"{', '.join(adapter.backends)}, not {backend} "
                           f"(use --backend {adapter.backends[0]})")
        r = ResolvedClient(text, adapter.client, None, adapter)
        try:
            load_factory(r)
        except BadInput as e:
            raise BadInput(f"client {text}: {e} (pip install '{adapter.library}', or "
                           "scripts/install --dev)") from None
        return r
    if ":" not in text:
        raise BadInput(f"--client {text!r}: give MODULE:FACTORY (mypkg.locks:make_clients, "
                       f"or a file: path/to/locks.py:make_clients) or one of "
                       f"{', '.join(CLIENTS)}")
    module, _, attr = text.rpartition(":")
    if not module or not attr.isidentifier():
        raise BadInput(f"--client {text!r}: give MODULE:FACTORY, e.g. mypkg.locks:make_clients")
    if module.endswith(".py") or "/" in module:
        file = Path(module).resolve()
        if not file.is_file():
            raise BadInput(f"--client {text!r}: no such file {module}")
        r = ResolvedClient(text, f"{file.stem}:{attr}", str(file.parent))
    else:
        r = ResolvedClient(text, f"{module}:{attr}", None)
        if not _importable(module):  # as `python -m` would: from the current folder
            r = ResolvedClient(text, r.factory, os.getcwd())
    load_factory(r)
    return r


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def load_factory(r: ResolvedClient) -> ClientFactory:
    """Import the factory (raises BadInput with the import error, one line)."""
    if r.path is not None and r.path not in sys.path:
        sys.path.append(r.path)  # after the installed packages: it must not shadow them
    module, _, attr = r.factory.partition(":")
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        raise BadInput(f"--client {r.text}: cannot import {module}: "
                       f"{type(e).__name__}: {_one_line(e)}") from None
    fn = getattr(mod, attr, None)
    if fn is None:
        raise BadInput(f"--client {r.text}: module {module} has no {attr}")
    if not callable(fn):
        raise BadInput(f"--client {r.text}: {module}.{attr} is not callable "
                       f"(a {type(fn).__name__}); it must be a ClientFactory")
    factory: ClientFactory = fn
    return factory


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def check_shape(clients: object, keys: Sequence[str], r: ResolvedClient) -> dict[str, Any]:
    """The factory's answer must map every lock name to an object with the client's
    methods; raises BadInput naming what is wrong."""
    where = f"--client {r.text}: the factory"
    if not isinstance(clients, Mapping):
        raise BadInput(f"{where} returned a {type(clients).__name__}; it must return a "
                       "mapping of each lock name to a LockClient")
    missing = [k for k in keys if k not in clients]
    if missing:
        raise BadInput(f"{where} returned no client for lock name(s) {', '.join(missing)}")
    for k in keys:
        lacks = [f"{m}()" for m in METHODS if not callable(getattr(clients[k], m, None))]
        if lacks:
            raise BadInput(f"{where} returned for {k!r} a {type(clients[k]).__name__} "
                           f"without {', '.join(lacks)}; see lockcheck.api.LockClient")
    return dict(clients)


def probe_factory(r: ResolvedClient, backend: str, config: Mapping[str, Any],
                  keys: Sequence[str], opts: ClientOptions) -> None:
    """Call the factory once in the controller with the backend's real servers: a
    factory that cannot use them (it looks for `endpoints` where the backend gives
    `masters`) or returns the wrong shape is refused before any worker starts."""
    factory = load_factory(r)
    try:
        clients = factory(config, keys, opts)
    except Exception as e:
        raise BadInput(f"--client {r.text} cannot use the servers of backend {backend} "
                       f"(its client config has {', '.join(sorted(config)) or 'nothing'}): "
                       f"{type(e).__name__}: {_one_line(e)}") from None
    try:
        check_shape(clients, keys, r)
    finally:
        close_all(clients)


def close_all(clients: object) -> None:
    if isinstance(clients, Mapping):
        for c in {id(c): c for c in clients.values()}.values():
            with contextlib.suppress(Exception):
                c.close()


# -- in the worker ------------------------------------------------------------------------


class MappedClient:
    """A user's client as the worker sees it: an exception that is not one of
    lockcheck's (Definite, Indefinite, NotOwner) becomes `Indefinite("unmapped Cls:
    message")`, recorded as info; its first traceback per class goes to the worker log."""

    def __init__(self, inner: LockClient, seen: set[str]) -> None:
        self.inner = inner
        self.seen = seen

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except (LockClientError, KeyboardInterrupt):
            raise
        except Exception as e:
            name = f"{type(e).__module__}.{type(e).__qualname__}".removeprefix("builtins.")
            if name not in self.seen:
                self.seen.add(name)
                print(f"{fn.__name__} raised {name}, which the client does not map "
                      "(recorded as info):", file=sys.stderr)
                traceback.print_exc(file=sys.stderr)
            raise Indefinite(f"{UNMAPPED}{name}: {_one_line(e)}"[:80]) from e

    def acquire(self, key: str) -> Lease | None:
        lease = self._call(self.inner.acquire, key)
        if lease is not None and not isinstance(lease, Lease):
            raise Indefinite(f"{UNMAPPED}acquire returned a {type(lease).__name__}, "
                             "not a Lease or None"[:80])
        return lease

    def renew(self, lease: Lease) -> None:
        self._call(self.inner.renew, lease)

    def release(self, lease: Lease) -> None:
        self._call(self.inner.release, lease)

    def close(self) -> None:
        self._call(self.inner.close)


def worker_clients(factory: str, path: str | None, config: Mapping[str, Any],
                   keys: Sequence[str], opts: ClientOptions) -> dict[str, LockClient]:
    """The clients of a worker run with `--client`: loaded as the controller did,
    each wrapped in a `MappedClient` (one wrapper per client object)."""
    r = ResolvedClient(factory, factory, path)
    clients = check_shape(load_factory(r)(config, keys, opts), keys, r)
    seen: set[str] = set()
    wrapped: dict[int, MappedClient] = {}
    return {k: wrapped.setdefault(id(c), MappedClient(c, seen)) for k, c in clients.items()}


def client_label(text: str) -> str:
    """`--client` as a short name for run folders (no import)."""
    if text in CLIENTS:
        return text
    module, _, attr = text.rpartition(":")
    if module.endswith(".py") or "/" in module:
        module = Path(module).stem
    return ResolvedClient(text, f"{module}:{attr}").label
