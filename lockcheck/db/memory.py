"""lockcheck's own lock server on the nodes (`memory_server.py`), one per node.

A server keeps its locks in memory only, so a killed server starts again empty
(`Killable`); it can be paused (`Pausable`), and its wall clock moved with libfaketime
(`Clock`: it expires leases by `time.time()`). It runs this machine's Python, so it
needs nodes on the controller's machine: the `inproc` and `local` providers.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck import __version__
from lockcheck.cluster import faketime
from lockcheck.cluster.api import Cluster, Daemon, Node
from lockcheck.cluster.probe import tail_lines, tcp_exchange, wait_until
from lockcheck.spec import TestSpec

DEFAULT_PORT = 7480
START_TIMEOUT_S = 15.0
MODULE = "lockcheck.db.memory_server"


def ping(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        return tcp_exchange(address, port, b"PING\n", timeout=timeout,
                            until=b"\n").startswith(b"PONG")
    except OSError:
        return False


@dataclass
class MemoryServer:
    """One memory lock server on one node."""

    node: Node
    port: int = DEFAULT_PORT
    ttl: bool = True
    exclusion: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    daemon: Daemon | None = None

    @property
    def dir(self) -> Path:
        return self.node.workdir / "memory"

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    def argv(self) -> list[str]:
        # -P: a checkout in the working directory must not shadow the installed lockcheck
        return [sys.executable, "-P", "-m", MODULE, "--host", self.node.address,
                "--port", str(self.port), "--data-dir", str(self.dir),
                *([] if self.ttl else ["--no-ttl"]),
                *([] if self.exclusion else ["--no-exclusion"])]

    def launch(self) -> None:
        self.daemon = self.node.spawn("memory", self.argv(), log=self.log_path,
                                      env=dict(self.env) or None)

    def wait_ready(self) -> None:
        wait_until(lambda: ping(self.node.address, self.port), timeout=START_TIMEOUT_S,
                   what=f"memory server on {self.node.name}", alive=self.alive,
                   tail=self.tail)

    def tail(self) -> str:
        try:
            return tail_lines(self.log_path.read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.daemon is not None and self.daemon.alive()

    def kill(self) -> None:
        if self.daemon is not None:
            self.daemon.kill()


class MemoryDB:
    """Memory lock servers, one per node; each lock name lives on one of them."""

    name = "memory"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        self.ttl = bool((options or {}).get("ttl", True))
        self.exclusion = bool((options or {}).get("exclusion", True))
        self.servers: dict[str, MemoryServer] = {}
        self.faking = False

    def setup(self, cluster: Cluster) -> None:
        self.servers = {n.name: MemoryServer(n, ttl=self.ttl, exclusion=self.exclusion)
                        for n in cluster.nodes}
        for s in self.servers.values():
            self._start(s)
        for s in self.servers.values():
            s.wait_ready()

    def _start(self, s: MemoryServer) -> None:
        # a server restarted after a kill starts with a true clock, as its clock file says
        s.env = faketime.server_env(s.node, shim=False) if self.faking else {}
        s.launch()

    def teardown(self) -> None:
        for name in self.servers:
            self.kill(name)

    def versions(self) -> dict[str, str]:
        return {"memory-server": __version__}

    def client_config(self) -> dict[str, Any]:
        return {"servers": [[s.node.address, s.port] for s in self.servers.values()],
                "names": list(self.servers)}

    def describe(self) -> dict[str, dict[str, object]]:
        return {name: {"service": "memory", "address": s.node.address, "port": s.port,
                       "pid": s.daemon.pid if s.daemon else None}
                for name, s in self.servers.items()}

    # -- Killable ----------------------------------------------------------------------

    def kill(self, node: str) -> None:
        s = self.servers[node]
        pid = s.daemon.pid if s.daemon is not None else None
        s.kill()
        if self.faking and pid is not None:
            # libfaketime's files of a dead process, before its PID is reused
            faketime.remove_shm([pid])

    def start(self, node: str) -> None:
        s = self.servers[node]
        if not s.alive():
            self._start(s)
            s.wait_ready()

    def alive(self, node: str) -> bool:
        return self.servers[node].alive()

    # -- Pausable ----------------------------------------------------------------------

    def pause(self, node: str) -> None:
        d = self.servers[node].daemon
        if d is not None:
            d.signal(signal.SIGSTOP)

    def resume(self, node: str) -> None:
        d = self.servers[node].daemon
        if d is not None:
            d.signal(signal.SIGCONT)

    # -- Clock -------------------------------------------------------------------------

    def fake_clock(self) -> None:
        self.faking = True

    def set_clock(self, node: str, offset_ms: float) -> None:
        if not self.faking:
            raise RuntimeError("the memory servers were not started under a fake clock "
                               "(fake_clock() must come before setup)")
        faketime.set_server_clock(self.servers[node].node, offset_ms)

    def reset_clock(self, node: str) -> None:
        self.set_clock(node, 0.0)

    # -- LogFiles ----------------------------------------------------------------------

    def log_files(self) -> dict[str, Sequence[Path]]:
        return {name: [s.log_path] for name, s in self.servers.items()}
