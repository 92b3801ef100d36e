"""`--resource azure-blob` of the lock-set workload: the sets live in Azure Blob Storage
(Azurite), next to the locks (the analogue of `--resource consul-txn`).

With the azure-blob backend each set is the content of its lock's own blob
(`lockcheck-locks/<name>`), and every write carries the writer's lease id (the grant's
token, `locks/azure_blob.py`). The service accepts it only while that lease is the
blob's: a holder whose lease expired or was taken over has its write refused (412),
however late it wakes. The store enforces the lock, as a fence would, and nothing in
the client decides it. Every grant proposes a lease id of its own, never used again, so
"my lease id is the blob's at the write" means "I held the lock from my read to my
write". A Put Blob replaces the blob's metadata: the write sends back the metadata it
read (the fence counter among it), unchanged, since only the lease holder can have
written it since.

With `azure-blob-unleased-write` (`write: "unleased"`) the lease is a lock only: each
set is a blob of its own (`lockcheck-sets/<name>`), never leased, written without a
lease id. The service takes a stale holder's write.

A set's version is a write counter in the blob's metadata (0 before the first write),
the read one + 1 at each write: exact where writes are guarded; where they are not, a
stale write can repeat a version (the lock-set checker then names no later write as the
one that lost an add, but still counts every lost add). When the store stops, after
the workers, it reads every set back and records them as the `final-state` event the
lock-set checker reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from lockcheck.locks.api import Definite, Indefinite
from lockcheck.locks.azure_blob import CONTAINER as LOCKS
from lockcheck.locks.azure_blob import mapped_errors, service_client
from lockcheck.workloads.api import ResourceContext

SETS = "lockcheck-sets"  # the unleased variant's own container
VERSION_KEY = "setversion"


def _elements(data: bytes) -> list[Any]:
    try:
        value = json.loads(data or b"[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


class AzureSetClient:
    """A worker's side: reads and writes of the sets; OSError when an outcome is
    unknown."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float) -> None:
        self.service = service_client(str(config["connection_string"]), timeout_s)
        self.leased = config.get("write") != "unleased"
        self.container = self.service.get_container_client(LOCKS if self.leased else SETS)
        self.metadata: dict[str, dict[str, str]] = {}  # key -> what its read saw

    def read(self, key: str) -> dict[str, Any]:
        blob = self.container.get_blob_client(key)
        try:
            with mapped_errors():
                got = blob.download_blob()
                data = got.readall()
        except Indefinite as e:
            raise OSError(str(e)) from e
        except Definite as e:
            if "BlobNotFound" not in str(e):
                raise OSError(str(e)) from e
            self.metadata[key] = {}
            return {"version": 0, "elements": []}
        meta = dict(got.properties.metadata or {})
        self.metadata[key] = meta
        return {"version": int(meta.get(VERSION_KEY, "0")), "elements": _elements(data)}

    def write(self, key: str, elements: list[Any], read_version: int, process: Any,
              owner: str | None = None) -> dict[str, Any]:
        if self.leased and owner is None:
            return {"error": "no lease id to write with"}
        meta = {**self.metadata.get(key, {}), VERSION_KEY: str(read_version + 1)}
        lease = {"lease": owner} if self.leased else {}
        blob = self.container.get_blob_client(key)
        try:
            with mapped_errors():
                blob.upload_blob(json.dumps(elements).encode(), overwrite=True,
                                 metadata=meta, **lease)
        except Indefinite as e:
            raise OSError(str(e)) from e
        except Definite as e:  # refused: nothing written (a stale lease id: 412)
            return {"error": str(e)}
        return {"version": read_version + 1}

    def close(self) -> None:
        self.service.close()


class AzureSetStore:
    """The controller's side: it makes the sets' container; at the end it records the
    sets."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float,
                 record: Callable[[dict[str, Any]], None] | None) -> None:
        self.config, self.timeout_s, self.record = dict(config), timeout_s, record

    def start(self) -> AzureSetStore:
        import azure.core.exceptions as ax

        if self.config.get("write") == "unleased":
            service = service_client(str(self.config["connection_string"]),
                                     self.timeout_s)
            try:
                service.create_container(SETS)
            except ax.ResourceExistsError:
                pass
            finally:
                service.close()
        return self

    def worker_config(self) -> dict[str, Any]:
        return {"kind": "azure-blob", "connection_string": self.config["connection_string"],
                "write": self.config.get("write", "leased")}

    def stop(self) -> None:
        if self.record is None:
            return
        client = AzureSetClient(self.worker_config(), self.timeout_s)
        try:
            sets: dict[str, Any] = {}
            with mapped_errors():
                names = [b.name for b in client.container.list_blobs()]
            for name in names:
                sets[name] = client.read(name)
        except (Definite, Indefinite, OSError):
            return  # no final state: the lock-set checker says unknown, never valid
        finally:
            client.close()
        # a lock blob never written as a set is no set
        sets = {k: v for k, v in sets.items() if v["version"] > 0}
        self.record({"process": "resource", "type": "event", "f": "final-state",
                     "value": {"sets": dict(sorted(sets.items()))}})


def start_store(ctx: ResourceContext) -> AzureSetStore:
    if "connection_string" not in ctx.service:
        raise ValueError("--resource azure-blob needs an azure-blob backend")
    return AzureSetStore(ctx.service, 10.0, ctx.record)
