"""Local processes: /proc helpers and the handle of a daemon started on this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.errors import BadInput


class ForeignProc(BadInput):
    """/proc shows another PID namespace than this process's own: a PID read there
    names another process (or none), so every liveness check would be wrong."""


def parse_stat(text: str) -> tuple[str, int]:
    """(state letter, start time) from a /proc/<pid>/stat line. The command name may
    hold spaces and parentheses: the fields after it follow its last ')'."""
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)


def parse_boottime_offset(text: str, hz: int) -> int:
    """The boottime offset of a time namespace (/proc/self/timens_offsets), in ticks."""
    for line in text.splitlines():
        name, *rest = line.split()
        if name in ("boottime", "7") and len(rest) == 2:  # by name, or clock id (old kernels)
            return int(rest[0]) * hz + int(rest[1]) * hz // 1_000_000_000
    return 0


def check_proc(proc: str = "/proc") -> None:
    """Raise ForeignProc unless `proc` shows this process's own PID namespace (as it
    does unless a chroot or container mounted one of another namespace, or none)."""
    try:
        me = os.readlink(f"{proc}/self")
    except OSError:
        me = None
    if me != str(os.getpid()):
        seen = "no /proc/self" if me is None else f"it calls this process {me}"
        raise ForeignProc(
            f"{proc} is not this PID namespace's ({seen}, the kernel {os.getpid()}): the "
            "processes lockcheck starts could not be told alive or gone; mount this "
            "namespace's own (mount -t proc proc /proc)")


def _stat(pid: int) -> tuple[str, int] | None:
    check_proc()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return parse_stat(fh.read())
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
        return None


def pid_state(pid: int) -> str | None:
    """The process state letter from /proc (R, S, T, Z, ...), or None if gone."""
    st = _stat(pid)
    return None if st is None else st[0]


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (kill -0 is true for zombies)."""
    state = pid_state(pid)
    return state is not None and state not in ("Z", "X")


def pid_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot: together with the PID it names one process.

    Ticks since boot, not a date from btime: the date moves with the wall clock (clock
    faults move it on ssh hosts), the ticks do not. A time namespace shifts what its
    readers see by its boottime offset: taken off, every reader sees the same number."""
    st = _stat(pid)
    if st is None:
        return None
    try:
        with open("/proc/self/timens_offsets", encoding="ascii") as fh:
            return st[1] - parse_boottime_offset(fh.read(), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):  # a kernel without time namespaces
        return st[1]


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
