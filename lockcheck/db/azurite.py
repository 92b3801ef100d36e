"""Azurite on a node: an Azure Blob Storage stand-in (npm `azurite`, Microsoft's emulator,
on lockcheck's own Node).

One `azurite-blob` process on one node (Blob Storage is one service to its clients: a
single endpoint), listening on the node's address, everything in memory
(`--inMemoryPersistence`). Its lease API is Azure's, clause by clause, as far as a lock
relies on it (`db/azurite_contract.py` says which clauses it honours, and a test
checks that against a running Azurite). The readiness probe is any answer of the blob
service to a request.

What it does not do as Azure does, and what the database therefore refuses:

* `kill`: a restarted Azurite loses every lease and blob (in memory); with its disk
  store (`--location`) held leases come back expired and are granted again (LokiJS
  saves a lease's expiry as a string that never compares as a date). Both are the
  emulator's, not Azure's, so the database does not claim `Killable`, and a kill is
  refused with that reason.
* It checks no request date (Azure refuses a Shared Key request whose date is too
  far off), so client clock faults reach no lease here.

Azurite expires a lease by its own wall clock (`Date`), read at each request: the
database claims `Clock`, and libfaketime moves that clock per process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster import faketime
from lockcheck.cluster.api import Cluster
from lockcheck.cluster.probe import http_answer
from lockcheck.db.server import Served, Server
from lockcheck.errors import BadInput
from lockcheck.servers import Npm, installed, node_version, npm_version
from lockcheck.spec import TestSpec

PORT = 10000
VERSION = "3.37.0"  # the npm package the backend names (lockcheck/families/azure_blob.py)
MAX_TTL_MS = 60_000  # Azure's longest finite lease; longer is refused with 400
START_TIMEOUT_S = 60.0  # Node starts Azurite in a second, but took over 30 s at load 19
PROBE_TIMEOUT_S = 1.0
# Azurite's well-known development account (its documentation publishes the key)
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
# faults the database refuses, with why (read by the nemesis refusal)
REFUSED_FAULTS = {
    "kill": "a restarted Azurite loses every lease it held (in memory), or brings held "
            "leases back expired (its disk store): an emulator artefact, not Azure's "
            "behaviour",
}


def azurite_binary() -> str:
    return installed("azurite-blob", "azure-blob")


def serves(address: str, port: int = PORT, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """The blob service answers a request (unsigned: it is refused, with Azurite's
    request id, which only the blob service sends)."""
    r = http_answer(address, port, "GET", f"/{ACCOUNT}?comp=list", timeout=timeout)
    return r is not None and "x-ms-request-id" in r.headers


def connection_string(address: str, port: int = PORT) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://{address}:{port}/{ACCOUNT};")


@dataclass
class Azurite(Server):
    """azurite-blob on one node, in memory; under libfaketime when clocks will move."""

    label: str = field(default="azurite", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    probe_interval_s: float = field(default=0.1, kw_only=True)
    clock_env: Mapping[str, str] | None = field(default=None, kw_only=True)

    @property
    def endpoint(self) -> str:
        return f"http://{self.node.address}:{PORT}/{ACCOUNT}"

    def argv(self) -> list[str]:
        # --skipApiVersionCheck and --loose: newer SDKs send versions and headers 3.37
        # does not know; no telemetry leaves the run
        return [azurite_binary(), "--inMemoryPersistence", "--blobHost", self.node.address,
                "--blobPort", str(PORT), "--disableTelemetry", "--skipApiVersionCheck",
                "--loose"]

    def env(self) -> Mapping[str, str] | None:
        return self.clock_env

    def ready(self) -> bool:
        return serves(self.node.address)


def check_options(spec: TestSpec, options: Mapping[str, Any]) -> None:
    """Refuse, in one line, a run Azure would refuse or the stand-in cannot show."""
    from lockcheck.db.azurite_contract import refuse_unhonoured

    if options.get("lease") != "infinite" and isinstance(spec.ttl_ms, int) \
            and spec.ttl_ms > MAX_TTL_MS:
        raise BadInput(f"--ttl-ms {spec.ttl_ms} is too long for backend {spec.backend}: "
                       f"Azure grants no finite lease over {MAX_TTL_MS} ms")
    refuse_unhonoured(spec.backend, options.get("needs", ()))


class AzuriteDB(Served):
    """Azurite on the (only) node (`azure-blob`, `azure-blob-*`).

    Pausable, Clock (libfaketime), with log files. Not Killable: see the module's
    docstring (`refused_faults` gives the reason a kill is refused).
    """

    name = "azurite"
    refused_faults = REFUSED_FAULTS

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        check_options(spec, options or {})
        # where the lock-set's sets go (`workloads/azure_set_store.py`)
        self.write = str((options or {}).get("write", "leased"))
        self.servers: dict[str, Azurite] = {}
        self.faking = False

    def setup(self, cluster: Cluster) -> None:
        self.servers = {n.name: Azurite(n) for n in cluster.nodes}
        for s in self.servers.values():
            if self.faking:  # its clock starts true
                s.clock_env = faketime.server_env(s.node, shim=False)
            s.launch()
        for s in self.servers.values():
            s.wait_ready()

    def teardown(self) -> None:
        for s in self.servers.values():
            pid = s.daemon.pid if s.daemon is not None else None
            s.kill()
            if self.faking and pid is not None:
                faketime.remove_shm([pid])  # libfaketime's files of the dead process

    def versions(self) -> dict[str, str]:
        return {"azurite": npm_version(Npm("azurite", VERSION)), "node": node_version()}

    def client_config(self) -> dict[str, Any]:
        first = next(iter(self.servers.values()))
        return {"connection_string": connection_string(first.node.address),
                "endpoint": first.endpoint, "write": self.write}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "azurite", "address": s.node.address, "port": PORT,
                       "pid": s.daemon.pid if s.daemon else None}
                for name, s in self.servers.items()}

    # -- Clock -------------------------------------------------------------------------

    def fake_clock(self) -> None:
        self.faking = True

    def set_clock(self, node: str, offset_ms: float) -> None:
        if not self.faking:
            raise RuntimeError("Azurite was not started under a fake clock (fake_clock() "
                               "must come before setup)")
        faketime.set_server_clock(self.servers[node].node, offset_ms)

    def reset_clock(self, node: str) -> None:
        self.set_clock(node, 0.0)
