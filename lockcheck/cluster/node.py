"""The node interface every provider implements, and the daemon handle it returns."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable


def pid_state(pid: int) -> str | None:
    """The process state letter from /proc (R, S, T, Z, ...), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name may contain spaces and parentheses: the state follows the last ')'
    return data.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (kill -0 is true for zombies)."""
    state = pid_state(pid)
    return state is not None and state not in ("Z", "X")


def pid_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot: together with the PID it names one process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
        return None


@dataclass
class Daemon:
    """A long-running process on a node, started by lockcheck; we keep its PID."""

    name: str
    node: str
    argv: list[str]
    log_path: Path | None
    popen: subprocess.Popen[Any] | None
    pid: int
    started_at: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            return False
        return pid_alive(self.pid)

    def signal(self, sig: int) -> bool:
        """Send `sig`; False if the process was already gone."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def wait(self, timeout: float) -> bool:
        """Wait until the process has exited (and reap it); True if it did in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen is not None:
                try:
                    self.popen.wait(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if not pid_alive(self.pid):
                return True
            time.sleep(0.02)
        return not self.alive()

    def stop(self, grace: float = 2.0) -> None:
        """SIGCONT (a paused process can't die of TERM), TERM, then KILL after `grace`."""
        self.signal(signal.SIGCONT)
        if self.signal(signal.SIGTERM) and not self.wait(grace):
            self.signal(signal.SIGKILL)
            self.wait(5.0)
        elif self.popen is not None:
            self.wait(0.5)

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        if self.signal(signal.SIGKILL):
            self.wait(5.0)


@runtime_checkable
class Node(Protocol):
    """A host lockcheck can run things on and cut off from other hosts."""

    name: str
    address: str

    def run(
        self, argv: Sequence[str], *, timeout: float = 10.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to completion on the node and return its output."""
        ...

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
    ) -> Daemon:
        """Start a daemon on the node; its PID is the process itself, not a wrapper."""
        ...

    def block(self, sources: Sequence[str]) -> None:
        """Drop every packet arriving from these addresses (a partition, one side)."""
        ...

    def heal(self) -> None:
        """Remove every drop rule lockcheck put on this node. Idempotent."""
        ...
