"""The DynamoDB client's pure parts: where botocore's exceptions and DynamoDB's error
replies become Definite / Indefinite / NotOwner, the conditional writes it sends (as
data), and the takeover rule with an injected clock.

`Definite` -> `fail` (certainly not applied); `Indefinite` -> `info` (may have been
applied; the process retires); `NotOwner` (a Definite) -> `fail` "not-owner", and on
an acquire a busy lock. Nothing here talks to a server (tests/integration/
test_dynamodb.py runs dynalite).
"""

from __future__ import annotations

import inspect
from typing import Any

import botocore.exceptions as bx
import pytest

from lockcheck.locks.api import ClientOptions
from lockcheck.locks.dynamodb import (
    MAYBE_SENT,
    TABLE,
    DynamoDBLockClient,
    acquire_request,
    delete_request,
    make_clients,
    mapped_errors,
    release_request,
    renew_request,
)
from lockcheck.locks.takeover import Observations
from tests.unit.error_kinds import error_kind


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


def client_error(code: str, status: int | None, message: str = "m") -> bx.ClientError:
    meta: dict[str, Any] = {} if status is None else {"HTTPStatusCode": status}
    return bx.ClientError({"Error": {"Code": code, "Message": message},
                           "ResponseMetadata": meta}, "UpdateItem")


# -- error replies -----------------------------------------------------------------------

REPLIES: list[tuple[str, int | None, str]] = [
    # the condition was evaluated and refused: someone else holds it / not ours any more
    ("ConditionalCheckFailedException", 400, "NotOwner"),
    # refused before anything was written
    ("ValidationException", 400, "Definite"),
    ("ResourceNotFoundException", 400, "Definite"),
    ("ProvisionedThroughputExceededException", 400, "Definite"),
    ("ThrottlingException", 400, "Definite"),
    ("RequestLimitExceeded", 400, "Definite"),
    ("TransactionConflictException", 400, "Definite"),
    ("MissingAuthenticationTokenException", 400, "Definite"),
    ("UnrecognizedClientException", 400, "Definite"),
    ("AccessDeniedException", 400, "Definite"),
    # the service failed while handling it: it may have been applied
    ("InternalServerError", 500, "Indefinite"),
    ("ServiceUnavailable", 503, "Indefinite"),
    ("", 502, "Indefinite"),
    ("SomethingNew", None, "Indefinite"),
]


@pytest.mark.parametrize(("code", "status", "kind"), REPLIES,
                         ids=[f"{c or 'empty'}-{s}" for c, s, _ in REPLIES])
def test_error_replies(code: str, status: int | None, kind: str) -> None:
    assert kind_of(client_error(code, status))[0] == kind


def test_a_refused_condition_is_not_owner_with_its_usual_message() -> None:
    assert kind_of(client_error("ConditionalCheckFailedException", 400)) == \
        ("NotOwner", "not-owner")


def test_a_refusal_names_its_code() -> None:
    kind, message = kind_of(client_error("ThrottlingException", 400, "Rate exceeded"))
    assert (kind, message) == ("Definite", "ThrottlingException: Rate exceeded")


# -- every botocore exception class ------------------------------------------------------

URL = "http://10.77.0.2:4567"
# (name, exception as botocore raises it, kind)
TABLE_OF_ERRORS: list[tuple[str, BaseException, str]] = [
    # no connection was made: nothing was sent
    ("EndpointConnectionError", bx.EndpointConnectionError(endpoint_url=URL, error="refused"),
     "Definite"),
    ("ConnectTimeoutError", bx.ConnectTimeoutError(endpoint_url=URL, error="timed out"),
     "Definite"),
    ("ProxyConnectionError", bx.ProxyConnectionError(proxy_url=URL, error="x"), "Definite"),
    ("SSLError", bx.SSLError(endpoint_url=URL, error="handshake"), "Definite"),
    # built or signed wrong: never sent
    ("ParamValidationError", bx.ParamValidationError(report="bad"), "Definite"),
    ("NoCredentialsError", bx.NoCredentialsError(), "Definite"),
    ("NoRegionError", bx.NoRegionError(), "Definite"),
    # sent, and no answer or half of one
    ("ReadTimeoutError", bx.ReadTimeoutError(endpoint_url=URL), "Indefinite"),
    ("ConnectionClosedError", bx.ConnectionClosedError(endpoint_url=URL), "Indefinite"),
    ("ResponseStreamingError", bx.ResponseStreamingError(error="cut"), "Indefinite"),
    ("HTTPClientError", bx.HTTPClientError(error="boom"), "Indefinite"),
    ("IncompleteReadError", bx.IncompleteReadError(actual_bytes=1, expected_bytes=2),
     "Indefinite"),
    ("FlexibleChecksumError", bx.FlexibleChecksumError(error_msg="bad crc"), "Indefinite"),
    ("OSError", OSError(104, "Connection reset by peer"), "Indefinite"),
]


@pytest.mark.parametrize(("exc", "kind"), [t[1:] for t in TABLE_OF_ERRORS],
                         ids=[t[0] for t in TABLE_OF_ERRORS])
def test_mapping_table(exc: BaseException, kind: str) -> None:
    assert kind_of(exc)[0] == kind


def botocore_errors() -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(bx, inspect.isclass)
            if issubclass(c, Exception) and not issubclass(c, Warning)
            and c.__module__ == "botocore.exceptions"]


def test_every_botocore_exception_class_is_mapped() -> None:
    """No botocore error escapes unmapped, and only those raised once the request may
    have gone out are indefinite (a new class is seen here, not mapped by luck)."""
    seen = {}
    for cls in botocore_errors():
        exc = cls.__new__(cls)
        Exception.__init__(exc, "x")
        if issubclass(cls, bx.ClientError):
            exc.response = {"Error": {"Code": "X"}, "ResponseMetadata": {}}  # type: ignore[attr-defined]
        seen[cls.__name__] = kind_of(exc)[0]
    assert "passes" not in seen.values(), [n for n, k in seen.items() if k == "passes"]
    indefinite = {n for n, k in seen.items() if k == "Indefinite"}
    assert indefinite == {c.__name__ for c in botocore_errors()
                          if issubclass(c, MAYBE_SENT) or issubclass(c, bx.ClientError)}
    assert {"ReadTimeoutError", "ConnectionClosedError", "ResponseStreamingError"} <= \
        indefinite
    assert seen["EndpointConnectionError"] == seen["ConnectTimeoutError"] == "Definite"
    assert len(seen) > 90


def test_not_a_client_error_passes_through() -> None:
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")


def test_the_cause_is_kept() -> None:
    exc = bx.ReadTimeoutError(endpoint_url=URL)
    with pytest.raises(Exception) as ei, mapped_errors():
        raise exc
    assert ei.value.__cause__ is exc


# -- the writes, as data ------------------------------------------------------------------


def test_a_grant_is_one_conditional_update_that_adds_to_the_fence() -> None:
    r = acquire_request("k1", "tok", "v1")
    assert r["TableName"] == TABLE and r["Key"] == {"name": {"S": "k1"}}
    assert r["ConditionExpression"] == "attribute_not_exists(#o)"
    assert r["UpdateExpression"] == "SET #o = :me, #v = :v ADD #f :one"
    assert r["ReturnValues"] == "UPDATED_NEW"
    assert r["ExpressionAttributeNames"] == {"#o": "owner", "#v": "rvn", "#f": "fence"}
    assert r["ExpressionAttributeValues"] == {":me": {"S": "tok"}, ":v": {"S": "v1"},
                                              ":one": {"N": "1"}}


def test_a_takeover_names_the_version_it_saw_stand() -> None:
    r = acquire_request("k1", "tok", "v2", seen="v1")
    assert r["ConditionExpression"] == "attribute_not_exists(#o) OR #v = :seen"
    assert r["ExpressionAttributeValues"][":seen"] == {"S": "v1"}
    assert "#e" not in r["ExpressionAttributeNames"]  # no wall clock anywhere


def test_the_wall_clock_recipe_compares_expiry_with_the_takers_clock() -> None:
    r = acquire_request("k1", "tok", "v1", wall_now=1000.0, ttl_ms=1500)
    assert r["ConditionExpression"] == "attribute_not_exists(#o) OR #e < :now"
    assert r["UpdateExpression"] == "SET #o = :me, #v = :v, #e = :exp ADD #f :one"
    values = r["ExpressionAttributeValues"]
    assert values[":now"] == {"N": "1000.000"} and values[":exp"] == {"N": "1001.500"}
    assert r["ExpressionAttributeNames"]["#e"] == "expires_at"
    renew = renew_request("k1", "tok", "v2", wall_now=2000.0, ttl_ms=1500)
    assert renew["UpdateExpression"] == "SET #v = :v, #e = :exp"
    assert renew["ExpressionAttributeValues"][":exp"] == {"N": "2001.500"}


def test_renew_and_release_are_conditional_on_this_grant() -> None:
    renew = renew_request("k1", "tok", "v2")
    assert renew["ConditionExpression"] == "#o = :me"
    assert renew["UpdateExpression"] == "SET #v = :v"  # a new version: waiters restart
    assert renew["ExpressionAttributeValues"] == {":me": {"S": "tok"}, ":v": {"S": "v2"}}
    assert "ReturnValues" not in renew
    release = release_request("k1", "tok", "v3")
    assert release["ConditionExpression"] == "#o = :me"
    # the owner goes, the item and its fence counter stay
    assert release["UpdateExpression"] == "REMOVE #o SET #v = :v"
    assert "#f" not in release["ExpressionAttributeNames"]
    delete = delete_request("k1", "tok")
    assert delete["ConditionExpression"] == "#o = :me"
    assert delete["ExpressionAttributeValues"] == {":me": {"S": "tok"}}
    for r in (renew, release, delete):
        names = r["ExpressionAttributeNames"]
        text = r.get("UpdateExpression", "") + r["ConditionExpression"]
        assert all(n in text for n in names)  # DynamoDB refuses unused names


# -- the takeover rule, on an injected clock ----------------------------------------------

MS = 1_000_000


def test_a_version_may_be_taken_over_only_after_standing_a_whole_lease() -> None:
    obs = Observations(lease_ns=1000 * MS)
    assert obs.takeover("k", 0) is None  # never seen
    obs.observe("k", "v1", 100 * MS)
    assert obs.takeover("k", 100 * MS) is None
    assert obs.takeover("k", 1099 * MS) is None
    assert obs.takeover("k", 1100 * MS) == "v1"
    assert obs.takeover("other", 5000 * MS) is None


def test_seeing_the_same_version_again_keeps_the_first_sighting() -> None:
    obs = Observations(lease_ns=1000 * MS)
    obs.observe("k", "v1", 0)
    obs.observe("k", "v1", 900 * MS)
    assert obs.takeover("k", 1000 * MS) == "v1"


def test_a_renewal_restarts_the_waiters_timer() -> None:
    obs = Observations(lease_ns=1000 * MS)
    obs.observe("k", "v1", 0)
    obs.observe("k", "v2", 800 * MS)  # the holder renewed: a new version
    assert obs.takeover("k", 1500 * MS) is None
    assert obs.takeover("k", 1800 * MS) == "v2"


def test_a_free_lock_forgets_what_was_seen() -> None:
    obs = Observations(lease_ns=1000 * MS)
    obs.observe("k", "v1", 0)
    obs.observe("k", None, 500 * MS)
    assert obs.takeover("k", 5000 * MS) is None


def test_make_clients_reads_the_variant_switches() -> None:
    opts = ClientOptions(ttl_ms=2000, op_timeout_s=0.5,
                         options={"expiry": "wallclock", "release": "delete"})
    clients = make_clients({"endpoint": "http://127.0.0.1:1"}, ["k0", "k1"], opts)
    c = clients["k0"]
    assert clients["k1"] is c and isinstance(c, DynamoDBLockClient)
    assert c.wallclock and c.delete and c.ttl_ms == 2000
    config = c.ddb.meta.config
    assert config.retries["total_max_attempts"] == 1
    assert config.connect_timeout == config.read_timeout == 0.5
    assert config.proxies == {}
    c.close()
