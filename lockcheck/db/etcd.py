"""An etcd 3.4 cluster on the nodes, configured and started as one (`--initial-cluster`).

Every member is launched first, then each is waited on with an active probe (`/health`,
which in 3.4 answers true only once the member has a leader and a quorum read went
through). Settings from infra.md: a 100 ms heartbeat, a 1 s election timeout and
pre-vote, so a healed partition or a restarted member rejoins in well under a second
instead of disrupting the cluster with repeated elections.

A killed member restarts on its own data directory and rejoins (its WAL says who it
is; the initial-cluster flags are then ignored). The leader comes from the members'
own `/v3/maintenance/status`, mapped to node names through the member list.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.cluster.api import Cluster
from lockcheck.db.server import PerNode, Server, start_together
from lockcheck.errors import BadInput
from lockcheck.preflight import INSTALL
from lockcheck.spec import TestSpec

CLIENT_PORT = 2379
PEER_PORT = 2380
START_TIMEOUT_S = 30.0  # three members elect a leader in ~2 s; the machine is shared
PROBE_TIMEOUT_S = 1.0
QUOTA_BYTES = 128 * 1024 * 1024  # a run writes a few MB; a runaway one stops early
# infra.md: without pre-vote a healed member forces elections (5-8 s to serve again)
TUNING = ("--heartbeat-interval", "100", "--election-timeout", "1000", "--pre-vote=true")


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise BadInput(f"etcd not found; install it with: {INSTALL['etcd']}")
    return path


def etcd_version() -> str:
    out = subprocess.run([etcd_binary(), "--version"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return out.strip()


def post_json(address: str, port: int, path: str, body: Mapping[str, Any] | None = None,
              timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any] | None:
    """POST (GET without a body) to a member's HTTP gateway; the reply as JSON, or None
    when the member cannot be reached or does not answer with a JSON object."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = json.loads(conn.getresponse().read())
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    return reply if isinstance(reply, dict) else None


def healthy(address: str, port: int = CLIENT_PORT) -> bool:
    reply = post_json(address, port, "/health")
    return reply is not None and reply.get("health") == "true"


@dataclass
class EtcdMember(Server):
    """One etcd member on one node."""

    peers: str  # the --initial-cluster value: name=peer URL, for every member
    token: str  # --initial-cluster-token: members of another run can never join
    label: str = field(default="etcd", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)

    @property
    def output_path(self) -> Path:
        return self.dir / "etcd.stderr.log"

    @property
    def client_url(self) -> str:
        return f"http://{self.node.address}:{CLIENT_PORT}"

    def argv(self) -> list[str]:
        peer = f"http://{self.node.address}:{PEER_PORT}"
        return [
            etcd_binary(), "--name", self.node.name, "--data-dir", str(self.dir / "data"),
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--listen-client-urls", self.client_url, "--advertise-client-urls",
            self.client_url, "--initial-cluster", self.peers,
            "--initial-cluster-state", "new", "--initial-cluster-token", self.token,
            *TUNING, "--quota-backend-bytes", str(QUOTA_BYTES),
            "--logger", "zap", "--log-outputs", str(self.log_path),
        ]

    def ready(self) -> bool:
        return healthy(self.node.address)

    # kill: SIGKILL, as the base does; SIGTERM takes etcd seconds, its WAL is made for it


class EtcdDB(PerNode):
    """An etcd cluster, one member per node (`etcd`, `etcd-*`).

    Killable (a member restarts on its data and rejoins), pausable, names its leader,
    with log files.
    """

    name = "etcd"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        self.servers: dict[str, EtcdMember] = {}

    def setup(self, cluster: Cluster) -> None:
        peers = ",".join(f"{n.name}=http://{n.address}:{PEER_PORT}" for n in cluster.nodes)
        self.servers = {n.name: EtcdMember(n, peers, f"lockcheck-{cluster.run_id}")
                        for n in cluster.nodes}
        start_together(self.servers.values())

    def expire_leases(self) -> str:
        from lockcheck.db.expire import expire_etcd

        return expire_etcd(self.client_config()["endpoints"])

    def versions(self) -> dict[str, str]:
        return {"etcd": etcd_version()}

    def client_config(self) -> dict[str, Any]:
        return {"endpoints": [m.client_url for m in self.servers.values()]}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "etcd", "address": m.node.address, "port": CLIENT_PORT,
                       "pid": m.daemon.pid if m.daemon else None}
                for name, m in self.servers.items()}

    # -- capabilities (and kill/start/alive/pause/resume/log_files of PerNode) ------

    def primaries(self) -> list[str]:
        """The leader as the members see it; the view of the highest raft term wins, so
        a member cut off with a stale leader in mind does not decide."""
        names: dict[int, str] = {}
        best: tuple[int, int] | None = None  # (raft term, leader member id)
        for m in self.servers.values():
            if not m.alive():
                continue
            members = post_json(m.node.address, CLIENT_PORT, "/v3/cluster/member/list", {})
            for entry in (members or {}).get("members", []):
                with contextlib.suppress(KeyError, ValueError, TypeError):
                    names[int(entry["ID"])] = str(entry["name"])
            status = post_json(m.node.address, CLIENT_PORT, "/v3/maintenance/status", {})
            with contextlib.suppress(KeyError, ValueError, TypeError):
                view = (int((status or {})["raftTerm"]), int((status or {})["leader"]))
                if view[1] and (best is None or view > best):
                    best = view
        if best is None or best[1] not in names:
            return []
        return [names[best[1]]]
