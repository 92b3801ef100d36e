"""A ZooKeeper ensemble on the nodes: configured and started as a whole.

Every member gets its own `zoo.cfg` naming all of them, and the JVM is started directly
(`ip netns exec` execs in place, so the PID kept is the server). The ensemble serves
when every member answers the `srvr` four-letter word with `Mode: leader`, `follower`
or `standalone`; an isolated or electing member says it is "not currently serving".

The settings are infra.md's measured ones: with ZooKeeper's defaults a healed leader
waits up to 60 s between election notifications and heals take 5-50 s; with
`tickTime=500`, `syncLimit=4` (2 s), `maxNotificationInterval=1000` and
`cnxTimeout=1000`, a failover takes about 2.7 s and a healed member rejoins in 3-7 s.
A small heap and SerialGC keep five JVMs inside this machine's memory and cores.

The session timeout is the lock's TTL (`--ttl-ms`): an ephemeral lock znode lives as
long as its session, so a holder that goes quiet loses the lock one session timeout
after the server last heard from it. ZooKeeper grants between 2 and 20 ticks unless
told otherwise; we pick the tick so that the TTL is at least two of them (at most the
tuned 500 ms) and pin `minSessionTimeout = maxSessionTimeout = TTL`, so the server
grants exactly the TTL the client asks for (kazoo does not report the negotiated
value, and the client's lease clock must count the same timeout as the server).
"""

from __future__ import annotations

import math
import re
import signal
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.cluster.api import Cluster
from lockcheck.cluster.probe import tcp_exchange, wait_until
from lockcheck.db.server import PerNode, Server
from lockcheck.errors import BadInput
from lockcheck.preflight import INSTALL
from lockcheck.spec import TestSpec

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest pulls in the rest
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")  # without a binding it logs nothing
CLIENT_PORT = 2181
QUORUM_PORT = 2888
ELECTION_PORT = 3888
START_TIMEOUT_S = 30.0  # a whole ensemble of JVMs on a busy 2-core machine
MAX_TICK_MS = 500
MIN_TICK_MS = 50
SYNC_LIMIT_MS = 2000  # a follower this far behind the leader is dropped (syncLimit)
INIT_LIMIT_MS = 10000  # time a follower has to load and sync at start (initLimit)
SERVING_MODES = ("leader", "follower", "standalone")


@dataclass(frozen=True)
class Timing:
    """Session timeout and tick for a TTL (see the module docstring)."""

    session_ms: int
    tick_ms: int

    @staticmethod
    def for_ttl(ttl_ms: int) -> Timing:
        tick = max(MIN_TICK_MS, min(MAX_TICK_MS, ttl_ms // 2))
        return Timing(session_ms=ttl_ms, tick_ms=tick)

    def ticks(self, ms: int) -> int:
        return max(1, math.ceil(ms / self.tick_ms))


def config_text(myid: int, members: Sequence[str], data_dir: Path, timing: Timing,
                client_address: str, client_port: int = CLIENT_PORT) -> str:
    """zoo.cfg for member `myid` (1-based) of an ensemble at `members` (addresses)."""
    lines = [
        f"tickTime={timing.tick_ms}",
        f"initLimit={timing.ticks(INIT_LIMIT_MS)}",
        f"syncLimit={timing.ticks(SYNC_LIMIT_MS)}",
        f"minSessionTimeout={timing.session_ms}",
        f"maxSessionTimeout={timing.session_ms}",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={client_address}",
        "admin.enableServer=false",  # no Jetty on 8080
        "4lw.commands.whitelist=*",  # srvr is the readiness probe
        "preAllocSize=4096",  # KB: 4 MB log files instead of 64 MB
        "forceSync=no",  # a killed process keeps what the kernel has; saves the shared disk
        "maxClientCnxns=0",
    ]
    if len(members) > 1:  # one member runs standalone
        lines += [f"server.{i}={a}:{QUORUM_PORT}:{ELECTION_PORT}"
                  for i, a in enumerate(members, start=1)]
    return "\n".join(lines) + "\n"


def server_argv(cfg: Path, workdir: Path) -> list[str]:
    """The JVM and its flags, from infra.md. `workdir` gets what the JVM might write
    besides the log (crash files, temp files), so nothing lands outside it."""
    return [
        "java", "-Xms16m", "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData",  # no /tmp/hsperfdata_<user> files
        f"-XX:ErrorFile={workdir}/hs_err_%p.log", f"-Djava.io.tmpdir={workdir}",
        "-Xss512k",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-Dzookeeper.fastleader.minNotificationInterval=50",  # quicker first election
        "-Dzookeeper.fastleader.maxNotificationInterval=1000",
        "-Dzookeeper.cnxTimeout=1000",
        "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_JAR}",
        "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg),
    ]


def srvr(address: str, port: int = CLIENT_PORT, timeout: float = 0.5) -> str:
    """The `srvr` four-letter word's answer ("" if the connection failed)."""
    try:
        return tcp_exchange(address, port, b"srvr", timeout=timeout).decode("utf-8", "replace")
    except OSError:
        return ""


def mode(answer: str) -> str | None:
    """leader / follower / standalone from a `srvr` answer; None while not serving."""
    m = re.search(r"^Mode: (\w+)", answer, re.M)
    return m.group(1) if m else None


def version_of_jar(jar: Path = ZOOKEEPER_JAR) -> str:
    with zipfile.ZipFile(jar) as z:
        props = z.read("META-INF/maven/org.apache.zookeeper/zookeeper/pom.properties")
    m = re.search(rb"^version=(\S+)", props, re.M)
    return m.group(1).decode() if m else "unknown"


def java_version() -> str:
    out = subprocess.run(["java", "-XX:-UsePerfData", "-version"],  # no /tmp/hsperfdata_*
                         capture_output=True, text=True).stderr
    m = re.search(r'version "([^"]+)"', out)
    return m.group(1) if m else out.strip()[:40]


@dataclass
class ZooKeeperServer(Server):
    """One ensemble member on one node."""

    myid: int
    label: str = field(default="zookeeper", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    probe_interval_s: float = field(default=0.1, kw_only=True)

    @property
    def cfg_path(self) -> Path:
        return self.dir / "zoo.cfg"

    def configure(self, members: Sequence[str], timing: Timing) -> None:
        data = self.dir / "data"
        self.node.run(["mkdir", "-p", str(data)])
        self.made_dir = True
        self.node.write_file(data / "myid", f"{self.myid}\n")
        self.node.write_file(self.cfg_path, config_text(self.myid, members, data, timing,
                                                        self.node.address))

    def argv(self) -> list[str]:
        return server_argv(self.cfg_path, self.dir)

    def mode(self, timeout: float = 0.5) -> str | None:
        return mode(srvr(self.node.address, timeout=timeout))

    def ready(self) -> bool:
        return self.mode() in SERVING_MODES

    def log_files(self) -> list[Path]:
        return [self.log_path, self.cfg_path]


class ZooKeeperDB(PerNode):
    """A ZooKeeper ensemble, one member per node (`zookeeper` and its variants).

    Killable (a killed member restarts on its own data and rejoins), pausable, names
    its leader (`srvr`), with log files.
    """

    name = "zookeeper"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        self.timing = Timing.for_ttl(spec.ttl_ms)
        self.servers: dict[str, ZooKeeperServer] = {}

    def setup(self, cluster: Cluster) -> None:
        for jar in (ZOOKEEPER_JAR, SLF4J_JAR):
            if not jar.is_file():
                raise BadInput(f"{jar} not found; install it with: {INSTALL['java']}")
        nodes = list(cluster.nodes)
        self.servers = {n.name: ZooKeeperServer(n, i) for i, n in enumerate(nodes, start=1)}
        members = [n.address for n in nodes]
        for s in self.servers.values():
            s.configure(members, self.timing)
        for s in self.servers.values():  # all at once: a quorum forms only when enough are up
            s.launch()
        self._wait_all(list(self.servers.values()))

    @staticmethod
    def _wait_all(servers: Sequence[ZooKeeperServer], timeout: float = START_TIMEOUT_S) -> float:
        """Probe every member at once each round, until all serve; fail as soon as one
        of them exits."""
        pending = list(servers)
        with ThreadPoolExecutor(max_workers=len(servers)) as pool:
            def ready() -> bool:
                serving = list(pool.map(lambda s: s.ready(), pending))
                pending[:] = [s for s, ok in zip(pending, serving, strict=True) if not ok]
                return not pending

            return wait_until(
                ready, timeout=timeout, interval=0.1,
                what="zookeeper ensemble (" + ", ".join(s.node.name for s in servers) + ")",
                alive=lambda: all(s.alive() for s in servers),
                tail=lambda: "\n".join(f"{s.node.name}: {s.log_tail(8)}"
                                       for s in (pending or servers)))

    def teardown(self) -> None:
        for s in self.servers.values():
            s.signal(signal.SIGCONT)  # a stopped JVM cannot die until continued
            s.signal(signal.SIGKILL)
        for s in self.servers.values():
            s.kill()  # waits until it is gone

    def versions(self) -> dict[str, str]:
        return {"zookeeper": version_of_jar(), "java": java_version()}

    def client_config(self) -> dict[str, Any]:
        return {"hosts": [f"{s.node.address}:{CLIENT_PORT}" for s in self.servers.values()],
                "session_timeout_ms": self.timing.session_ms, "names": list(self.servers)}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "zookeeper", "address": s.node.address, "port": CLIENT_PORT,
                       "pid": s.daemon.pid if s.daemon else None}
                for name, s in self.servers.items()}

    # -- capabilities (and kill/start/alive/pause/resume/log_files of PerNode) ------

    def primaries(self) -> list[str]:
        """The members that say they lead (asked at once: a paused one answers late)."""
        servers = list(self.servers.items())
        with ThreadPoolExecutor(max_workers=len(servers)) as pool:
            modes = list(pool.map(lambda item: item[1].mode(), servers))
        return [name for (name, _), m in zip(servers, modes, strict=True)
                if m in ("leader", "standalone")]
