"""The GCS client's pure parts: where google-cloud-storage's exceptions become Definite /
Indefinite / NotOwner, the object's content, the takeover rules with injected clocks,
and the stand-in contract's refusals (of `--client gcslock`, and of a variant whose
calls the stand-in does not honour). Nothing here talks to a server
(tests/integration/test_gcs.py runs fake-gcs-server).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import requests
import requests.exceptions as rqe
from google.api_core import exceptions as gx
from google.cloud.storage import exceptions as media
from urllib3.exceptions import NewConnectionError

from lockcheck.errors import BadInput
from lockcheck.locks import gcs, gcs_contract
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, NotOwner
from lockcheck.locks.gcs import State, decode, encode, mapped_errors
from lockcheck.locks.takeover import Observations
from tests.unit.error_kinds import error_kind


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


def response(status: int) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    return r


def never_connected() -> rqe.ConnectionError:
    return rqe.ConnectionError(NewConnectionError(None, "Connection refused"))  # type: ignore[arg-type]


MAPPING: list[tuple[BaseException, str]] = [
    # the precondition was evaluated and refused: held by another / not ours any more
    (gx.PreconditionFailed("412"), "NotOwner"),
    (media.InvalidResponse(response(412), "412"), "NotOwner"),
    # refused before anything was written
    (gx.NotFound("no bucket"), "Definite"),
    (gx.BadRequest("bad"), "Definite"),
    (gx.Forbidden("no"), "Definite"),
    (gx.TooManyRequests("slow down"), "Definite"),
    (media.InvalidResponse(response(400), "400"), "Definite"),
    # the server failed while handling it, or no reply came: it may have been applied
    (gx.InternalServerError("boom"), "Indefinite"),
    (gx.ServiceUnavailable("later"), "Indefinite"),
    (gx.GatewayTimeout("slow"), "Indefinite"),
    (media.InvalidResponse(response(503), "503"), "Indefinite"),
    (gx.RetryError("deadline", rqe.ReadTimeout("read timed out")), "Indefinite"),
    (media.DataCorruption(response(200), "crc32c"), "Indefinite"),
    (rqe.ReadTimeout("read timed out"), "Indefinite"),
    (rqe.ConnectionError("Connection aborted"), "Indefinite"),
    (rqe.ChunkedEncodingError("cut short"), "Indefinite"),
    (OSError("reset"), "Indefinite"),
    # nothing was sent
    (rqe.ConnectTimeout("timed out connecting"), "Definite"),
    (never_connected(), "Definite"),
    # not the client's: a bug passes through
    (ValueError("x"), "passes"),
]


@pytest.mark.parametrize(("exc", "kind"), MAPPING, ids=lambda x: type(x).__name__)
def test_mapping_table(exc: BaseException, kind: str) -> None:
    assert kind_of(exc)[0] == kind


def test_a_refusal_is_not_owner_and_a_failure_names_its_status() -> None:
    assert kind_of(gx.PreconditionFailed("412"))[1] == "not-owner"
    assert kind_of(gx.ServiceUnavailable("later"))[1].startswith("503")


def test_the_content_round_trips_and_a_foreign_object_is_refused() -> None:
    assert decode(7, encode("tok", 3)) == State(7, "tok", 3)
    assert decode(8, encode(None, 3)) == State(8, None, 3)
    for bad in (b"lock", b'{"owner": 1, "fence": 2}', b'{"fence": "2", "owner": null}',
                b"{}"):
        with pytest.raises(Indefinite):
            decode(1, bad)


MS = 1_000_000


def test_a_generation_may_be_taken_over_only_after_standing_a_whole_lease() -> None:
    o = Observations(lease_ns=1000 * MS)
    o.observe("k", 5, 0)
    assert not o.expired("k", 5, 999 * MS)
    o.observe("k", 5, 500 * MS)  # seen again: the first sighting counts
    assert o.expired("k", 5, 1000 * MS)
    assert not o.expired("k", 6, 1000 * MS)  # another generation is another holder
    o.observe("k", 6, 1000 * MS)  # a renewal restarts the timer
    assert not o.expired("k", 6, 1999 * MS) and o.expired("k", 6, 2000 * MS)
    o.observe("k", None, 2000 * MS)  # free: nothing to wait out
    assert not o.expired("k", 6, 9999 * MS)


class Clock:
    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> Any:
        return self.now


class NoServer:
    def bucket(self, name: str) -> object:
        return object()


def test_the_client_clock_rule_compares_updated_with_the_takers_wall_clock() -> None:
    updated = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    held = State(9, "other", 4, updated)
    at = updated.timestamp()
    for wall, expired in ((at + 0.5, False), (at + 1.5, True)):
        c = gcs.GCSLockClient(NoServer(), ttl_ms=1000, timeout_s=1.0,
                              expiry="client-clock", wall=Clock(wall))
        assert c._expired("k", held, 0) is expired
    # the safe rule ignores the wall clock: only the waiter's monotonic timer counts
    mono = Clock(0)
    c = gcs.GCSLockClient(NoServer(), ttl_ms=1000, timeout_s=1.0, monotonic_ns=mono,
                          wall=Clock(at + 3600))
    assert not c._expired("k", held, 0)
    assert c._expired("k", held, 1000 * MS)


def test_make_clients_reads_the_variant_switches() -> None:
    opts = ClientOptions(ttl_ms=2000, op_timeout_s=0.5,
                         options={"expiry": "client-clock", "retry": "default"})
    clients = gcs.make_clients({"endpoint": "http://127.0.0.1:9"}, ["a", "b"], opts)
    c = clients["a"]
    assert isinstance(c, gcs.GCSLockClient) and clients["b"] is c
    assert c.client_clock and c.retry is not None and c.timeout_s == 0.5
    plain = gcs.make_clients({"endpoint": "http://127.0.0.1:9"}, ["a"],
                             ClientOptions(ttl_ms=2000, op_timeout_s=0.5))["a"]
    assert isinstance(plain, gcs.GCSLockClient)
    assert not plain.client_clock and plain.retry is None


# -- the stand-in contract ---------------------------------------------------------------


def test_the_contract_knows_every_operation_and_the_backend_needs_only_honoured_ones(
        ) -> None:
    assert set(gcs_contract.HONOURED) == set(gcs_contract.OPERATIONS)
    assert set(gcs.CALLS) <= set(gcs_contract.OPERATIONS)
    assert gcs_contract.unhonoured(gcs.CALLS) == []
    gcs_contract.refuse_unhonoured("gcs", gcs.CALLS)  # no refusal


def test_a_call_the_stand_in_ignores_is_refused_in_one_line_naming_it() -> None:
    calls = {"create-only": "insert", "delete-if-generation": "objects.delete (release)"}
    with pytest.raises(BadInput) as e:
        gcs_contract.refuse_unhonoured("my-variant", calls)
    msg = str(e.value)
    assert "\n" not in msg and "objects.delete (release)" in msg and "insert" not in msg
    assert msg.startswith("my-variant: fake-gcs-server 1.54.0 ignores"), msg


def test_client_gcslock_is_refused_naming_its_patch_and_delete() -> None:
    from lockcheck.clients import resolve_client

    with pytest.raises(BadInput) as e:
        resolve_client("gcslock", "gcs")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--client gcslock:"), msg
    assert "objects.patch ifMetagenerationMatch" in msg and "objects.delete" in msg, msg


class TimingOut:
    """A bucket and blob of a server whose replies never come."""

    def blob(self, name: str) -> TimingOut:
        return self

    def download_as_bytes(self, **kw: Any) -> bytes:
        raise rqe.ReadTimeout("read timed out")

    def upload_from_string(self, *args: Any, **kw: Any) -> None:
        raise rqe.ReadTimeout("read timed out")


class SlowServer:
    def bucket(self, name: str) -> TimingOut:
        return TimingOut()


def test_a_read_without_a_reply_is_definite_and_a_write_indefinite() -> None:
    """A read changes nothing: an acquire whose read got no reply granted nothing (an
    `info` there would explain away a gap the hidden-grants checker must see)."""
    c = gcs.GCSLockClient(SlowServer(), ttl_ms=1000, timeout_s=1.0)
    with pytest.raises(Definite) as e:
        c.acquire("k")
    assert not isinstance(e.value, NotOwner) and str(e.value).startswith("read:")
    with pytest.raises(Indefinite):
        c.write("k", "token", 1, 0)
