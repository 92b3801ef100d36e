"""The `settlement` workload: the payments case, with PostgreSQL as the resource.

Each lock name is one merchant-day (`settle:m3:2026-09-16`); each must be settled
exactly once. Every worker runs the same scheduler: pick a merchant, ask the store
which of its days is the next one still pending (the `schedule` op, outside any lock),
and run that day's job, as every pod's scheduler fires at 02:00 for the same day.

The job takes the merchant-day's lock, reads the row; if it is still pending, it does
the work (`--hold-ms`) and then settles it in one transaction: a payment row and the
settlement marked paid. Between the read and the write the lock is all that keeps a
second worker out, so a paused holder that wakes up after its lease expired settles
again, unless a layer underneath stops it. `--resource` picks the layers:

* `unfenced`: the lock only;
* `fenced`: the lock and its fence (`UPDATE settlements ... WHERE fence < $f`: "0
  rows updated: the stale writer is silently rejected");
* `idempotent`: both, and an idempotency key (a unique constraint on the payment's
  merchant-day: a second payment is a constraint violation, not a second transfer);
* `row-lock`: the database's own lock instead of the fence: the job reads the row
  `FOR UPDATE` in the transaction that settles it, so a second run waits for the first
  to commit and then reads the day as paid;
* `version`: an optimistic check instead of the fence: the job reads the row's version
  and settles with `UPDATE ... WHERE version = $read` (0 rows: someone settled it
  since).

The last two use no fence: with `--backend memory-no-lock` (every acquire granted)
they show what the database does with no distributed lock in front at all.

The server runs on the first client host, reachable only through a Unix socket, so no
partition cuts a client off from it, and it goes with the run's namespaces. Its
rows at the end go to `settlements.json` in the run's folder, and the payments per
merchant-day into the history (the settlement checker's ground truth).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.errors as pe

from lockcheck.db.postgres import OS_USER, PostgresServer, conninfo
from lockcheck.locks.api import Definite, Indefinite
from lockcheck.workloads.api import KeyPlan, Outcome, Reason, ResourceContext, Section

if TYPE_CHECKING:
    from lockcheck.spec import TestSpec
    from lockcheck.workloads.worker import Worker

log = logging.getLogger("lockcheck.settlement")

FIRST_DAY = datetime.date(2026, 9, 16)
MODES = ("idempotent", "fenced", "unfenced", "row-lock", "version")
SCHEMA = """
CREATE TABLE settlements (
  merchant text NOT NULL, day date NOT NULL, status text NOT NULL DEFAULT 'pending',
  fence bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (merchant, day));
CREATE TABLE payments (
  id bigserial PRIMARY KEY, merchant text NOT NULL, day date NOT NULL,
  fence bigint, process bigint NOT NULL, idempotency_key text UNIQUE);
"""


def plan(spec: TestSpec) -> KeyPlan:
    """`--keys` merchants, one lock per merchant per day, more days than a run can
    settle (a day takes at least the shortest hold)."""
    per_day_s = max(spec.hold_ms[0], 20) / 1000
    days = min(5000, math.ceil(spec.time_limit / per_day_s) + 2)
    names = [f"settle:m{m}:{FIRST_DAY + datetime.timedelta(days=d)}"
             for m in range(spec.keys) for d in range(days)]
    return KeyPlan(names, {"merchants": spec.keys, "days": days},
                   recovery=[names[m * days] for m in range(spec.keys)])


def pick(worker: Worker) -> str:
    """The scheduler: a random merchant's next pending day (asked of the store)."""
    merchants = int(worker.cfg.key_params["merchants"])
    days = int(worker.cfg.key_params["days"])
    m = worker.rng.randrange(merchants)
    store: SettlementClient = worker.resource
    out = worker.call("schedule", f"settle:m{m}", {},
                      lambda process: Outcome("ok", {"day": store.next_day(f"m{m}")}))
    day = out.value.get("day") if out.type == "ok" and isinstance(out.value, dict) else None
    if day is None:  # all settled, or the store did not answer: any day of it
        return worker.cfg.keys[m * days + worker.rng.randrange(days)]
    offset = (datetime.date.fromisoformat(str(day)) - FIRST_DAY).days
    return worker.cfg.keys[m * days + max(0, min(days - 1, offset))]


def merchant_day(key: str) -> tuple[str, str]:
    """`settle:m3:2026-09-16` -> ("m3", "2026-09-16")."""
    _, merchant, day = key.split(":", 2)
    return merchant, day


class SettlementStore:
    """The resource: a PostgreSQL server with the settlements and payments tables."""

    def __init__(self, ctx: ResourceContext) -> None:
        if ctx.host is None:
            raise ValueError("the settlement store needs a client host to run on")
        if ctx.mode not in MODES:
            raise ValueError(f"settlement: --resource must be one of {', '.join(MODES)}")
        self.ctx = ctx
        self.server = PostgresServer(ctx.host, tcp=False, max_connections=ctx.clients + 10)

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(**conninfo(self.server.host, self.server.port,
                                          application_name="lockcheck-settlement"),
                               autocommit=True)

    def start(self) -> SettlementStore:
        self.server.init()
        self.server.start()
        with self._connect() as c:
            c.execute(SCHEMA)
            for key in self.ctx.keys:
                c.execute("INSERT INTO settlements (merchant, day) VALUES (%s, %s)",
                          merchant_day(key))
        return self

    def stop(self) -> None:
        try:
            if self.server.alive():
                self.snapshot()
        finally:
            self.server.stop()
            for p in self.server.log_files():
                self.server.node.fetch(p, self.ctx.run_dir / "resource" / p.name)

    def snapshot(self) -> None:
        """What the tables say at the end: the ground truth beside the history."""
        with self._connect() as c:
            rows = c.execute("SELECT merchant, day::text, status, fence FROM settlements "
                             "ORDER BY merchant").fetchall()
            pays = c.execute("SELECT merchant, day::text, fence, process FROM payments "
                             "ORDER BY id").fetchall()
        counts: dict[str, int] = {k: 0 for k in self.ctx.keys}
        for merchant, day, _, _ in pays:
            key = f"settle:{merchant}:{day}"
            counts[key] = counts.get(key, 0) + 1
        if self.ctx.record is not None:  # the ground truth, for the settlement checker
            self.ctx.record({"process": "resource", "type": "event", "f": "final-state",
                             "value": {"mode": self.ctx.mode, "payments": counts}})
        out = {"mode": self.ctx.mode,
               "settlements": [dict(zip(("merchant", "day", "status", "fence"), r,
                                        strict=True)) for r in rows],
               "payments": [dict(zip(("merchant", "day", "fence", "process"), r,
                                     strict=True)) for r in pays]}
        (self.ctx.run_dir / "settlements.json").write_text(json.dumps(out, indent=1) + "\n")

    def worker_config(self) -> dict[str, Any]:
        return {"host": self.server.host, "port": self.server.port, "mode": self.ctx.mode}


def start_store(ctx: ResourceContext) -> SettlementStore:
    return SettlementStore(ctx)


class SettlementClient:
    """A worker's session with the store; every statement within the op timeout."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float) -> None:
        self.config, self.timeout_s = dict(config), timeout_s
        self.mode = str(config["mode"])
        self.conn: psycopg.Connection[Any] | None = None

    def _session(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            ms = max(1, int(self.timeout_s * 1000))
            try:
                self.conn = psycopg.connect(
                    host=self.config["host"], port=self.config["port"], user=OS_USER,
                    dbname="postgres", connect_timeout=max(1, round(self.timeout_s)),
                    options=f"-c statement_timeout={ms}", application_name="lockcheck")
            except psycopg.OperationalError as e:
                raise Definite(f"store: {str(e)[:60]}") from e  # nothing was sent
        return self.conn

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def next_day(self, merchant: str) -> str | None:
        try:
            with self._session().transaction():
                row = self._session().execute(
                    "SELECT min(day)::text FROM settlements WHERE merchant = %s AND "
                    "status = 'pending'", (merchant,)).fetchone()
        except psycopg.Error as e:
            self._drop()
            raise Definite(f"store: {type(e).__name__}") from e
        return None if row is None else row[0]

    def read(self, key: str) -> dict[str, Any]:
        """The row as the job sees it. In `row-lock` the read takes the row's lock and
        leaves its transaction open: `settle` commits it, `abandon` rolls it back."""
        merchant, day = merchant_day(key)
        self.abandon()  # a transaction a job left open is not this one's
        c = self._session()
        try:
            if self.mode == "row-lock":
                row = c.execute(
                    "SELECT status, fence, version FROM settlements WHERE merchant = %s AND "
                    "day = %s FOR UPDATE", (merchant, day)).fetchone()
            else:
                with c.transaction():
                    row = c.execute(
                        "SELECT status, fence, version FROM settlements WHERE merchant = %s "
                        "AND day = %s", (merchant, day)).fetchone()
        except psycopg.Error as e:
            self._drop()
            raise Definite(f"store: {type(e).__name__}") from e  # a read changes nothing
        if row is None:
            self.abandon()
            raise Definite(f"store: no settlement row for {key}")
        out = {"status": row[0], "fence": row[1], "version": row[2]}
        if self.mode == "row-lock":
            out["row_locked"] = True
        return out

    def abandon(self) -> None:
        """End a `row-lock` read's transaction without settling (the day was paid)."""
        if self.conn is not None and not self.conn.closed and \
                self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                self.conn.rollback()
            except psycopg.Error:
                self._drop()

    def settle(self, key: str, fence: int | None, process: int,
               version: int | None = None) -> Outcome:
        """One transaction: mark paid (fenced in `fenced` and `idempotent`; on the
        version read in `version`; under the row lock the read took in `row-lock`) and
        record a payment (with the merchant-day as its idempotency key in
        `idempotent`)."""
        merchant, day = merchant_day(key)
        value: dict[str, Any] = {"fence": fence}
        fenced = self.mode in ("fenced", "idempotent")
        idem = f"{merchant}:{day}" if self.mode == "idempotent" else None
        c = self._session()
        if self.mode == "row-lock" and \
                c.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
            # the read's transaction is gone (its session was lost): the row lock with it
            self._drop()
            return Outcome("fail", value, "row-lock-lost")
        try:
            with c.transaction():
                if self.mode == "version":
                    value["version"] = version
                    row = c.execute(
                        "UPDATE settlements SET status = 'paid', fence = %s, version = "
                        "version + 1 WHERE merchant = %s AND day = %s AND version = %s "
                        "RETURNING version", (fence or 0, merchant, day, version)).fetchone()
                    if row is None:  # 0 rows: settled (or changed) since the read
                        raise _Rejected("stale-version")
                elif fenced:
                    row = c.execute(
                        "UPDATE settlements SET status = 'paid', fence = %s WHERE merchant = "
                        "%s AND day = %s AND fence < %s RETURNING fence",
                        (fence, merchant, day, fence)).fetchone() if fence is not None else None
                    if row is None:  # 0 rows: the stale writer is silently rejected
                        raise _Rejected("stale-fence")
                else:
                    c.execute("UPDATE settlements SET status = 'paid', fence = %s WHERE "
                              "merchant = %s AND day = %s",
                              (fence or 0, merchant, day))
                c.execute("INSERT INTO payments (merchant, day, fence, process, "
                          "idempotency_key) VALUES (%s, %s, %s, %s, %s)",
                          (merchant, day, fence, process, idem))
            if self.mode == "row-lock":  # the block above was a savepoint in the read's
                c.commit()  # transaction, which this commit ends with the row lock
        except _Rejected as r:
            return Outcome("fail", value, r.reason)
        except pe.UniqueViolation:
            return Outcome("fail", value, "duplicate-payment")
        except pe.QueryCanceled as e:
            self._drop()
            raise Indefinite("store: statement timeout") from e
        except psycopg.OperationalError as e:
            self._drop()
            raise Indefinite(f"store: {str(e)[:60]}") from e  # the commit may have landed
        except psycopg.Error as e:
            self._drop()
            raise Indefinite(f"store: {type(e).__name__}") from e
        return Outcome("ok", value)

    def close(self) -> None:
        self._drop()


class _Rejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def body(section: Section) -> Reason:
    """Read; if still pending, do the work and settle. No look at the lease clock
    before the write: the layers underneath are on trial (as in `fenced`)."""
    store: SettlementClient = section.resource
    key = section.key

    def read(process: int) -> Outcome:
        return Outcome("ok", store.read(key))

    seen = section.call("read", {}, read)
    if seen.type != "ok":
        return "indefinite" if seen.type == "info" else None
    if seen.value["status"] == "paid":
        store.abandon()
        return None  # settled already: this run of the job has nothing to do
    reason = section.work(section.hold_time(), watch_clock=False)
    if reason is not None:
        store.abandon()
        return reason
    fence, version = section.fence, seen.value.get("version")
    out = section.call("settle", {"fence": fence},
                       lambda process: store.settle(key, fence, process, version))
    return "indefinite" if out.type == "info" else None
