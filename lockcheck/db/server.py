"""One server process on one node, and the per-node capabilities of a database made of them.

Every database here runs one program per node (or a few: Sentinel beside Redis) with
the same life: a folder under `node.workdir`, an argv, a launch through `Node.spawn`
(the PID kept is the server's own), an active readiness probe with a timeout whose
error carries the log's last lines, then alive / kill / signal and the log files the
runner copies. `Server` is that life once; a database's server class says only what
differs (argv, probe, folder, log files).

`PerNode` gives a database the `Killable` and `Pausable` capabilities by node name,
acting on `servers[node]`, so no database writes that delegation out itself.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockcheck.cluster.api import Daemon, Node
from lockcheck.cluster.probe import tail_lines, wait_until


@dataclass
class Server:
    """One server program on one node. Subclasses give `argv` and `ready`."""

    node: Node
    daemon: Daemon | None = field(default=None, kw_only=True)
    # names the daemon, the folder and the log files ("redis", "etcd", ...)
    label: str = field(default="server", kw_only=True)
    start_timeout_s: float = field(default=10.0, kw_only=True)
    probe_interval_s: float = field(default=0.05, kw_only=True)
    made_dir: bool = field(default=False, kw_only=True)

    @property
    def dir(self) -> Path:
        return self.node.workdir / self.label

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.label}.log"

    @property
    def output_path(self) -> Path:
        """Where the process's stdout and stderr go; a server with a log file of its own
        keeps here what it prints before that file is open (a bad option, say)."""
        return self.log_path

    def argv(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> Mapping[str, str] | None:
        return None

    def ready(self) -> bool:
        """The active readiness probe (never a grep of the log)."""
        raise NotImplementedError

    def launch(self) -> None:
        """Start the process; `wait_ready` waits for it (so a whole ensemble starts at
        once before any is waited on)."""
        if not self.made_dir:  # a restart after a kill is on the clock: skip a round trip
            self.node.run(["mkdir", "-p", str(self.dir)])
            self.made_dir = True
        self.daemon = self.node.spawn(f"{self.label}-{self.node.name}", self.argv(),
                                      log=self.output_path, env=self.env())

    def wait_ready(self, timeout: float | None = None) -> float:
        """Until `ready()`; the seconds it took. Fails at once if the process exits."""
        d = self.daemon
        return wait_until(self.ready, timeout=timeout or self.start_timeout_s,
                          interval=self.probe_interval_s,
                          what=f"{self.label} on {self.node.name}",
                          alive=(lambda: d.alive()) if d is not None else None,
                          tail=self.log_tail)

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def log_files(self) -> list[Path]:
        return list(dict.fromkeys([self.log_path, self.output_path]))

    def log_tail(self, lines: int = 15) -> str:
        out = [self.node.run(["tail", "-n", str(lines), str(p)], check=False).stdout
               for p in dict.fromkeys([self.log_path, self.output_path])]
        return tail_lines("".join(out), lines) or "(no log)"

    def alive(self) -> bool:
        return self.daemon is not None and self.daemon.alive()

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone (a crash: no shutdown of its own)."""
        if self.daemon is not None:
            self.daemon.kill()

    def signal(self, sig: int) -> None:
        if self.daemon is not None:
            self.daemon.signal(sig)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)


def start_together(servers: Iterable[Server]) -> None:
    """Launch every server, then wait for each: an ensemble forms only once enough of
    it is up, and the waits overlap."""
    started = list(servers)
    for s in started:
        s.launch()
    for s in started:
        s.wait_ready()


class Served:
    """`Pausable` and `LogFiles` of a database by node name, acting on the server of
    that node (`servers`, filled in by the database's setup), and a teardown that kills
    them all; not `Killable` (a database whose restarts are not the real service's,
    such as a cloud stand-in's, derives from this alone)."""

    servers: Mapping[str, Server]

    def teardown(self) -> None:
        for s in self.servers.values():
            s.kill()

    def pause(self, node: str) -> None:
        self.servers[node].pause()

    def resume(self, node: str) -> None:
        self.servers[node].resume()

    def log_files(self) -> Mapping[str, Sequence[Path]]:
        return {name: s.log_files() for name, s in self.servers.items()}


class PerNode(Served):
    """`Served`, and `Killable`: a node's server killed and started again."""

    def kill(self, node: str) -> None:
        self.servers[node].kill()

    def start(self, node: str) -> None:
        s = self.servers[node]
        if not s.alive():
            s.start()

    def start_together(self, nodes: Sequence[str]) -> None:
        """Start several at once: an ensemble whose every member was down (etcd,
        Consul, ZooKeeper after an outage) serves only once a quorum is up, so no
        member can be waited for alone."""
        start_together([self.servers[n] for n in nodes if not self.servers[n].alive()])

    def alive(self, node: str) -> bool:
        return self.servers[node].alive()
