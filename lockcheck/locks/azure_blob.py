"""Azure Blob leases as a lock, with azure-storage-blob (on Azurite, the Azure Storage
emulator).

One blob per lock name, `lockcheck-locks/<name>`, made empty on first use (a create
that refuses to overwrite). The lock is the blob's lease (`BlobLeaseClient`):

* Acquire is one Lease Blob `acquire` with a lease id this client proposes (a fresh
  UUID per grant, the grant's token) and a duration of --ttl-ms (Azure grants 15-60 s,
  or infinite). Another lease on the blob refuses it (409 `LeaseAlreadyPresent`):
  busy. The service expires leases by its own clock.
* Right after a grant the client reads the blob's metadata and writes `fence` + 1
  back with its lease id: writes to a leased blob need the lease id, so only the
  current holder can move the counter, and a holder whose lease ended is refused
  (412): the counter counts grants. The fence number is the counter written. A grant
  whose fence write failed is reported indefinite: the lease was granted.
* Renewal (every TTL/3) and release are the lease's `renew` and `release`; a lease
  id the blob no longer carries is refused (409): not-owner.
* The client believes it holds the lock for the TTL from the invoke of its acquire or
  renewal (`lease_deadline`), never from the reply.
* The lease id also fences writes to the lock blob itself: the lock-set workload with
  `--resource azure-blob` keeps each set in its lock's blob, written with the writer's
  lease id, so the service refuses a stale holder's write
  (`workloads/azure_set_store.py`).

The SDK retries nothing (`retry_total=0`), every request has connect and read
timeouts, and proxy settings in the environment are ignored. A reply from the service
is definite (4xx: refused) or indefinite (5xx); no reply after the request may have
left is indefinite; a connection never made is definite (`mapped_errors`).

Variants (`options`):

* `lease: "infinite"` (`azure-blob-infinite`): Terraform's azurerm backend: an
  infinite lease (-1), never renewed (`renew` only confirms the lease id), held until
  released.
* `write: "unleased"` (`azure-blob-unleased-write`): only the resource changes; the
  lock is the same.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import azure.core.exceptions as ax

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)
from lockcheck.locks.http import never_connected

CONTAINER = "lockcheck-locks"
FENCE_KEY = "fence"
INFINITE = -1  # Azure's lease duration for a lease that never expires
NO_EXPIRY_NS = 2**63 - 1  # the infinite variant: a lease the client never sees end
# the service's answers that say the lease (or its id) is not this client's: busy on
# an acquire, not-owner on a renewal, a release or a write under the lease
LEASE_REFUSALS = frozenset({
    "LeaseAlreadyPresent", "LeaseIdMismatchWithLeaseOperation",
    "LeaseIsBrokenAndCannotBeRenewed", "LeaseNotPresentWithLeaseOperation",
    "LeaseIdMissing", "LeaseIdMismatchWithBlobOperation",
    "LeaseNotPresentWithBlobOperation", "LeaseLost", "LeaseIsBreakingAndCannotBeAcquired",
    "LeaseIsBreakingAndCannotBeChanged",
})


class BlobMissing(Definite):
    """The lock's blob does not exist yet (404 BlobNotFound)."""


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place where what azure-core and azure-storage-blob raise becomes
    Definite, Indefinite, NotOwner (a lease refusal: the caller turns it into busy on an
    acquire) or BlobMissing."""
    try:
        yield
    except ax.HttpResponseError as e:  # the service answered (or a reply cut short)
        raise reply_kind(e) from e
    except ax.ServiceRequestError as e:  # (timeouts included) nothing went out, unless
        # the connection broke after it was made
        inner = getattr(e, "inner_exception", None)  # the requests error it wraps
        if isinstance(e, ax.ServiceRequestTimeoutError) or never_connected(e) or (
                isinstance(inner, BaseException) and never_connected(inner)):
            raise Definite(_short(f"not sent: {e}")) from e
        raise Indefinite(_short(str(e))) from e
    except ax.AzureError as e:  # no reply, a reply cut short or unreadable
        raise Indefinite(_short(str(e))) from e
    except OSError as e:
        raise Indefinite(_short(str(e))) from e


def error_code(e: ax.HttpResponseError) -> str:
    """The service's error code ("LeaseAlreadyPresent"); the SDK gives some as its
    `StorageErrorCode` enum, whose str() is the enum's name."""
    code = getattr(e, "error_code", None) or ""
    return str(getattr(code, "value", code))


def reply_kind(e: ax.HttpResponseError) -> Definite | Indefinite:
    code = error_code(e)
    status = e.status_code
    if code in LEASE_REFUSALS:
        return NotOwner(code)
    if code == "BlobNotFound":
        return BlobMissing(code)
    message = _short(f"{status} {code}".strip())
    if isinstance(status, int) and 400 <= status < 500:
        return Definite(message)  # refused as asked
    return Indefinite(message)  # 5xx, or a reply with no status: it may have applied


def service_client(connection_string: str, timeout_s: float) -> Any:
    """A BlobServiceClient: no retries, connect and read timeouts, no proxy from the
    environment."""
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import BlobServiceClient

    transport = RequestsTransport(use_env_settings=False, connection_timeout=timeout_s,
                                  read_timeout=timeout_s)
    return BlobServiceClient.from_connection_string(
        connection_string, retry_total=0, transport=transport,
        connection_timeout=timeout_s, read_timeout=timeout_s)


class AzureBlobLockClient:
    """The lock client of `--backend azure-blob` and its variants; one per worker."""

    def __init__(self, service: Any, *, ttl_ms: int, drift: float = 0.01,
                 lease: str = "finite") -> None:
        self.service, self.ttl_ms, self.drift = service, ttl_ms, drift
        self.infinite = lease == "infinite"
        self.container = service.get_container_client(CONTAINER)
        self.leases: dict[str, Any] = {}  # token -> its BlobLeaseClient
        self.now_ns = time.monotonic_ns

    def _deadline(self, t0: int) -> int:
        return NO_EXPIRY_NS if self.infinite else lease_deadline(t0, self.ttl_ms, self.drift)

    def acquire(self, key: str) -> Lease | None:
        from azure.storage.blob import BlobLeaseClient

        t0 = self.now_ns()
        blob = self.container.get_blob_client(key)
        token = str(uuid.uuid4())
        lease = BlobLeaseClient(blob, lease_id=token)
        # whole seconds, rounded up: the lease must outlast the client's belief
        duration = INFINITE if self.infinite else math.ceil(self.ttl_ms / 1000)
        try:
            try:
                with mapped_errors():
                    lease.acquire(lease_duration=duration)
            except BlobMissing:
                self._create(blob)
                t0 = self.now_ns()
                with mapped_errors():
                    lease.acquire(lease_duration=duration)
        except NotOwner:  # someone else's lease is on the blob
            return None
        self.leases[token] = lease
        fence = self._next_fence(blob, token)
        return Lease(key=key, token=token, fence=fence, ttl_ms=self.ttl_ms,
                     valid_until_ns=self._deadline(t0))

    def _create(self, blob: Any) -> None:
        """The lock's blob, empty; one made meanwhile by another client will do."""
        try:
            with mapped_errors():
                blob.upload_blob(b"", overwrite=False)
        except Definite as e:
            if "BlobAlreadyExists" not in str(e) and "LeaseIdMissing" not in str(e):
                raise

    def _next_fence(self, blob: Any, token: str) -> int:
        """Counter + 1 in the blob's metadata, written under the new lease."""
        try:
            with mapped_errors():
                meta = dict(blob.get_blob_properties().metadata or {})
                fence = int(meta.get(FENCE_KEY, "0")) + 1
                meta[FENCE_KEY] = str(fence)
                blob.set_blob_metadata(meta, lease=token)
        except (Definite, ValueError) as e:  # granted, but with no fence
            raise Indefinite(f"granted, but the fence was not written: {e}"[:80]) from e
        return fence

    def renew(self, lease: Lease) -> None:
        t0 = self.now_ns()
        try:
            with mapped_errors():
                self.leases[lease.token].renew()
        except NotOwner:
            lease.lost = True
            raise
        lease.valid_until_ns = max(lease.valid_until_ns, self._deadline(t0))

    def release(self, lease: Lease) -> None:
        held = self.leases.pop(lease.token)
        with mapped_errors():
            held.release()

    def close(self) -> None:
        self.service.close()


def create_container(config: Mapping[str, Any], spec: object = None) -> None:
    """The locks' container, once per run, from the controller (`Backend.options
    ["setup"]`), before any worker starts; an existing one is kept."""
    service = service_client(str(config["connection_string"]), 10.0)
    try:
        service.create_container(CONTAINER)
    except ax.ResourceExistsError:
        pass
    finally:
        service.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker, shared by every lock name."""
    service = service_client(str(config["connection_string"]), opts.op_timeout_s)
    client = AzureBlobLockClient(service, ttl_ms=opts.ttl_ms, drift=opts.drift,
                                 lease=str(opts.options.get("lease", "finite")))
    return {k: client for k in keys}
