"""Redis with Sentinel failover: one primary, replicas, and a Sentinel on every node.

`n1` starts as the primary and every other node as its replica; a Sentinel beside each
Redis watches the primary (quorum: a majority of the Sentinels) and promotes a replica
when it is gone for `down-after-milliseconds`. Replication is asynchronous and nothing
is persisted, which is the point of this backend: a failover can lose a lock key that
the old primary granted, and a primary killed and restarted at once comes back empty
before the Sentinels notice, so its replicas resynchronise from it and drop every key.

Each Redis reads a small config file of its own (its `replicaof` line) before its
command-line options, so when Sentinel reconfigures a server (`REPLICAOF` + `CONFIG
REWRITE`) a restart keeps the role Sentinel gave it, as with a supervised redis.conf.
Sentinel rewrites its own config file too; both live under `node.workdir`.

The controller talks to the servers with redis-py (already lockcheck's dependency) for
the probes, the primary and `SENTINEL FAILOVER`: INFO and SENTINEL replies are not
worth a second parser.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockcheck.cluster.api import Cluster, Node
from lockcheck.cluster.probe import wait_until
from lockcheck.db.redis import (
    DEFAULT_PORT,
    RedisServer,
    redis_binary,
    redis_version,
    server_program,
)
from lockcheck.db.server import PerNode, start_together
from lockcheck.spec import TestSpec

SERVICE = "lockcheck"  # the master name the Sentinels monitor
SENTINEL_PORT = 26379
SETUP_TIMEOUT_S = 20.0
PROBE_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class Settings:
    """Sentinel's timings, short so that a failover follows a primary's loss within a
    couple of seconds (the defaults are 30 s and 3 min)."""

    down_after_ms: int = 1000
    # also the election timeout, and twice it is the pause before the same master can
    # be failed over again: short, so that one run can see several failovers
    failover_timeout_ms: int = 2000


def quorum(n: int) -> int:
    """Sentinels that must agree that the primary is down: a majority."""
    return n // 2 + 1


def probe_client(address: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> redis.Redis:
    return redis.Redis(host=address, port=port, socket_timeout=timeout,
                       socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0),
                       decode_responses=True, protocol=2)


@dataclass
class SentinelServer(RedisServer):
    """One `redis-sentinel` on one node, with a config file it may rewrite."""

    port: int = SENTINEL_PORT
    program: str = "redis-sentinel"
    label: str = field(default="sentinel", kw_only=True)
    primary: str = ""  # the address of the primary to monitor at first
    quorum: int = 1
    settings: Settings = Settings()
    # the ensemble, written into the first config as Sentinel itself records what it
    # has learnt: otherwise it takes a hello period (2 s) for the Sentinels to find
    # each other
    myid: str = ""
    replicas: tuple[str, ...] = ()  # addresses
    peers: tuple[tuple[str, str], ...] = ()  # (address, myid) of the other Sentinels

    @property
    def config_path(self) -> Path:
        return self.dir / "sentinel.conf"

    def config_text(self) -> str:
        m = SERVICE
        return "\n".join([
            f"bind {self.node.address}", f"port {self.port}", "protected-mode no",
            "daemonize no", f"dir {self.dir}", f"logfile {self.log_path}",
            # node addresses are IPs; never wait on a resolver
            "sentinel resolve-hostnames no", "sentinel announce-hostnames no",
            f"sentinel monitor {m} {self.primary} {DEFAULT_PORT} {self.quorum}",
            f"sentinel down-after-milliseconds {m} {self.settings.down_after_ms}",
            f"sentinel failover-timeout {m} {self.settings.failover_timeout_ms}",
            # every replica follows the new primary at once: the failover ends sooner
            f"sentinel parallel-syncs {m} 8",
            *([f"sentinel myid {self.myid}"] if self.myid else []),
            *(f"sentinel known-replica {m} {r} {DEFAULT_PORT}" for r in self.replicas),
            *(f"sentinel known-sentinel {m} {a} {SENTINEL_PORT} {i}" for a, i in self.peers),
            "",
        ])

    def argv(self) -> list[str]:
        return [redis_binary(self.program), str(self.config_path)]

    def launch(self) -> None:
        if self.daemon is None:  # first start: a restart keeps what Sentinel rewrote
            self.node.write_file(self.config_path, self.config_text())
        super().launch()

    def log_files(self) -> list[Path]:
        return [*super().log_files(), self.config_path]


def replica_link_up(address: str, port: int) -> bool:
    try:
        with probe_client(address, port) as c:
            info = c.info("replication")
    except rex.RedisError:
        return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


def sentinel_master(address: str, port: int) -> dict[str, Any]:
    """`SENTINEL MASTER` of our service, as the Sentinel at `address` sees it."""
    with probe_client(address, port) as c:
        m = c.sentinel_master(SERVICE)
    return m if isinstance(m, dict) else {}


def sentinel_ready(address: str, port: int, n: int, since: float) -> bool:
    """The Sentinel has had a PING answered by the primary, every replica and every
    other Sentinel since `since` (a monotonic time after they all listened), has read
    every replica's INFO with its link to the primary up, and counts a majority of
    usable Sentinels (`SENTINEL CKQUORUM`): it could take part in a failover now."""
    try:
        with probe_client(address, port) as c:
            m = c.sentinel_master(SERVICE)
            replicas = c.sentinel_slaves(SERVICE)
            peers = c.sentinel_sentinels(SERVICE)
            c.sentinel_ckquorum(SERVICE)  # an error reply unless the quorum is reachable
    except rex.RedisError:
        return False
    age_ms = (time.monotonic() - since) * 1000

    def answered(state: Any) -> bool:
        # last-ok-ping-reply starts at the instance's creation: only a PONG since
        # `since` makes it younger than that
        return isinstance(state, dict) and not state.get("is_sdown") and \
            state.get("last-ok-ping-reply", age_ms) < age_ms

    return (answered(m) and bool(m.get("is_master"))
            and len(replicas) == n - 1 and len(peers) == n - 1
            and all(answered(r) and r.get("master-link-status") == "ok" for r in replicas)
            and all(answered(p) for p in peers))


class SentinelDB(PerNode):
    """Redis primary + replicas + a Sentinel per node (`redis-sentinel`).

    Capabilities: Killable and Pausable act on the Redis servers only; the Sentinels
    are the failure detector on trial and keep running, as they do when a redis-server
    crashes or stalls on a host that stays up. HasPrimary asks the Sentinels,
    CanFailover sends `SENTINEL FAILOVER`, LogFiles names both servers' logs and the
    Sentinel's rewritten config.
    """

    name = "redis-sentinel"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        self.settings = Settings(
            down_after_ms=int(opts.get("down_after_ms", Settings.down_after_ms)),
            failover_timeout_ms=int(opts.get("failover_timeout_ms",
                                             Settings.failover_timeout_ms)))
        # `min-replicas-to-write`: a primary that hears from fewer replicas (within
        # `min-replicas-max-lag`, 1 s) refuses writes (the -min-replicas variant)
        self.min_replicas = int(opts.get("min_replicas", 0))
        self.program, self.sentinel_program = server_program(spec), server_program(
            spec, "sentinel")
        self.servers: dict[str, RedisServer] = {}
        self.sentinels: dict[str, SentinelServer] = {}
        self.nodes: dict[str, Node] = {}

    # -- setup -------------------------------------------------------------------------

    def setup(self, cluster: Cluster) -> None:
        nodes = list(cluster.nodes)
        self.nodes = {n.name: n for n in nodes}
        primary = nodes[0]
        for n in nodes:
            guard = ("--min-replicas-to-write", str(self.min_replicas),
                     "--min-replicas-max-lag", "1") if self.min_replicas else ()
            s = RedisServer(n, program=self.program, extra_args=(
                # a new replica syncs at once instead of waiting 5 s for company
                "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", *guard))
            s.config = s.dir / "redis.conf"
            role = "" if n is primary else f"replicaof {primary.address} {DEFAULT_PORT}\n"
            n.write_file(s.config, role)
            self.servers[n.name] = s
        start_together(self.servers.values())
        for s in list(self.servers.values())[1:]:
            wait_until(partial(replica_link_up, s.node.address, s.port),
                       timeout=SETUP_TIMEOUT_S, what=f"replication to {s.node.name}",
                       alive=s.alive, tail=s.log_tail)
        # Sentinels last: the primary's first INFO then lists every replica
        ids = {n.name: secrets.token_hex(20) for n in nodes}
        for n in nodes:
            self.sentinels[n.name] = SentinelServer(
                n, program=self.sentinel_program, primary=primary.address,
                quorum=quorum(len(nodes)),
                settings=self.settings, myid=ids[n.name],
                replicas=tuple(r.address for r in nodes if r is not primary),
                peers=tuple((p.address, ids[p.name]) for p in nodes if p is not n))
        start_together(self.sentinels.values())
        listening = time.monotonic()
        for t in self.sentinels.values():
            wait_until(partial(sentinel_ready, t.node.address, t.port, len(nodes), listening),
                       timeout=SETUP_TIMEOUT_S, what=f"sentinel on {t.node.name}",
                       alive=t.alive, tail=t.log_tail)

    def teardown(self) -> None:
        # Sentinels first, so that none reconfigures a server while the others go
        for s in [*self.sentinels.values(), *self.servers.values()]:
            s.kill()

    def expire_leases(self) -> str:
        from lockcheck.db.expire import expire_redis

        return expire_redis((s.node.address, s.port) for s in self.servers.values())

    def versions(self) -> dict[str, str]:
        return {self.program: redis_version(self.program),
                self.sentinel_program: redis_version(self.sentinel_program)}

    def client_config(self) -> dict[str, Any]:
        return {"service": SERVICE, "replicas": max(0, len(self.servers) - 1),
                "sentinels": [[t.node.address, t.port] for t in self.sentinels.values()]}

    def describe(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for name, s in self.servers.items():
            t = self.sentinels.get(name)
            out[name] = {"service": "redis+sentinel", "address": s.node.address,
                         "port": s.port, "pid": s.daemon.pid if s.daemon else None,
                         "sentinel_port": t.port if t else None,
                         "sentinel_pid": t.daemon.pid if t and t.daemon else None}
        return out

    # -- capabilities (and kill/start/alive/pause/resume of PerNode) -----------------

    def log_files(self) -> dict[str, Sequence[Path]]:
        return {name: [*s.log_files(),
                       *(self.sentinels[name].log_files() if name in self.sentinels else [])]
                for name, s in self.servers.items()}

    def primaries(self) -> list[str]:
        """The primary named by the Sentinel with the newest configuration epoch (a
        Sentinel cut off from the others still names the old one)."""
        best: tuple[int, str] | None = None
        for t in self.sentinels.values():
            try:
                m = sentinel_master(t.node.address, t.port)
            except (rex.RedisError, OSError):
                continue
            epoch, address = int(m.get("config-epoch", 0)), str(m.get("ip"))
            if best is None or epoch > best[0]:
                best = (epoch, address)
        by_address = {n.address: name for name, n in self.nodes.items()}
        return [by_address[best[1]]] if best and best[1] in by_address else []

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(t.node.address, t.port) for t in self.sentinels.values()]

    def failover(self, rng: random.Random) -> dict[str, Any]:
        """`SENTINEL FAILOVER` on one Sentinel: it promotes a replica without asking
        the others. Waits (a few seconds at most) until the Sentinels name the new
        primary. A refusal (a failover in progress, no replica fit) is reported, not
        raised: the service said no, the run goes on."""
        before = self.primaries()
        order = list(self.sentinels.values())
        rng.shuffle(order)
        refused = None
        for t in order:
            try:
                with probe_client(t.node.address, t.port) as c:
                    c.sentinel_failover(SERVICE)
            except rex.ResponseError as e:
                refused = str(e)[:120]
                break
            except (rex.RedisError, OSError) as e:
                refused = f"{t.node.name}: {e}"[:120]
                continue
            deadline = time.monotonic() + self.settings.failover_timeout_ms / 1000 + 3.0
            after = before
            while time.monotonic() < deadline:
                after = self.primaries()
                if after and after != before:
                    break
                time.sleep(0.05)
            return {"targets": before, "from": before[0] if before else None,
                    "to": after[0] if after and after != before else None,
                    "sentinel": t.node.name}
        return {"targets": [], "from": before[0] if before else None, "refused": refused}
