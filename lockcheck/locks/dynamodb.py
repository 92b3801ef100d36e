"""DynamoDB locks with conditional writes, with boto3 (on dynalite, a DynamoDB stand-in).

lockcheck's own client, on the algorithm of awslabs' dynamodb-lock-client (and its
Python port): DynamoDB has no server time in its condition expressions, so expiry
cannot be the service's. One item per lock name in one table, made once per run
(`create_table`, `Backend.options["setup"]`):

* `name` (the key), `owner` (the grant's token, unique per grant; absent when free),
  `rvn` (the record version: a fresh UUID at every grant, renewal and release) and
  `fence` (a number).
* Acquire is one conditional UpdateItem: the owner is absent, or (a takeover) the
  record version is one this client has seen unchanged for a whole lease on its own
  monotonic clock. It sets the owner and a new version and `ADD`s 1 to the fence in
  the same write; the new fence comes back with `ReturnValues=UPDATED_NEW`. A refused
  write is followed by a consistent read of the item, whose version starts (or keeps)
  this client's timer: a holder renews every TTL/3 with a new version, so only a
  holder that stopped renewing for a whole TTL can be taken over. The timer starts
  when the read's reply is in, after the holder's write, which came after the invoke
  its lease counts from; so the holder's belief is over before a takeover is sent.
* Renewal is a conditional write on `owner = my token` with a new version; release
  removes the owner under the same condition and keeps the item, so the fence
  counter survives every release.
* The client believes it holds the lock for the TTL from the invoke of its acquire or
  renewal (`lease_deadline`).
* A refused condition (`ConditionalCheckFailedException`) is definite: busy on
  acquire, not-owner on renew and release. A request that may have reached the
  service and got no reply (a read timeout, a dropped connection, a 5xx) is
  indefinite. botocore's retries are off (one attempt), every request has connect
  and read timeouts, and proxy settings are ignored.

Variants (`options`):

* `expiry: "wallclock"` (`dynamodb-wallclock`): the common boto3 recipe. Each grant
  and renewal writes `expires_at = time.time() + TTL` from the client's wall clock,
  and an acquire takes the lock over when `expires_at < time.time()` on the taker's
  wall clock. A client whose clock runs ahead takes a held lock; one whose clock runs
  behind writes an expiry already in everyone else's past.
* `release: "delete"` (`dynamodb-release-delete`): release deletes the item, so the
  next grant's fence starts again at 1.
* `retries: "standard"` (`dynamodb-retries`): botocore's default retries (standard
  mode, 3 attempts). A grant whose reply was lost is sent again and refused by its own
  first attempt: the client reports busy (a definite failure) for a grant the service
  applied, and the lock is held by nobody's lease until a waiter takes it over.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import botocore.exceptions as bx

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)
from lockcheck.locks.takeover import Observations

TABLE = "lockcheck-locks"
REGION = "us-east-1"
# the stand-in checks no signature; fixed fake credentials keep boto3 from looking for
# real ones (environment, files, instance metadata)
ACCESS_KEY, SECRET_KEY = "lockcheck", "lockcheck"
CONDITION_FAILED = "ConditionalCheckFailedException"
NAMES = {"#o": "owner", "#v": "rvn", "#f": "fence", "#e": "expires_at"}
# botocore errors raised once the request may have gone out: no reply, a reply cut
# short, unreadable or failing its checksum, a body that failed half-way (a checksum
# error may also come before sending: counted as may-have-gone). Every other
# BotoCoreError is raised while botocore builds, signs or connects (its ConnectionError
# family: no connection was made), so nothing was sent
MAYBE_SENT = (bx.HTTPClientError, bx.ChecksumError, bx.FlexibleChecksumError,
              bx.IncompleteReadError, bx.AwsChunkedWrapperError,
              bx.CapacityNotAvailableError)


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place where what botocore raises becomes Definite, Indefinite or
    NotOwner (a refused condition: the caller turns it into busy on an acquire)."""
    try:
        yield
    except bx.ClientError as e:  # the service answered
        raise _reply_kind(e) from e
    except MAYBE_SENT as e:  # read timeout, connection closed, reply cut short
        raise Indefinite(_short(str(e))) from e
    except (bx.BotoCoreError, bx.MissingServiceIdError,
            bx.UndefinedModelAttributeError) as e:  # no connection, a bad request, ...
        raise Definite(_short(str(e))) from e
    except OSError as e:
        raise Indefinite(_short(str(e))) from e


def _reply_kind(e: bx.ClientError) -> Definite | Indefinite:
    err = e.response.get("Error", {})
    code = str(err.get("Code", ""))
    message = _short(f"{code}: {err.get('Message', '')}".strip(": "))
    if code == CONDITION_FAILED:
        return NotOwner("not-owner")
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if isinstance(status, int) and 400 <= status < 500:
        return Definite(message)  # refused as asked: validation, throttling, no table
    return Indefinite(message)  # 5xx or no status: it may have been applied


# -- the requests, as data ---------------------------------------------------------------


def _names(expressions: str) -> dict[str, str]:
    return {k: v for k, v in NAMES.items() if k in expressions}


def acquire_request(key: str, token: str, rvn: str, *, seen: str | None = None,
                    wall_now: float | None = None, ttl_ms: int = 0) -> dict[str, Any]:
    """UpdateItem's arguments for a grant: free (no owner), or taken over from the
    record version `seen` (the monotonic rule), or, with `wall_now` (the wall-clock
    recipe), from a holder whose `expires_at` is behind `wall_now`."""
    cond = "attribute_not_exists(#o)"
    values: dict[str, Any] = {":me": {"S": token}, ":v": {"S": rvn}, ":one": {"N": "1"}}
    update = "SET #o = :me, #v = :v"
    if seen is not None:
        cond += " OR #v = :seen"
        values[":seen"] = {"S": seen}
    if wall_now is not None:
        cond += " OR #e < :now"
        update += ", #e = :exp"
        values[":now"] = {"N": _number(wall_now)}
        values[":exp"] = {"N": _number(wall_now + ttl_ms / 1000.0)}
    update += " ADD #f :one"
    return {"TableName": TABLE, "Key": {"name": {"S": key}}, "UpdateExpression": update,
            "ConditionExpression": cond, "ExpressionAttributeNames": _names(update + cond),
            "ExpressionAttributeValues": values, "ReturnValues": "UPDATED_NEW"}


def renew_request(key: str, token: str, rvn: str, *, wall_now: float | None = None,
                  ttl_ms: int = 0) -> dict[str, Any]:
    """UpdateItem's arguments for a renewal: a new record version (and, in the
    wall-clock recipe, a new `expires_at`) if the owner is still this grant."""
    update = "SET #v = :v"
    values: dict[str, Any] = {":me": {"S": token}, ":v": {"S": rvn}}
    if wall_now is not None:
        update += ", #e = :exp"
        values[":exp"] = {"N": _number(wall_now + ttl_ms / 1000.0)}
    cond = "#o = :me"
    return {"TableName": TABLE, "Key": {"name": {"S": key}}, "UpdateExpression": update,
            "ConditionExpression": cond, "ExpressionAttributeNames": _names(update + cond),
            "ExpressionAttributeValues": values}


def release_request(key: str, token: str, rvn: str) -> dict[str, Any]:
    """UpdateItem's arguments for a release: the owner removed (the item and its fence
    counter kept) if it is still this grant."""
    update, cond = "REMOVE #o SET #v = :v", "#o = :me"
    return {"TableName": TABLE, "Key": {"name": {"S": key}}, "UpdateExpression": update,
            "ConditionExpression": cond, "ExpressionAttributeNames": _names(update + cond),
            "ExpressionAttributeValues": {":me": {"S": token}, ":v": {"S": rvn}}}


def delete_request(key: str, token: str) -> dict[str, Any]:
    """DeleteItem's arguments for a release by deletion (`dynamodb-release-delete`)."""
    return {"TableName": TABLE, "Key": {"name": {"S": key}}, "ConditionExpression": "#o = :me",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": {":me": {"S": token}}}


def _number(x: float) -> str:
    return f"{x:.3f}"


# -- the client --------------------------------------------------------------------------


def dynamodb_client(endpoint: str, timeout_s: float, retries: str = "off") -> Any:
    """A boto3 DynamoDB client of one endpoint: fake credentials, one attempt (no
    retries; `retries="standard"`: botocore's default, standard mode with 3 attempts),
    connect and read timeouts, no proxy."""
    import boto3
    from botocore.config import Config

    attempts: dict[str, Any] = ({"mode": "standard", "total_max_attempts": 3}
                                if retries == "standard" else {"total_max_attempts": 1})
    config = Config(
        region_name=REGION, connect_timeout=timeout_s, read_timeout=timeout_s,
        retries=attempts,
        proxies={}, max_pool_connections=2, tcp_keepalive=False)
    session = boto3.session.Session(aws_access_key_id=ACCESS_KEY,
                                    aws_secret_access_key=SECRET_KEY, region_name=REGION)
    return session.client("dynamodb", endpoint_url=endpoint, config=config)


class DynamoDBLockClient:
    """The lock client of `--backend dynamodb` and its variants; one per worker."""

    def __init__(self, ddb: Any, *, ttl_ms: int, drift: float = 0.01,
                 expiry: str = "version", release: str = "clear",
                 monotonic_ns: Callable[[], int] = time.monotonic_ns,
                 wall: Callable[[], float] = time.time) -> None:
        self.ddb, self.ttl_ms, self.drift = ddb, ttl_ms, drift
        self.wallclock = expiry == "wallclock"
        self.delete = release == "delete"
        self.now_ns, self.wall = monotonic_ns, wall
        self.observed: Observations[str] = Observations(lease_ns=ttl_ms * 1_000_000)

    def acquire(self, key: str) -> Lease | None:
        t0 = self.now_ns()
        token = uuid.uuid4().hex
        if self.wallclock:
            request = acquire_request(key, token, uuid.uuid4().hex, wall_now=self.wall(),
                                      ttl_ms=self.ttl_ms)
        else:
            request = acquire_request(key, token, uuid.uuid4().hex,
                                      seen=self.observed.takeover(key, t0))
        try:
            with mapped_errors():
                reply = self.ddb.update_item(**request)
        except NotOwner:  # the condition failed: someone holds it
            if not self.wallclock:
                self._look(key)
            return None
        self.observed.observe(key, None, t0)
        try:
            fence = int(reply["Attributes"]["fence"]["N"])
        except (KeyError, TypeError, ValueError) as e:
            raise Indefinite("granted without a fence in the reply") from e
        return Lease(key=key, token=token, fence=fence, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def _look(self, key: str) -> None:
        """Read the item after a refusal and note its record version; a failed read
        notes nothing (the acquire's answer, busy, stands)."""
        try:
            with mapped_errors():
                item = self.ddb.get_item(TableName=TABLE, Key={"name": {"S": key}},
                                         ConsistentRead=True).get("Item")
        except (Definite, Indefinite):
            return
        now = self.now_ns()  # after the reply: later than the holder's write
        held = item is not None and "owner" in item
        self.observed.observe(key, item["rvn"]["S"] if held and "rvn" in item else None, now)

    def renew(self, lease: Lease) -> None:
        t0 = self.now_ns()
        request = renew_request(lease.key, lease.token, uuid.uuid4().hex,
                                wall_now=self.wall() if self.wallclock else None,
                                ttl_ms=self.ttl_ms)
        try:
            with mapped_errors():
                self.ddb.update_item(**request)
        except NotOwner:
            lease.lost = True
            raise
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def release(self, lease: Lease) -> None:
        if self.delete:
            request = delete_request(lease.key, lease.token)
            with mapped_errors():
                self.ddb.delete_item(**request)
            return
        with mapped_errors():
            self.ddb.update_item(**release_request(lease.key, lease.token,
                                                   uuid.uuid4().hex))

    def close(self) -> None:
        self.ddb.close()


def create_table(config: Mapping[str, Any], spec: object = None) -> None:
    """The lock table, once per run, from the controller (`Backend.options["setup"]`),
    before any worker starts; an existing one is kept."""
    ddb = dynamodb_client(str(config["endpoint"]), 10.0)
    try:
        ddb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": "name",
                                                "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}])
    except bx.ClientError as e:
        if e.response.get("Error", {}).get("Code") != "ResourceInUseException":
            raise
    deadline = time.monotonic() + 30
    while ddb.describe_table(TableName=TABLE)["Table"]["TableStatus"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise RuntimeError(f"table {TABLE} did not become active in 30 s")
        time.sleep(0.05)
    ddb.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker, shared by every lock name."""
    o = opts.options
    ddb = dynamodb_client(str(config["endpoint"]), opts.op_timeout_s,
                          retries=str(o.get("retries", "off")))
    client = DynamoDBLockClient(ddb, ttl_ms=opts.ttl_ms, drift=opts.drift,
                                expiry=str(o.get("expiry", "version")),
                                release=str(o.get("release", "clear")))
    return {k: client for k in keys}
