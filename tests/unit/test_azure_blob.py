"""The azure-blob backend's pure parts and refusals: where azure-core's exceptions and
the service's error codes become Definite / Indefinite / NotOwner, the runs it refuses
(a lease Azure would not grant, a kill Azurite cannot stand in for, a variant needing a
clause Azurite does not honour), and the fidelity contract's probes against a stand-in
that grants everything: they must find it out (the real Azurite: tests/integration/
test_azure_blob.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import azure.core.exceptions as ax
import pytest
import requests
from urllib3.exceptions import NewConnectionError

from lockcheck.backends import backend
from lockcheck.db import azurite_contract as contract
from lockcheck.db.azurite import connection_string
from lockcheck.errors import BadInput
from lockcheck.locks import azure_blob
from lockcheck.locks.azure_blob import mapped_errors, service_client
from lockcheck.runner import plan
from lockcheck.spec import TestSpec
from tests.unit.error_kinds import error_kind


def kind_of(exc: BaseException) -> tuple[str, str]:
    return error_kind(mapped_errors, exc)


def reply(status: int, code: str) -> ax.HttpResponseError:
    e = ax.HttpResponseError(message=f"{status} {code}")
    e.status_code = status
    e.error_code = code  # type: ignore[attr-defined]
    return e


@pytest.mark.parametrize("status,code,kind", [
    (409, "LeaseAlreadyPresent", "NotOwner"),  # busy, on an acquire
    (409, "LeaseIdMismatchWithLeaseOperation", "NotOwner"),
    (409, "LeaseIsBrokenAndCannotBeRenewed", "NotOwner"),
    (412, "LeaseIdMismatchWithBlobOperation", "NotOwner"),
    (412, "LeaseNotPresentWithBlobOperation", "NotOwner"),
    (412, "LeaseIdMissing", "NotOwner"),
    (404, "BlobNotFound", "Definite"),
    (400, "InvalidHeaderValue", "Definite"),
    (403, "AuthorizationFailure", "Definite"),
    (500, "InternalError", "Indefinite"),
    (503, "ServerBusy", "Indefinite"),
])
def test_error_replies(status: int, code: str, kind: str) -> None:
    assert kind_of(reply(status, code))[0] == kind


def test_an_error_code_given_as_the_sdks_enum_is_read_by_its_value() -> None:
    from azure.storage.blob import StorageErrorCode

    e = reply(412, "x")
    e.error_code = StorageErrorCode.LEASE_ID_MISMATCH_WITH_BLOB_OPERATION  # type: ignore[attr-defined]
    assert kind_of(e) == ("NotOwner", "LeaseIdMismatchWithBlobOperation")


def test_a_missing_blob_is_its_own_kind() -> None:
    with pytest.raises(azure_blob.BlobMissing), mapped_errors():
        raise reply(404, "BlobNotFound")


def test_no_connection_is_definite_and_no_reply_indefinite() -> None:
    # as azure-core's transport raises it: the requests error as `error`
    cause = requests.exceptions.ConnectionError(
        NewConnectionError(None, "Connection refused"))  # type: ignore[arg-type]
    refused = ax.ServiceRequestError(cause, error=cause)
    assert kind_of(refused)[0] == "Definite"
    assert kind_of(ax.ServiceRequestTimeoutError("connect timed out"))[0] == "Definite"
    assert kind_of(ax.ServiceResponseTimeoutError("read timed out"))[0] == "Indefinite"
    assert kind_of(ax.ServiceResponseError("connection reset"))[0] == "Indefinite"
    assert kind_of(ax.IncompleteReadError("cut short"))[0] == "Indefinite"
    # a connection error that is not a refused connect: it may have been sent
    assert kind_of(ax.ServiceRequestError("connection aborted"))[0] == "Indefinite"
    assert kind_of(ValueError("x"))[0] == "passes"


def test_the_sdk_retries_nothing_and_ignores_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:9")
    service = service_client(connection_string("127.0.0.1", 1), 2.0)
    assert service._config.retry_policy.total_retries == 0
    assert service._config.transport._use_env_settings is False
    service.close()


# -- refusals ----------------------------------------------------------------------------


def refusal(**kw: Any) -> str:
    with pytest.raises(BadInput) as e:
        plan(TestSpec(**kw))
    line = str(e.value)
    assert "\n" not in line
    return line


def test_a_lease_shorter_than_azure_grants_is_refused() -> None:
    line = refusal(backend="azure-blob", ttl_ms=1000)
    assert "--ttl-ms 1000" in line and "15000" in line, line


def test_a_lease_longer_than_azure_grants_is_refused() -> None:
    line = refusal(backend="azure-blob", ttl_ms=61_000)
    assert "--ttl-ms 61000" in line and "60000" in line, line


def test_kill_is_refused_with_the_reason() -> None:
    line = refusal(backend="azure-blob", nemesis=("kill",))
    assert line.startswith("--nemesis kill: backend azure-blob refuses it:"), line
    assert "restarted Azurite loses every lease" in line and "not Azure" in line, line


def test_the_default_ttl_is_azures_shortest_lease() -> None:
    assert backend("azure-blob").min_ttl_ms == 15_000
    assert plan(TestSpec(backend="azure-blob", nemesis=())).spec.ttl_ms == 15_000


def test_a_variant_needing_a_clause_azurite_does_not_honour_is_refused() -> None:
    with pytest.raises(BadInput) as e:
        contract.refuse_unhonoured("azure-blob-x", ["restart-keeps-leases"])
    assert "restart-keeps-leases" in str(e.value) and "Azurite does not honour" in str(e.value)
    contract.refuse_unhonoured("azure-blob-x", ["one-lease-at-a-time", "expiry-by-time"])
    for b in ("azure-blob", "azure-blob-unleased-write", "azure-blob-infinite"):
        contract.refuse_unhonoured(b, backend(b).options.get("needs", ()))


# -- the contract's probes against a stand-in that grants everything -------------------


class GrantsEverything(BaseHTTPRequestHandler):
    """A blob service that says yes to every request: it ignores lease ids, lease
    durations and create-only conditions."""

    def _answer(self, status: int) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        lease = self.headers.get("x-ms-proposed-lease-id") or self.headers.get(
            "x-ms-lease-id") or "00000000-0000-0000-0000-000000000000"
        self.send_response(status)
        for k, v in (("ETag", '"0x1"'), ("Last-Modified", "Mon, 07 Dec 2026 00:00:00 GMT"),
                     ("x-ms-request-id", "fake"), ("x-ms-version", "2025-01-05"),
                     ("x-ms-lease-id", lease), ("x-ms-lease-time", "0"),
                     ("x-ms-blob-type", "BlockBlob"), ("x-ms-lease-state", "leased"),
                     ("x-ms-lease-status", "locked"), ("x-ms-meta-fence", "1"),
                     ("Content-Length", "0")):
            self.send_header(k, v)
        self.end_headers()

    def do_PUT(self) -> None:
        self._answer(201)

    def do_GET(self) -> None:
        self._answer(200)

    def do_HEAD(self) -> None:
        self._answer(200)

    def do_DELETE(self) -> None:
        self._answer(202)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def grants_everything() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), GrantsEverything)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    service = service_client(connection_string("127.0.0.1", server.server_address[1]), 5.0)
    try:
        yield service.get_container_client(contract.CONTAINER)
    finally:
        service.close()
        server.shutdown()
        server.server_close()


def test_the_probes_find_out_a_stand_in_that_grants_everything(
        grants_everything: Any) -> None:
    measured = contract.check(grants_everything, timed=False)
    # every refusal a lock relies on is missing, and the contract test would say so
    for name in ("create-if-absent", "lease-durations", "one-lease-at-a-time",
                 "writes-need-the-lease-id", "writes-need-the-right-lease-id", "renew",
                 "release", "break"):
        assert measured[name] is False, (name, measured)
    wrong = contract.disagreements(measured)
    assert any(w.startswith("writes-need-the-right-lease-id: not honoured") for w in wrong)
    # what it grants, Azure grants too
    assert measured["same-id-acquires-again"] is True
