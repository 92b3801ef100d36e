"""Local processes: /proc helpers and the handle of a daemon started on this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def replace_file(path: Path, text: str) -> None:
    """Write a file of this machine in one step: a process that reads it meanwhile
    (libfaketime reads its clock file at every clock call) sees the old text or the
    new, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass
class LocalDaemon:
    """A process started on this machine (in a namespace, say); we keep its PID.

    Satisfies `cluster.api.Daemon`."""

    name: str
    node: str
    argv: list[str]
    log_path: Path | None
    popen: subprocess.Popen[Any] | None
    pid: int

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
