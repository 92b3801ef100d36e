"""redis-server on a node: no persistence by default, so a restart comes back empty."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from lockcheck.cluster.node import Daemon, Node
from lockcheck.errors import BadInput

DEFAULT_PORT = 6379


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise BadInput("redis-server not found; install it with: apt-get install -y redis-server")
    return path


def redis_version() -> str:
    out = subprocess.run([redis_binary(), "--version"], capture_output=True, text=True).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def ping(address: str, port: int, timeout: float = 0.5) -> bool:
    """A raw RESP PING, so readiness needs no client library."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisService:
    """One redis-server on one node. Start, kill, restart, pause, resume, stop."""

    node: Node
    workdir: Path  # data dir (temp)
    log_path: Path  # server log (in the results dir, so it outlives the run)
    port: int = DEFAULT_PORT
    persistence: bool = False
    daemon: Daemon | None = None
    restarts: int = field(default=0)

    name = "redis"

    @property
    def address(self) -> str:
        return self.node.address

    def argv(self) -> list[str]:
        args = [
            redis_binary(), "--bind", self.node.address, "--port", str(self.port),
            "--protected-mode", "no", "--dir", str(self.workdir), "--daemonize", "no",
            "--logfile", str(self.log_path),
        ]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--save", "", "--appendonly", "no"]
        return args

    def start(self, timeout: float = 10.0) -> None:
        self.workdir = self.workdir.resolve()
        self.log_path = self.log_path.resolve()  # redis chdirs to --dir before opening it
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # what redis prints before its log file is open (a bad option, say) goes here
        self.daemon = self.node.spawn(f"redis-{self.node.name}", self.argv(),
                                      log_path=self.stderr_path)
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ping(self.node.address, self.port):
                return
            if self.daemon is not None and not self.daemon.alive():
                break
            time.sleep(0.02)
        tail = self.log_tail()
        raise RuntimeError(f"redis on {self.node.name} did not become ready; log tail:\n{tail}")

    @property
    def stderr_path(self) -> Path:
        return self.log_path.with_name(self.log_path.stem + ".stderr.log")

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for p in (self.log_path, self.stderr_path):
            try:
                out += p.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
        return "\n".join(out) or "(no log)"

    def kill(self) -> None:
        if self.daemon is not None:
            self.daemon.kill()

    def restart(self, timeout: float = 10.0) -> None:
        if self.daemon is not None and self.daemon.alive():
            self.daemon.kill()
        self.restarts += 1
        self.start(timeout)

    def pause(self) -> None:
        if self.daemon is not None:
            self.daemon.signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.daemon is not None:
            self.daemon.signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop(grace=2.0)

    def version(self) -> str:
        return redis_version()
