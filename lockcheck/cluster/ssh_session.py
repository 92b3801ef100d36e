"""Commands over long-lived remote shells: one SSH channel runs many commands.

Opening an SSH exec channel per command costs a fork of sshd's session, `sudo`, and
the login shell's start-up files (bash reads ~/.bashrc for every SSH command; a
pyenv there costs a second per command). A fault must land when it is due, so each
host keeps a few sessions open: `sh` reading requests from its stdin, one at a time.

A request is one line: the command (an argument list joined with `shlex.join`, run in a
subshell with `eval`, so the quoting is exactly the argument list's) and its stdin, both
in base64. The reply is a header line `\\x1e<exit code> <stdout bytes> <stderr bytes>`
followed by the raw bytes. stdout and stderr go through files in a folder the session
makes in the run's folder and removes when it ends (stdin closed, the connection lost,
or a signal). `read` in sh takes one byte at a time from a pipe, so it never reads past
its line.
"""

from __future__ import annotations

import base64
import shlex
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_SESSIONS = 4  # per host: the controller's threads that may run commands at once

# $1: the folder under which this session keeps its two scratch files
DRIVER = r'''mkdir -p "$1" && d=$(mktemp -d "$1/s.XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
trap 'exit 1' HUP INT TERM PIPE
echo ready
while IFS=' ' read -r cmd data; do
  if [ "$data" = - ]; then in=/dev/null; else printf %s "$data" | base64 -d >"$d/in"; in=$d/in; fi
  (eval "$(printf %s "$cmd" | base64 -d)") <"$in" >"$d/out" 2>"$d/err"; rc=$?
  printf '\036%s %s %s\n' "$rc" "$(wc -c <"$d/out")" "$(wc -c <"$d/err")"
  cat "$d/out" "$d/err"
done
'''


class SessionBroken(OSError):
    """The session's channel failed or answered out of step; it is closed."""


@dataclass
class Session:
    """One remote `sh` running DRIVER."""

    chan: Any  # paramiko.Channel
    buf: bytearray = field(default_factory=bytearray)

    @classmethod
    def open(cls, transport: Any, prefix: Sequence[str], scratch: str) -> Session:
        chan = transport.open_session(timeout=10.0)
        chan.settimeout(60.0)
        chan.exec_command(shlex.join([*prefix, "sh", "-c", DRIVER, "sh", scratch]))
        s = cls(chan)
        try:
            line = s._line()
        except OSError as e:
            s.close()
            raise SessionBroken(f"the remote shell did not start: {e}") from None
        if line != b"ready":
            err = chan.recv_stderr(4096) if chan.recv_stderr_ready() else b""
            s.close()
            raise SessionBroken("the remote shell did not start: "
                                f"{(line + b' ' + err).decode(errors='replace').strip()}")
        return s

    def _fill(self) -> None:
        chunk = self.chan.recv(65536)
        if not chunk:
            raise SessionBroken("the remote shell ended")
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\n" not in self.buf:
            self._fill()
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def call(self, command: str, stdin: bytes | None,
             timeout: float) -> tuple[int, bytes, bytes]:
        data = b"-" if stdin is None else base64.b64encode(stdin)
        request = base64.b64encode(command.encode()) + b" " + data + b"\n"
        self.chan.settimeout(timeout + 10.0)  # the command has its own `timeout` there
        try:
            self.chan.sendall(request)
            header = self._line()
            if not header.startswith(b"\x1e"):
                raise SessionBroken(f"unexpected reply {header[:80]!r}")
            code, n_out, n_err = (int(x) for x in header[1:].split())
            return code, self._exactly(n_out), self._exactly(n_err)
        except TimeoutError:
            self.close()
            raise subprocess.TimeoutExpired(command, timeout) from None
        except (OSError, ValueError) as e:
            self.close()
            raise SessionBroken(str(e)) from None

    @property
    def usable(self) -> bool:
        return not self.chan.closed

    def close(self) -> None:
        self.chan.close()  # the remote sh sees its stdin end and removes its folder


@dataclass
class SessionPool:
    """Up to MAX_SESSIONS sessions to one host, each used by one thread at a time."""

    transport: Any
    prefix: tuple[str, ...]
    scratch: str
    idle: list[Session] = field(default_factory=list)
    opened: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    def _take(self) -> Session:
        with self.cond:
            while True:
                while self.idle:
                    s = self.idle.pop()
                    if s.usable:
                        return s
                    self.opened -= 1
                if self.opened < MAX_SESSIONS:
                    self.opened += 1
                    break
                self.cond.wait()
        try:
            return Session.open(self.transport, self.prefix, self.scratch)
        except BaseException:
            with self.cond:
                self.opened -= 1
                self.cond.notify()
            raise

    def _give(self, s: Session) -> None:
        with self.cond:
            if s.usable:
                self.idle.append(s)
            else:
                self.opened -= 1
            self.cond.notify()

    def call(self, command: str, stdin: bytes | None,
             timeout: float) -> tuple[int, bytes, bytes]:
        s = self._take()
        try:
            return s.call(command, stdin, timeout)
        finally:
            self._give(s)

    def close(self) -> None:
        with self.cond:
            for s in self.idle:
                s.close()
            self.idle.clear()
