"""PostgreSQL locks through psycopg 3: a lease table, and session advisory locks.

psycopg has no lock helper; locks are SQL, so this module is the SQL people write.

* `lease-table` (`--backend postgres`): one row per lock name. A grant is an
  `INSERT ... ON CONFLICT DO UPDATE ... WHERE` the row is free or expired by the
  server's clock (`clock_timestamp()`, never the client's); the fence is the row's
  counter, incremented from the row itself under the row lock on every grant and kept
  across releases (a release marks the row free instead of deleting it, which would
  restart the counter). Renew and release name the owner token and the fence.
* `advisory` (`--backend postgres-advisory`): `pg_try_advisory_lock` on the worker's
  one autocommit session, the pattern of tooz and django-pglocks. No TTL and no fence:
  the lock lives as long as the session, and a client learns that its session ended
  only on its next query. Renewal asks `pg_locks` whether this session still holds it.
  The key is a stable 64-bit hash of the name, or (`postgres-advisory-hash`) Python's
  `hash(name) & 0x7FFFFFFF`, salted per process, so workers lock different keys.

Every statement runs in autocommit on one session per worker and is bounded by the op
timeout: the server cancels it (`statement_timeout`), and a watchdog shuts the socket
down if no reply came in time (libpq itself would wait for a paused server forever).
The connection is bounded too (libpq's own minimum is 2 s). After an unknown outcome
the session is dropped, so the next operation starts from a session in a known state.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Any

import psycopg

from lockcheck.db.postgres import LEASE_TABLE as TABLE
from lockcheck.db.postgres import conninfo
from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
  name text PRIMARY KEY,
  owner text,                       -- the grant's token; NULL when free
  fence bigint NOT NULL,            -- +1 on every grant, kept across releases
  expires_at timestamptz NOT NULL   -- by the server's clock
)
"""

# The fence comes from the row (l.fence + 1), computed after the row lock is taken: a
# nextval() in VALUES is evaluated before the conflict wait and can go backwards.
ACQUIRE = f"""
INSERT INTO {TABLE} AS l (name, owner, fence, expires_at)
VALUES (%(name)s, %(owner)s, 1, clock_timestamp() + %(ttl_ms)s * interval '1 ms')
ON CONFLICT (name) DO UPDATE
   SET owner = excluded.owner, fence = l.fence + 1,
       expires_at = clock_timestamp() + %(ttl_ms)s * interval '1 ms'
 WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp()
RETURNING l.fence
"""

RENEW = f"""
UPDATE {TABLE} SET expires_at = clock_timestamp() + %(ttl_ms)s * interval '1 ms'
 WHERE name = %(name)s AND owner = %(owner)s AND fence = %(fence)s
   AND expires_at > clock_timestamp()
RETURNING fence
"""

RELEASE = f"""
UPDATE {TABLE} SET owner = NULL
 WHERE name = %(name)s AND owner = %(owner)s AND fence = %(fence)s
RETURNING fence
"""

ADVISORY_ACQUIRE = "SELECT pg_try_advisory_lock(%(key)s)"
ADVISORY_RELEASE = "SELECT pg_advisory_unlock(%(key)s)"
# a bigint key shows in pg_locks as classid (high 32 bits), objid (low 32), objsubid 1
ADVISORY_HELD = """
SELECT EXISTS (SELECT 1 FROM pg_locks
                WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
                  AND objsubid = 1 AND classid::bigint = %(hi)s AND objid::bigint = %(lo)s)
"""

# SQLSTATE classes after which an autocommit statement may have been applied, or the
# session is gone with its outcome unknown. Any other error the server reports means
# the statement failed and its transaction rolled back.
UNSURE_CLASSES = {
    "08": "connection exception",
    "57": "operator intervention (query canceled, session terminated, shutdown)",
    "58": "system error (I/O) outside PostgreSQL",
    "XX": "internal error",
}
UNSURE_STATES = {
    "40003": "statement completion unknown",
    "25P03": "idle-in-transaction timeout: the session ends",
    "25P04": "transaction timeout: the session ends",
}


@contextmanager
def mapped_errors(*, sent: bool = True) -> Iterator[None]:
    """The one place psycopg's exceptions become Definite or Indefinite.

    `sent=False` while connecting: nothing of the operation has left the client yet.
    """
    try:
        yield
    except psycopg.Error as e:
        state = e.sqlstate
        if sent and (state is None or state[:2] in UNSURE_CLASSES or state in UNSURE_STATES):
            # no SQLSTATE: psycopg or libpq raised it (a lost connection, our deadline)
            raise Indefinite(_short(e)) from e
        raise Definite(_short(e)) from e
    except OSError as e:  # the watchdog's TimeoutError, a socket error
        raise (Indefinite if sent else Definite)(_short(e)) from e


def _short(e: BaseException) -> str:
    state = getattr(e, "sqlstate", None)
    if state in ("57014", "25P03", "25P04"):
        return "timeout"  # statement_timeout (or a cancel), a session timeout
    if state in ("57P01", "57P02"):
        return "terminated"  # pg_terminate_backend, or a shutdown
    # libpq's messages span lines ("... failed: FATAL:\n  the database system is ...")
    text = " ".join(str(e).split()) or type(e).__name__
    m = text.lower()
    if "refused" in m:
        return "connection refused"
    if "timeout" in m or "timed out" in m:
        return "timeout"
    if "terminating connection" in m:
        return "terminated"
    if any(w in m for w in ("starting up", "not yet accepting", "recovery mode",
                            "shutting down")):
        return "server not ready"
    if any(w in m for w in ("closed", "reset", "lost", "unexpectedly", "broken pipe")):
        return "connection lost"
    return text[:80]


class Cutoff:
    """Shuts a connection's socket down if the block outlives `seconds`.

    libpq then sees the connection end and psycopg raises; leaving the block, that
    error becomes a TimeoutError. The lock makes the cut and the end of the block
    mutually exclusive, so a socket is never cut once its descriptor may be reused.
    """

    def __init__(self, fd: int, seconds: float) -> None:
        self.fd, self.seconds = fd, seconds
        self.fired = False
        self._armed = True
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def _cut(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self.fired = True
            with suppress(OSError):
                s = socket.socket(fileno=os.dup(self.fd))
                try:
                    s.shutdown(socket.SHUT_RDWR)
                finally:
                    s.close()

    def __enter__(self) -> Cutoff:
        self._timer.start()
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._armed = False
        self._timer.cancel()
        if self.fired and isinstance(exc, psycopg.Error | OSError):
            raise TimeoutError(f"timeout: no reply within {self.seconds:g} s") from exc


def connect_within(params: Mapping[str, Any], seconds: float) -> psycopg.Connection[Any]:
    """psycopg.connect, given up after `seconds` (a late connection is closed)."""
    fut: Future[psycopg.Connection[Any]] = Future()

    def run() -> None:
        try:
            fut.set_result(psycopg.connect(**params, autocommit=True))
        except BaseException as e:
            fut.set_exception(e)

    threading.Thread(target=run, name="pg-connect", daemon=True).start()
    try:
        return fut.result(seconds)
    except TimeoutError:
        fut.add_done_callback(_close_late)
        raise TimeoutError(f"connect timeout ({seconds:g} s)") from None


def _close_late(fut: Future[psycopg.Connection[Any]]) -> None:
    if fut.exception() is None:
        fut.result().close()


class Session:
    """A worker's one autocommit session: reconnected when lost, every statement bounded."""

    def __init__(self, params: Mapping[str, Any], op_timeout_s: float) -> None:
        self.params, self.op_timeout_s = dict(params), op_timeout_s
        self.conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        self.close()
        with mapped_errors(sent=False):
            self.conn = connect_within(self.params, self.op_timeout_s)
        return self.conn

    def execute(self, sql: str, args: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The statement's first row (None: no row)."""
        conn = self._connection()
        try:
            with mapped_errors(), Cutoff(conn.fileno(), self.op_timeout_s) as cut:
                row = conn.execute(sql, args).fetchone()
        except Indefinite:
            self.close()  # its state is unknown: the next operation starts a new session
            raise
        if cut.fired:
            self.close()  # the reply came just as the socket was cut
        return row

    def close(self) -> None:
        if self.conn is not None:
            with suppress(Exception):
                self.conn.close()
            self.conn = None


def session_params(config: Mapping[str, Any], opts: ClientOptions) -> dict[str, Any]:
    op_ms = max(1, round(opts.op_timeout_s * 1000))
    return {
        **conninfo(str(config["host"]), int(config["port"]),
                   application_name=f"lockcheck-w{opts.worker}"),
        # libpq notices a dead peer within about the op timeout instead of minutes
        "keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1,
        "keepalives_count": 2, "tcp_user_timeout": op_ms,
        # the server gives up on a statement we stopped waiting for, so a request
        # whose outcome was recorded unknown stops taking effect soon after
        "options": f"-c statement_timeout={op_ms}",
    }


class LeaseTableClient:
    """A lease table: expiry by the server's clock, a fence per grant."""

    def __init__(self, session: Session, *, ttl_ms: int, drift: float) -> None:
        self.session, self.ttl_ms, self.drift = session, ttl_ms, drift

    def acquire(self, key: str) -> Lease | None:
        token = uuid.uuid4().hex
        t0 = time.monotonic_ns()
        row = self.session.execute(ACQUIRE, {"name": key, "owner": token,
                                             "ttl_ms": self.ttl_ms})
        if row is None:
            return None
        return Lease(key=key, token=token, fence=int(row[0]), ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease: Lease) -> None:
        t0 = time.monotonic_ns()
        row = self.session.execute(RENEW, {"name": lease.key, "owner": lease.token,
                                           "fence": lease.fence, "ttl_ms": self.ttl_ms})
        if row is None:
            raise NotOwner("not-owner")
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def release(self, lease: Lease) -> None:
        row = self.session.execute(RELEASE, {"name": lease.key, "owner": lease.token,
                                             "fence": lease.fence})
        if row is None:
            raise NotOwner("not-owner")

    def close(self) -> None:
        self.session.close()


def stable_key(name: str) -> int:
    """A signed 64-bit advisory key that every process derives alike."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big",
                          signed=True)


def python_hash_key(name: str) -> int:
    """The trap seen in the wild: str hashes are salted per process (PYTHONHASHSEED)."""
    return hash(name) & 0x7FFFFFFF


ADVISORY_KEYS: dict[str, Callable[[str], int]] = {"stable": stable_key,
                                                  "python-hash": python_hash_key}


class AdvisoryClient:
    """Session advisory locks: held while the session lives; no TTL, no fence.

    The lease clock is the harness's belief, renewed by each confirmation: the server
    itself never expires the lock, it only drops it with the session."""

    def __init__(self, session: Session, *, ttl_ms: int, drift: float,
                 key_of: Callable[[str], int]) -> None:
        self.session, self.ttl_ms, self.drift, self.key_of = session, ttl_ms, drift, key_of

    def acquire(self, key: str) -> Lease | None:
        t0 = time.monotonic_ns()
        row = self.session.execute(ADVISORY_ACQUIRE, {"key": self.key_of(key)})
        if row is None or not row[0]:
            return None
        return Lease(key=key, token=uuid.uuid4().hex, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease: Lease) -> None:
        t0 = time.monotonic_ns()
        k = self.key_of(lease.key)
        row = self.session.execute(ADVISORY_HELD, {"hi": (k >> 32) & 0xFFFFFFFF,
                                                   "lo": k & 0xFFFFFFFF})
        if row is None or not row[0]:
            raise NotOwner("not-owner")  # this session does not hold it (a new session)
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def release(self, lease: Lease) -> None:
        row = self.session.execute(ADVISORY_RELEASE, {"key": self.key_of(lease.key)})
        if row is None or not row[0]:
            raise NotOwner("not-owner")

    def close(self) -> None:
        self.session.close()


def create_schema(config: Mapping[str, Any], spec: object = None) -> None:
    """The lease table, once per run, from the controller (`Backend.options["setup"]`),
    before any worker starts: workers never race on DDL."""
    params = conninfo(str(config["host"]), int(config["port"]),
                      application_name="lockcheck-setup")
    with psycopg.connect(**params, autocommit=True) as c:
        c.execute(SCHEMA)


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One session per worker, shared by every lock name."""
    session = Session(session_params(config, opts), opts.op_timeout_s)
    kind = opts.options.get("lock", "lease-table")
    client: LockClient
    if kind == "advisory":
        key_of = ADVISORY_KEYS[str(opts.options.get("advisory_key", "stable"))]
        client = AdvisoryClient(session, ttl_ms=opts.ttl_ms, drift=opts.drift, key_of=key_of)
    else:
        client = LeaseTableClient(session, ttl_ms=opts.ttl_ms, drift=opts.drift)
    return {k: client for k in keys}
