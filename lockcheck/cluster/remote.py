"""A node reached through a command channel (`docker exec`, SSH): the `Node` interface
written once over a `Shell`, for the docker and ssh providers.

Everything is an argument list run by the node's own `sh`, never a string pasted
together: the few shell scripts here are constants and take their input as positional
parameters (`sh -c SCRIPT sh ARG...`). Daemons are started detached (`setsid`, all
their descriptors on files), so they outlive the `docker exec` or the SSH session that
started them; we keep each one's PID *and* its start time (field 22 of
`/proc/<pid>/stat`), and every signal checks both first, so a PID the node reused for
another process is never signalled.

Drop rules go into a chain of the run's own (`lc-<run id>`), jumped to from INPUT
(redirects: the nat chain of the same name, from PREROUTING); `remove_rules` deletes
the jumps and the chains, so a host lockcheck does not own keeps only its own rules.
"""

from __future__ import annotations

import signal as signals
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# $1 log file (its folder made, as the local provider does); the rest is the command.
# Prints "PID START" (START "-" if the process
# was already gone). In a non-interactive sh a background job is not a process group
# leader, so `setsid` execs in place: $! is the daemon itself.
LAUNCH = r'''log=$1; shift
read -r me rest 2>/dev/null </proc/self/stat; [ "$me" = "$$" ] || exit 4
mkdir -p "$(dirname "$log")" || exit 1
setsid "$@" </dev/null >>"$log" 2>&1 &
pid=$!
stat=$(cat "/proc/$pid/stat" 2>/dev/null) || { echo "$pid -"; exit 0; }
rest=${stat##*) }
set -f; set -- $rest
echo "$pid ${20}"
'''

# $1 PID, $2 its start time ("-": it was gone when started), then signal names to send
# in order. Exit 0: the process is alive (and was signalled); 3: it is gone, a zombie,
# or the PID now belongs to another process; 4: FOREIGN_PROC.
SIGNAL = r'''pid=$1; start=$2; shift 2; sigs=$*
read -r me rest 2>/dev/null </proc/self/stat; [ "$me" = "$$" ] || exit 4
[ "$start" != - ] || exit 3
stat=$(cat "/proc/$pid/stat" 2>/dev/null) || exit 3
rest=${stat##*) }
set -f; set -- $rest
case $1 in Z|X) exit 3;; esac
[ "${20}" = "$start" ] || exit 3
for s in $sigs; do kill -s "$s" "$pid" 2>/dev/null || exit 3; done
exit 0
'''

GONE = 3
# Both scripts first check that the node's /proc is its shell's own PID namespace's
# (/proc/self is the shell, read by the shell itself): in a chroot or container with
# another namespace's /proc mounted, a PID read there names another process, and a
# killed server would read as alive, a live one as gone.
FOREIGN_PROC = 4


def foreign_proc(where: str) -> RuntimeError:
    return RuntimeError(f"{where}: /proc there is not its own PID namespace's, so lockcheck "
                        "cannot tell its processes alive or gone; mount that namespace's "
                        "own (mount -t proc proc /proc)")

# $1 table, $2 the hook chain, $3 the run's chain; the rest is the rule to append
ADD_RULE = r'''t=$1; h=$2; c=$3; shift 3
iptables -w -t "$t" -N "$c" 2>/dev/null
iptables -w -t "$t" -C "$h" -j "$c" 2>/dev/null || iptables -w -t "$t" -I "$h" -j "$c" || exit 1
exec iptables -w -t "$t" -A "$c" "$@"
'''
# $1 the run's chain: the jumps to it, then the chain, in both tables; only ours
REMOVE_RULES = r'''c=$1
for th in filter:INPUT nat:PREROUTING; do
  t=${th%%:*}; h=${th#*:}
  while iptables -w -t "$t" -D "$h" -j "$c" 2>/dev/null; do :; done
  iptables -w -t "$t" -F "$c" 2>/dev/null; iptables -w -t "$t" -X "$c" 2>/dev/null
done
exit 0
'''


class Shell(Protocol):
    """A command channel to one node; every command runs as root there."""

    @property
    def where(self) -> str:
        """For messages: "container lc-1a2b3c-n1", "root@10.0.0.11:22"."""
        ...

    def run(self, argv: Sequence[str], *, timeout: float,
            stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run to completion: (exit code, stdout, stderr). Raises
        `subprocess.TimeoutExpired` after `timeout` seconds, OSError when the channel
        is broken."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Create or replace the file, in one step (a reader sees old or new)."""
        ...


def completed(argv: Sequence[str], code: int, out: bytes, err: bytes,
              check: bool) -> subprocess.CompletedProcess[str]:
    r = subprocess.CompletedProcess(list(argv), code, out.decode("utf-8", "replace"),
                                    err.decode("utf-8", "replace"))
    if check and code != 0:
        raise subprocess.CalledProcessError(code, list(argv), r.stdout, r.stderr)
    return r


def timed_out(argv: Sequence[str], timeout: float, code: int, elapsed: float) -> int:
    """The exit code of `timeout -k 2 T argv`: 124 is our `timeout` firing only if the
    command really ran that long (a command may exit 124 by itself)."""
    if code in (124, 137) and elapsed >= timeout:
        raise subprocess.TimeoutExpired(list(argv), timeout)
    return code


def signal_name(sig: int) -> str:
    return signals.Signals(sig).name.removeprefix("SIG")


@dataclass
class RemoteDaemon:
    """A process lockcheck started on a remote node (satisfies `cluster.api.Daemon`)."""

    name: str
    node: str
    pid: int
    start: str  # its start time on the node ("-" if it had exited at once)
    shell: Shell

    def _send(self, *sigs: str) -> bool:
        code, _, _ = self.shell.run(["sh", "-c", SIGNAL, "sh", str(self.pid), self.start,
                                     *sigs], timeout=10.0)
        if code == FOREIGN_PROC:
            raise foreign_proc(self.shell.where)
        return code == 0

    def alive(self) -> bool:
        return self._send()

    def signal(self, sig: int) -> bool:
        return self._send(signal_name(sig))

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        if self._send("CONT", "KILL"):
            self.wait(5.0)

    def stop(self, grace: float = 2.0) -> None:
        if self._send("CONT", "TERM") and not self.wait(grace):
            self._send("KILL")
            self.wait(5.0)


# the PIDs of gone processes: libfaketime's files of each, unless a live process that
# runs libfaketime has the PID now (they are its own); libfaketime leaves them behind
# even when its process exits cleanly (cluster/faketime.py)
REMOVE_FAKETIME_FILES = r'''for pid; do
  grep -qs libfaketime "/proc/$pid/maps" && continue
  rm -f "/dev/shm/faketime_shm_$pid" "/dev/shm/sem.faketime_sem_$pid"
done
'''


def remove_faketime_files(shell: Shell, pids: Sequence[int]) -> None:
    if pids:
        shell.run(["sh", "-c", REMOVE_FAKETIME_FILES, "sh", *map(str, pids)], timeout=20.0)


def kill_recorded(shell: Shell, pids: Sequence[Sequence[object]]) -> None:
    """SIGKILL each recorded (pid, start time) that is still that process."""
    for pid, start in pids:
        RemoteDaemon("leftover", shell.where, int(str(pid)), str(start), shell).kill()


@dataclass
class RemoteNode:
    """A server node behind a `Shell` (satisfies `cluster.api.Node`)."""

    name: str
    address: str
    workdir: Path
    chain: str
    shell: Shell
    on_spawn: Callable[[int, str], None] | None = None  # (pid, start): into the registry
    _chains: set[str] = field(default_factory=set)  # tables whose chain is hooked

    def run(self, argv: Sequence[str], *, timeout: float = 10.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        code, out, err = self.shell.run(argv, timeout=timeout)
        return completed(argv, code, out, err, check)

    def spawn(self, name: str, argv: Sequence[str], *, log: Path | None = None,
              env: Mapping[str, str] | None = None) -> RemoteDaemon:
        command = [*(["env", *(f"{k}={v}" for k, v in env.items())] if env else []), *argv]
        r = self.run(["sh", "-c", LAUNCH, "sh", str(log or "/dev/null"), *command],
                     check=False)
        if r.returncode == FOREIGN_PROC:
            raise foreign_proc(self.shell.where)
        try:
            pid_text, start = r.stdout.split()
            pid = int(pid_text)
        except ValueError:
            raise RuntimeError(f"starting {name} on {self.name} ({self.shell.where}) gave "
                               f"{r.stdout!r} {r.stderr.strip()!r}") from None
        if self.on_spawn is not None:
            self.on_spawn(pid, start)
        return RemoteDaemon(name=name, node=self.name, pid=pid, start=start, shell=self.shell)

    def write_file(self, path: Path, text: str) -> None:
        self.shell.write(str(path), text.encode())

    def fetch(self, path: Path, dest: Path) -> bool:
        code, out, _ = self.shell.run(["cat", str(path)], timeout=60.0)
        if code != 0:
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(out)
        return True

    # -- packet rules, in chains of the run's own --------------------------------------

    def _rule(self, table: str, hook: str, rule: Sequence[str]) -> None:
        """Append `rule` to the run's chain in `table`, made and hooked first if need be:
        one round trip, however far the node is."""
        self.run(["sh", "-c", ADD_RULE, "sh", table, hook, self.chain, *rule])
        self._chains.add(table)

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        if not sources:
            return
        if not 0 < probability <= 1:
            raise ValueError(f"drop probability must be in (0, 1], got {probability}")
        chance = ([] if probability >= 1 else
                  ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}"])
        self._rule("filter", "INPUT", ["-s", ",".join(sources), *chance, "-j", "DROP"])

    def heal(self) -> None:
        if "filter" in self._chains:  # no chain yet: nothing was ever blocked here
            self.run(["iptables", "-w", "-F", self.chain])

    def intercept(self, port: int, to_port: int, sources: Sequence[str]) -> None:
        if not sources:
            return
        self._rule("nat", "PREROUTING", ["-p", "tcp", "-s", ",".join(sources), "--dport",
                                         str(port), "-j", "REDIRECT", "--to-ports", str(to_port)])

    def unintercept(self) -> None:
        if "nat" in self._chains:
            self.run(["iptables", "-w", "-t", "nat", "-F", self.chain])


def remove_rules(shell: Shell, chain: str) -> None:
    """Delete the run's chains and the jumps to them, in both tables; only ours."""
    shell.run(["sh", "-c", REMOVE_RULES, "sh", chain], timeout=30.0)


def in_parallel(items: Sequence[Any], fn: Callable[[Any], Any]) -> list[Any]:
    """fn over items in threads; the first error is raised after all are done."""
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = fn(items[i])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
