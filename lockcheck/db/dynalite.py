"""dynalite on a node: a DynamoDB stand-in (npm `dynalite`, on lockcheck's own Node).

One process on one node (DynamoDB is one service to its clients: a single endpoint),
listening on the node's address, with its tables in LevelDB under the node's work
folder (`--path`), so a killed dynalite restarts with every item, owner and fence
counter it had. Tables become active at once (`--createTableMs 0`). The readiness
probe is a ListTables that answers.

Its conditional writes are atomic per item (dynalite serialises the writes of one key),
which is all a DynamoDB lock relies on. It has no TTL deletion and no transactions; no
lock here uses either. DynamoDB's condition expressions have no server time, so the
server's clock plays no part in any lock: the database does not claim `Clock`, and
server clock faults are refused (clients' clocks are what the wall-clock recipe
trusts: `--clock-targets clients`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import Cluster
from lockcheck.cluster.probe import http_answer
from lockcheck.db.server import PerNode, Server, start_together
from lockcheck.servers import Npm, installed, node_version, npm_version
from lockcheck.spec import TestSpec

PORT = 4567
VERSION = "4.0.0"  # the npm package the backend names (lockcheck/families/dynamodb.py)
START_TIMEOUT_S = 30.0  # Node and LevelDB start in about a second; the machine is shared
PROBE_TIMEOUT_S = 1.0
# dynalite checks that a request is signed, not the signature
PROBE_HEADERS = {
    "Content-Type": "application/x-amz-json-1.0",
    "X-Amz-Target": "DynamoDB_20120810.ListTables",
    "X-Amz-Date": "20260101T000000Z",
    "Authorization": "AWS4-HMAC-SHA256 Credential=lockcheck/20260101/us-east-1/dynamodb/"
                     "aws4_request, SignedHeaders=host, Signature=00",
}


def dynalite_binary() -> str:
    return installed("dynalite", "dynamodb")


def lists_tables(address: str, port: int = PORT, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """dynalite answers a ListTables with its table names."""
    r = http_answer(address, port, "POST", "/", body=b"{}", headers=PROBE_HEADERS,
                    timeout=timeout)
    try:
        return r is not None and r.status == 200 and "TableNames" in json.loads(r.body)
    except ValueError:
        return False


@dataclass
class Dynalite(Server):
    """dynalite on one node, its data in LevelDB under the node's folder."""

    label: str = field(default="dynalite", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    probe_interval_s: float = field(default=0.1, kw_only=True)

    @property
    def endpoint(self) -> str:
        return f"http://{self.node.address}:{PORT}"

    def argv(self) -> list[str]:
        return [dynalite_binary(), "--host", self.node.address, "--port", str(PORT),
                "--path", str(self.dir / "data"), "--createTableMs", "0",
                "--deleteTableMs", "0", "--updateTableMs", "0"]

    def ready(self) -> bool:
        return lists_tables(self.node.address)

    # kill: SIGKILL, as the base does; the launcher execs Node, so the PID is Node's


class DynaliteDB(PerNode):
    """dynalite on the (only) node (`dynamodb`, `dynamodb-*`).

    Killable (restarts on its LevelDB data), pausable, with log files. No `Clock`:
    no DynamoDB lock reads the server's time.
    """

    name = "dynalite"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        self.servers: dict[str, Dynalite] = {}

    def setup(self, cluster: Cluster) -> None:
        self.servers = {n.name: Dynalite(n) for n in cluster.nodes}
        start_together(self.servers.values())

    def versions(self) -> dict[str, str]:
        return {"dynalite": npm_version(Npm("dynalite", VERSION)), "node": node_version()}

    def client_config(self) -> dict[str, Any]:
        first = next(iter(self.servers.values()))
        return {"endpoint": first.endpoint}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "dynalite", "address": s.node.address, "port": PORT,
                       "pid": s.daemon.pid if s.daemon else None}
                for name, s in self.servers.items()}
