"""Commands over long-lived remote shells: one channel (an SSH session, a `docker exec`
with stdin) runs many commands.

Opening an SSH exec channel per command costs a fork of sshd's session, `sudo`, and
the login shell's start-up files (bash reads ~/.bashrc for every SSH command; a pyenv
there costs a second per command); a `docker exec` costs about 0.1 s of daemon round
trips. A fault must land when it is due (a server killed and restarted 100 ms later),
so each node keeps a few sessions open: `sh` reading requests from its stdin, one at a
time.

A request is one line: the command (an argument list joined with `shlex.join`, run in a
subshell with `eval`, so the quoting is exactly the argument list's) and its stdin, both
in base64. The reply is a header line `\\x1e<exit code> <stdout bytes> <stderr bytes>`
followed by the raw bytes. stdout and stderr go through files in a folder the session
makes and removes when it ends (stdin closed, the connection lost, or a signal). `read`
in sh takes one byte at a time from a pipe, so it never reads past its line.
"""

from __future__ import annotations

import base64
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lockcheck.cluster.remote import timed_out

MAX_SESSIONS = 4  # per node: the controller's threads that may run commands at once

# $1: the folder under which this session keeps its scratch files; $2: a folder to
# remove as well at the end if it is empty then (the run's folder, at the end of a run:
# the last session of the last host to end removes both)
DRIVER = r'''mkdir -p "$1" && d=$(mktemp -d "$1/s.XXXXXX") || exit 1
trap 'rm -rf "$d"; rmdir "$1" 2>/dev/null; [ -z "$2" ] || rmdir "$2" 2>/dev/null' EXIT
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


class Channel(Protocol):
    """A remote process's stdin and stdout (its stderr kept aside), as byte streams."""

    @property
    def closed(self) -> bool: ...

    def sendall(self, data: bytes) -> None: ...

    def recv(self, n: int) -> bytes:
        """Some stdout bytes; b"" once it has ended. Raises TimeoutError."""
        ...

    def settimeout(self, seconds: float) -> None: ...

    def stderr(self) -> bytes:
        """What the process wrote on stderr so far (why a shell did not start)."""
        ...

    def finish(self, timeout: float) -> None:
        """Close its stdin and wait (up to `timeout`) until the process has ended."""
        ...

    def close(self) -> None: ...


# runs an argument list on the node (as root) and returns the channel to it
Start = Callable[[Sequence[str]], Channel]


@dataclass
class Session:
    """One remote `sh` running DRIVER."""

    chan: Channel
    buf: bytearray = field(default_factory=bytearray)

    @classmethod
    def open(cls, start: Start, scratch: str, remove: str) -> Session:
        chan = start(["sh", "-c", DRIVER, "sh", scratch, remove])
        chan.settimeout(60.0)
        s = cls(chan)
        try:
            line = s._line()
        except OSError as e:
            line = f"({e})".encode()
        if line != b"ready":
            err = chan.stderr()
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
            raise SessionBroken(str(e) or type(e).__name__) from None

    @property
    def usable(self) -> bool:
        return not self.chan.closed

    def close(self) -> None:
        self.chan.close()

    def end(self, timeout: float = 10.0) -> None:
        """Close its stdin and wait until the remote sh has removed its files."""
        try:
            self.chan.finish(timeout)
        except OSError:
            pass
        finally:
            self.close()


@dataclass
class SessionPool:
    """Up to MAX_SESSIONS sessions to one node, each used by one thread at a time."""

    start: Start
    scratch: str
    remove: str = ""  # DRIVER's $2
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
            return Session.open(self.start, self.scratch, self.remove)
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
        """End every idle session, each after its remote sh has cleaned up."""
        with self.cond:
            idle, self.idle = self.idle, []
            self.opened -= len(idle)
        for s in idle:
            s.end()


# $1 file: stdin written beside it, then renamed over it (readers see old or new)
WRITE = r'''mkdir -p "$(dirname "$1")" && cat >"$1.lc-tmp" && mv -f "$1.lc-tmp" "$1"'''


@dataclass
class PooledShell:
    """A `cluster.remote.Shell` over a SessionPool: every command under `timeout` on
    the node, so one that hangs there ends there too."""

    where: str
    pool: SessionPool

    def run(self, argv: Sequence[str], *, timeout: float,
            stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        command = shlex.join(["timeout", "-k", "2", f"{timeout:g}", *argv])
        t0 = time.monotonic()
        try:
            code, out, err = self.pool.call(command, stdin, timeout)
        except SessionBroken as e:
            raise OSError(f"{self.where}: {e}") from None
        return timed_out(argv, timeout, code, time.monotonic() - t0), out, err

    def write(self, path: str, data: bytes) -> None:
        code, _, err = self.run(["sh", "-c", WRITE, "sh", path], timeout=30.0, stdin=data)
        if code != 0:
            raise OSError(f"writing {path} on {self.where}: {err.decode().strip()}")

    def close(self) -> None:
        """End the sessions: each removes its scratch files, and the last one the
        scratch folder and `remove`, if empty by then."""
        self.pool.close()
