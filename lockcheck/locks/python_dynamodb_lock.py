"""python-dynamodb-lock's `DynamoDBLockClient`, unmodified, on the dynamodb backend's dynalite.

The library (a Python port of awslabs' Java dynamodb-lock-client) keeps one item per
lock in its own table (partition key `lock_key`, sort key `sort_key`), which the
adapter makes once with the library's `create_dynamodb_table`, tolerating a table that
exists and dynalite's missing `UpdateTimeToLive` (the TTL attribute is for clean-up
only; no lock relies on it). Used as its README shows: one `DynamoDBLockClient` per
worker on a boto3 resource, `acquire_lock(key, app_callback=...)`, `release_lock`,
`close()`.

* `acquire_lock` waits: it reads the item every `retry_period` (the heartbeat period)
  and takes it when it is absent, or over when its record version number (RVN) has
  stood unchanged for the lease on this waiter's monotonic clock; past `retry_timeout`
  it raises ACQUIRE_TIMEOUT (recorded as busy). The adapter keeps the library's
  default `retry_timeout` (lease + heartbeat), as its docs advise ("higher than the
  lease_duration"): a shorter one never sees an RVN stand for a lease, and then no
  abandoned lock is ever taken over (the `retry_timeout_ms` option; the
  `python-dynamodb-lock-try` adapter sets it to 1 ms, a try that never waits).
* A daemon thread heartbeats every `heartbeat_period` with a new RVN; another checks
  every `heartbeat_period` that the last heartbeat is less than `safe_period` old. The
  lease is lockcheck's TTL (`--ttl-ms`), the heartbeat TTL/3 (the library's defaults
  are 30 s and 5 s; its docs advise a heartbeat at least 4 times shorter than the
  lease, lockcheck renews every TTL/3 in every client), and `safe_period` 2/3 of the
  lease, the proportion of its defaults (20 s of 30 s).
* The holder trusts the library: its lease never ends on its own (`FOREVER_NS`), and
  `renew()` does nothing (recorded as refused, `NO_RENEW`, so that no checker takes it
  for a renewal the server confirmed). The library tells the app through
  `app_callback`: the adapter passes one that marks the lease lost on LOCK_STOLEN (a
  heartbeat refused) and LOCK_IN_DANGER (no heartbeat for `safe_period`). The option
  `callback: False` (`python-dynamodb-lock-no-callback`) passes none, the library's
  default: the library then submits `None` to its executor, and nothing tells the
  holder.
* botocore's retries are left as in the library's documented use, a plain
  `boto3.resource("dynamodb")`: botocore's default, standard mode with 3 attempts
  (set explicitly here, so that an environment's AWS_RETRY_MODE changes nothing),
  with connect and read timeouts of `op_timeout_s` and no proxy.

Errors, in one place (`mapped_errors`): the library wraps every botocore error in
`DynamoDBLockError(UNKNOWN, str(e))` and keeps the original as the exception's context,
which is mapped as the backend's own client maps it (`lockcheck.locks.dynamodb`); a
refused release (LOCK_STOLEN, LOCK_NOT_OWNED) is NotOwner; CLIENT_SHUTDOWN is
Definite. No fence: the RVN changes at every heartbeat, and the library has none.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import botocore.exceptions as bx
from python_dynamodb_lock.python_dynamodb_lock import (
    DynamoDBLockClient,
    DynamoDBLockError,
)

from lockcheck.locks import dynamodb as lc_ddb
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, LockClient, NotOwner

TABLE = "DynamoDBLockTable"  # the library's default table and key names
FOREVER_NS = 2**63 - 1  # the holder trusts the library's threads and callback
NO_RENEW = "the library's heartbeat thread renews"
LOST_CODES = ("LOCK_STOLEN", "LOCK_IN_DANGER")
_made: set[str] = set()  # endpoints whose lock table this process has made


@contextmanager
def mapped_errors() -> Iterator[None]:
    """What the library raises, as Definite, Indefinite or NotOwner (ACQUIRE_TIMEOUT,
    a busy lock, is the caller's to handle: `acquire` turns it into None)."""
    try:
        yield
    except DynamoDBLockError as e:
        raise _kind(e) from e


def _kind(e: Any) -> Definite | Indefinite:
    code = getattr(e, "code", DynamoDBLockError.UNKNOWN)
    if code in (DynamoDBLockError.LOCK_STOLEN, DynamoDBLockError.LOCK_NOT_OWNED):
        return NotOwner("not-owner")
    if code == DynamoDBLockError.CLIENT_SHUTDOWN:
        return Definite("client shut down")
    # UNKNOWN: the library raised it while handling botocore's error, its context
    cause = e.__cause__ or e.__context__
    if isinstance(cause, Exception):
        try:
            with lc_ddb.mapped_errors():
                raise cause
        except (Definite, Indefinite) as mapped:
            return mapped
        except Exception:
            pass
    return Indefinite(lc_ddb._short(f"{code}: {getattr(e, 'message', '')}"))


def dynamodb_resource(endpoint: str, timeout_s: float) -> Any:
    """A boto3 DynamoDB resource of one endpoint: fake credentials, botocore's default
    retries (standard, 3 attempts), connect and read timeouts, no proxy."""
    import boto3
    from botocore.config import Config

    config = Config(region_name=lc_ddb.REGION, connect_timeout=timeout_s,
                    read_timeout=timeout_s,
                    retries={"mode": "standard", "total_max_attempts": 3},
                    proxies={}, tcp_keepalive=False)
    session = boto3.session.Session(aws_access_key_id=lc_ddb.ACCESS_KEY,
                                    aws_secret_access_key=lc_ddb.SECRET_KEY,
                                    region_name=lc_ddb.REGION)
    return session.resource("dynamodb", endpoint_url=endpoint, config=config)


def create_table(endpoint: str) -> None:
    """The library's table, with its own helper; an existing table is kept, and
    dynalite's refusal of UpdateTimeToLive (after the table is made) is ignored."""
    if endpoint in _made:
        return
    ddb = lc_ddb.dynamodb_client(endpoint, 10.0)
    try:
        DynamoDBLockClient.create_dynamodb_table(ddb, table_name=TABLE)
    except bx.ClientError as e:
        code = e.response.get("Error", {}).get("Code")
        if code not in ("ResourceInUseException", "UnknownOperationException"):
            raise
    finally:
        ddb.close()
    _made.add(endpoint)


class PythonDynamoDBLockClient:
    """One `DynamoDBLockClient` per worker, shared by every lock name."""

    def __init__(self, endpoint: str, *, ttl_ms: int, op_timeout_s: float,
                 callback: bool = True, retry_timeout_ms: int | None = None) -> None:
        lease = datetime.timedelta(milliseconds=ttl_ms)
        self.ttl_ms = ttl_ms
        self.library = DynamoDBLockClient(
            dynamodb_resource(endpoint, op_timeout_s), table_name=TABLE,
            lease_duration=lease, heartbeat_period=lease / 3, safe_period=lease * 2 / 3)
        self.callback = callback
        self.retry_timeout = (None if retry_timeout_ms is None
                              else datetime.timedelta(milliseconds=retry_timeout_ms))
        self.locks: dict[str, Any] = {}  # token -> DynamoDBLock
        self.leases: dict[int, Lease] = {}  # id(DynamoDBLock) -> its lease
        self.told: dict[int, str] = {}  # id(DynamoDBLock) -> the first code it was told
        self.guard = threading.Lock()

    def _told(self, code: str, lock: Any) -> None:
        """The app callback (on the library's executor thread)."""
        if code not in LOST_CODES:
            return
        with self.guard:
            self.told.setdefault(id(lock), code)
            lease = self.leases.get(id(lock))
        if lease is not None:
            lease.lost = True

    def acquire(self, key: str) -> Lease | None:
        try:
            with mapped_errors():
                try:
                    lock = self.library.acquire_lock(
                        key, retry_timeout=self.retry_timeout,
                        app_callback=self._told if self.callback else None)
                except DynamoDBLockError as e:
                    if getattr(e, "code", None) == DynamoDBLockError.ACQUIRE_TIMEOUT:
                        return None  # held all along (or never seen unchanged a lease)
                    raise
        except NotOwner as e:  # the library raises no such code on acquire
            raise Definite(str(e)) from e
        token = f"{lock.record_version_number}"
        lease = Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                      valid_until_ns=FOREVER_NS)
        with self.guard:
            self.locks[token] = lock
            self.leases[id(lock)] = lease
            lease.lost = id(lock) in self.told
        return lease

    def renew(self, lease: Lease) -> None:
        # the library's users do nothing here: its thread renews, its callback tells
        raise Definite(NO_RENEW)

    def release(self, lease: Lease) -> None:
        lock = self.locks.pop(lease.token)
        with self.guard:
            self.leases.pop(id(lock), None)
            self.told.pop(id(lock), None)
        with mapped_errors():
            self.library.release_lock(lock, best_effort=False)

    def close(self) -> None:
        self.library.close()  # stops the heartbeat threads; releases nothing


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker (the dynamodb backend's endpoint), shared by every name."""
    # the library logs every heartbeat at INFO and every lost race at WARNING
    logging.getLogger("python_dynamodb_lock").setLevel(logging.ERROR)
    endpoint = str(config["endpoint"])
    create_table(endpoint)
    o = opts.options
    retry = o.get("retry_timeout_ms")
    client = PythonDynamoDBLockClient(
        endpoint, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s,
        callback=bool(o.get("callback", True)),
        retry_timeout_ms=None if retry is None else int(retry))
    return {k: client for k in keys}
