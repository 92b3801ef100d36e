"""A Consul cluster on the nodes: one server agent per node, with a data directory.

Every agent starts as a server (`-bootstrap-expect` the node count, `-retry-join` the
others), never in `-dev` mode (which keeps everything in memory), and is then waited on
with an active probe: a consistent read of the KV store through it, which answers only
once the cluster has a leader and that leader has heard from a quorum.

Nothing is meant to leave the run's network: no update checks or anonymous
signatures, no host-derived node ID, no DNS or gRPC listeners (so no recursors), no
WAN gossip, no UI. Raft runs at `raft_multiplier = 1` (Consul's production timing; the
default of 5 is for small laptops), so an election takes about a second.

A killed agent restarts on its data directory and rejoins with its Raft state: locks,
sessions and indexes survive. The leader comes from the agents' `/v1/status/leader`,
mapped to node names by address. Consul is written in Go, which reads the clock
without the C library, so libfaketime cannot move its clock: the database does not
claim `Clock`, and server clock faults are refused.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import subprocess
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockcheck.cluster.api import Cluster
from lockcheck.db.server import PerNode, Server, start_together
from lockcheck.servers import installed
from lockcheck.spec import TestSpec

HTTP_PORT = 8500
SERVER_PORT = 8300  # Raft and RPC between servers; /v1/status/leader names it
START_TIMEOUT_S = 45.0  # three servers elect a leader in a few seconds; the machine is shared
PROBE_TIMEOUT_S = 1.0
PROBE_KEY = "lockcheck-probe"
# settings that keep the agent to the run's own network and make elections quick
SETTINGS = (
    "disable_update_check = true",
    "disable_anonymous_signature = true",
    "performance { raft_multiplier = 1 }",
    "ports { dns = -1, grpc = -1, serf_wan = -1, https = -1 }",
    "ui = false",
)


def consul_binary() -> str:
    return installed("consul", "consul")


def consul_version() -> str:
    out = subprocess.run([consul_binary(), "version"], capture_output=True,
                         text=True).stdout
    m = re.search(r"Consul v(\S+)", out)
    return m.group(1) if m else out.strip()


def http_get(address: str, path: str, port: int = HTTP_PORT,
             timeout: float = PROBE_TIMEOUT_S) -> tuple[int, Any] | None:
    """GET from an agent's HTTP API: the status and the reply as JSON (None when it is
    not JSON), or None when the agent cannot be reached."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    try:
        return r.status, json.loads(body)
    except ValueError:
        return r.status, None


def serves(address: str) -> bool:
    """A consistent read goes through: a leader that a quorum follows. 404 is the
    answer for a key nobody wrote."""
    reply = http_get(address, f"/v1/kv/{PROBE_KEY}?consistent")
    return reply is not None and reply[0] in (200, 404)


@dataclass
class ConsulAgent(Server):
    """One Consul server agent on one node."""

    peers: tuple[str, ...]  # the other servers' addresses, to join
    expect: int  # -bootstrap-expect: the servers of the cluster
    label: str = field(default="consul", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    probe_interval_s: float = field(default=0.2, kw_only=True)

    @property
    def http_url(self) -> str:
        return f"http://{self.node.address}:{HTTP_PORT}"

    def argv(self) -> list[str]:
        a = self.node.address
        joins = [arg for p in self.peers for arg in ("-retry-join", p)]
        settings = [arg for s in SETTINGS for arg in ("-hcl", s)]
        return [
            consul_binary(), "agent", "-server", "-bootstrap-expect", str(self.expect),
            "-node", self.node.name, "-datacenter", "lockcheck",
            "-data-dir", str(self.dir / "data"), "-bind", a, "-advertise", a,
            "-client", a, "-http-port", str(HTTP_PORT), *joins, "-retry-interval", "1s",
            "-disable-host-node-id", "-log-level", "info", *settings,
        ]

    def ready(self) -> bool:
        return serves(self.node.address)

    # kill: SIGKILL, as the base does: a crash; Raft's log on disk is made for it


class ConsulDB(PerNode):
    """A Consul cluster, one server per node (`consul`, `consul-*`).

    Killable (an agent restarts on its data and rejoins), pausable, names its leader,
    with log files. No `Clock`: Go's runtime ignores libfaketime.
    """

    name = "consul"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        self.servers: dict[str, ConsulAgent] = {}

    def setup(self, cluster: Cluster) -> None:
        nodes = list(cluster.nodes)
        self.servers = {
            n.name: ConsulAgent(n, tuple(m.address for m in nodes if m is not n), len(nodes))
            for n in nodes}
        start_together(self.servers.values())

    def expire_leases(self) -> str:
        from lockcheck.db.expire import expire_consul

        return expire_consul(self.client_config()["endpoints"])

    def versions(self) -> dict[str, str]:
        return {"consul": consul_version()}

    def client_config(self) -> dict[str, Any]:
        return {"endpoints": [a.http_url for a in self.servers.values()]}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "consul", "address": a.node.address, "port": HTTP_PORT,
                       "pid": a.daemon.pid if a.daemon else None}
                for name, a in self.servers.items()}

    # -- capabilities (and kill/start/alive/pause/resume/log_files of PerNode) ------

    def primaries(self) -> list[str]:
        """The leader most live agents name (an agent cut off may still name the old
        one for a moment)."""
        by_address = {a.node.address: name for name, a in self.servers.items()}
        views: Counter[str] = Counter()
        for a in self.servers.values():
            if not a.alive():
                continue
            reply = http_get(a.node.address, "/v1/status/leader")
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                host = str((reply or (0, ""))[1]).rsplit(":", 1)[0]
                if host in by_address:
                    views[by_address[host]] += 1
        return [views.most_common(1)[0][0]] if views else []
