"""redis-server on nodes: independent masters, no persistence (a restart comes back empty).

Or valkey-server (`--server valkey`), Redis's fork, which takes the same options and
speaks the same protocol: the programs are `<server>-server` and `<server>-sentinel`.

`RedisServer` is one server on one node, reused by every Redis-based database
(`RedisDB` here: one master per node, which serves both `--backend redis`, where each
lock name lives on one master, and Redlock, where every name lives on all of them).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.cluster import faketime
from lockcheck.cluster.api import Cluster, Node
from lockcheck.cluster.probe import NotReady, tcp_exchange
from lockcheck.db.server import PerNode, Server, start_together
from lockcheck.errors import BadInput
from lockcheck.preflight import INSTALL
from lockcheck.spec import TestSpec

DEFAULT_PORT = 6379
START_TIMEOUT_S = 10.0


def redis_binary(program: str = "redis-server") -> str:
    path = shutil.which(program)
    if path is None:
        raise BadInput(f"{program} not found; install it with: {INSTALL[program]}")
    return path


def redis_version(program: str = "redis-server") -> str:
    out = subprocess.run([redis_binary(program), "--version"], capture_output=True,
                         text=True).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def server_program(spec: TestSpec, role: str = "server") -> str:
    """The program of a role ("server", "sentinel") of the run's Redis-protocol server."""
    return f"{spec.server or 'redis'}-{role}"


def ping(address: str, port: int, timeout: float = 0.5) -> bool:
    """A raw RESP PING, so readiness needs no client library."""
    try:
        return tcp_exchange(address, port, b"PING\r\n", timeout=timeout,
                            until=b"\r\n").startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer(Server):
    """One redis-server on one node."""

    port: int = DEFAULT_PORT
    persistence: bool = False  # AOF with fsync always (Redlock's "restart safely")
    extra_args: tuple[str, ...] = ()
    env_vars: Mapping[str, str] = field(default_factory=dict)
    program: str = "redis-server"
    label: str = field(default="redis", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    # a config file read before the options (a replica's `replicaof`): CONFIG REWRITE,
    # as Sentinel sends it, keeps a changed role there across a restart
    config: Path | None = None

    @property
    def dir(self) -> Path:
        return self.node.workdir / f"{self.label}-{self.port}"

    @property
    def output_path(self) -> Path:
        return self.dir / f"{self.label}.stderr.log"

    def argv(self) -> list[str]:
        config = [str(self.config)] if self.config else []
        args = [
            redis_binary(self.program), *config, "--bind", self.node.address,
            "--port", str(self.port), "--protected-mode", "no", "--dir", str(self.dir),
            "--daemonize", "no", "--logfile", str(self.log_path),
        ]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--save", "", "--appendonly", "no"]
        return args + list(self.extra_args)

    def env(self) -> Mapping[str, str] | None:
        return self.env_vars or None

    def ready(self) -> bool:
        return ping(self.node.address, self.port)


def faked_start_refused(program: str, why: str) -> str:
    """The one line for a server that does not start under libfaketime on this system:
    Redis 8 and Valkey 8 hang or crash at start under it with glibc 2.41 (Debian 13),
    whether or not glibc's malloc wrapper comes first (docs/releases.md)."""
    how = "crashed" if " exited" in why.split(";")[0] else "did not answer"
    return (f"clock faults: {program} {redis_version(program)} does not start under "
            f"libfaketime on this system (it {how} at start); the Redis backends take clock "
            "faults where it does, as on Debian 12 (see docs/releases.md)")


class RedisClocks:
    """The `Clock` capability of a database made of `RedisServer`s: redis-server reads
    the wall clock through the C library, so libfaketime moves it (`cluster/faketime.py`:
    glibc's malloc wrapper preloaded first, the clock file re-read at every call).

    `fake_clock()` before setup, then `clock_env(node)` for each server started."""

    servers: dict[str, RedisServer]
    faking: bool = False

    def fake_clock(self) -> None:
        self.faking = True

    def clock_env(self, node: Node) -> dict[str, str]:
        """The environment a server on `node` starts with (empty without fake clocks);
        a server restarted after a kill reads the node's clock file again."""
        return faketime.server_env(node, shim=True) if self.faking else {}

    def set_clock(self, node: str, offset_ms: float) -> None:
        if not self.faking:
            raise RuntimeError("redis was not started under a fake clock (fake_clock() "
                               "must come before setup)")
        faketime.set_server_clock(self.servers[node].node, offset_ms)

    def reset_clock(self, node: str) -> None:
        self.set_clock(node, 0.0)

    def kill(self, node: str) -> None:
        """Kill (with `PerNode` next in line), then remove the files
        libfaketime leaves on the node, before the PID can be reused by another faked
        process (whose fake clock would then fail to start)."""
        s = self.servers[node]
        pid = s.daemon.pid if s.daemon is not None else None
        super().kill(node)  # type: ignore[misc]
        if self.faking and pid is not None:
            s.node.run(["rm", "-f", *map(str, faketime.shm_files(pid))], check=False)


class RedisDB(RedisClocks, PerNode):
    """Independent Redis masters, one per node (`redis`, `redlock`).

    Killable (a killed master restarts empty: no persistence unless the backend asks
    for it), pausable, with log files, and clocks that can be moved (`RedisClocks`).
    """

    name = "redis"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        self.persistence = bool(opts.get("persistence", False))
        self.program = server_program(spec)
        self.servers: dict[str, RedisServer] = {}

    def setup(self, cluster: Cluster) -> None:
        self.servers = {n.name: RedisServer(n, persistence=self.persistence,
                                            env_vars=self.clock_env(n), program=self.program)
                        for n in cluster.nodes}
        try:
            start_together(self.servers.values())
        except NotReady as e:
            if not self.faking:
                raise
            raise BadInput(faked_start_refused(self.program, str(e))) from None

    def expire_leases(self) -> str:
        from lockcheck.db.expire import expire_redis

        return expire_redis((s.node.address, s.port) for s in self.servers.values())

    def versions(self) -> dict[str, str]:
        return {self.program: redis_version(self.program)}

    def client_config(self) -> dict[str, Any]:
        return {"masters": [[s.node.address, s.port] for s in self.servers.values()],
                "names": list(self.servers)}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "redis", "address": s.node.address, "port": s.port,
                       "pid": s.daemon.pid if s.daemon else None}
                for name, s in self.servers.items()}

    # capabilities: those of RedisClocks and PerNode
