"""The azure-blob backends: Azurite (Microsoft's Azure Storage emulator) on one node and
lockcheck's own client of Blob leases on azure-storage-blob (`lockcheck/locks/azure_blob.py`)."""

from __future__ import annotations

from typing import Any

from lockcheck.backend import Backend
from lockcheck.servers import program

# Azurite from the npm registry, run by lockcheck's own Node (3.37 needs Node 22)
SERVERS = {program("azurite-blob"): "npm:azurite@3.37.0"}
SETUP = "lockcheck.locks.azure_blob:create_container"
MIN_TTL_MS = 15_000  # Azure grants leases of 15-60 s, or infinite
FENCE = "a counter in the lock blob's metadata, +1 written with the new lease id right " \
        "after each grant; the lease id itself fences writes to the lock blob"


def _azure(**kw: Any) -> Backend:
    base: dict[str, Any] = dict(
        family="azure-blob", db="lockcheck.db.azurite:AzuriteDB",
        client="lockcheck.locks.azure_blob:make_clients", library="azure-storage-blob",
        servers=SERVERS, server="azurite", default_nodes=1, max_nodes=1,
        min_ttl_ms=MIN_TTL_MS, fence=FENCE)
    options = {"setup": SETUP, **kw.pop("options", {})}
    return Backend(**{**base, **kw, "options": options})


BACKENDS: tuple[Backend, ...] = (
    _azure(
        name="azure-blob",
        description="Azure Blob leases (Azurite 3.37 stand-in): BlobLeaseClient acquire "
                    "of a lease of --ttl-ms (15-60 s) on the lock's blob, renewed every "
                    "TTL/3, released; expiry by the service's clock; SDK retries off",
        expect="safe under partition and pause; a holder paused past its lease "
               "(client-pause) overlaps the next one, and its stale write is refused by "
               "the fence, or by the service itself (--resource azure-blob); the "
               "service's clock moved forward (clock-bump) grants a held lease again",
    ),
    _azure(
        name="azure-blob-unleased-write", unsafe=True,
        description="azure-blob, but the lease is a lock only: the lock-set's sets "
                    "(--resource azure-blob) are blobs of their own, written with no "
                    "lease id",
        expect="with --workload lock-set --resource azure-blob, a holder paused past "
               "its lease (client-pause) writes the set it read before the pause: the "
               "service accepts the stale write and an add is lost",
        options={"write": "unleased"},
    ),
    _azure(
        name="azure-blob-infinite", unsafe=True,
        description="azure-blob with Terraform's lease: infinite (-1), never renewed "
                    "(renew only confirms the lease id), held until released",
        fence="a counter in the lock blob's metadata, +1 written with the new lease id",
        expect="an acquire whose reply never came (a pause of the service longer "
               "than the op timeout) is granted to nobody who knows, for good: the "
               "recovery phase fails; so does any holder that never releases",
        options={"lease": "infinite"},
    ),
)
