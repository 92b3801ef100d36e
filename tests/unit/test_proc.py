"""Telling a process alive or gone, wherever the controller or a node's shell runs.

A PID names a process only in the PID namespace that gave it, and /proc shows the
namespace it was mounted from. In a chroot or container with another namespace's /proc
(or none), every check by PID would read another process: a killed server alive, a
live one gone. Both the local checks (`cluster/node.py`) and the node's shell scripts
(`cluster/remote.py`) refuse to answer there instead; the tests in namespaces of their
own show it, and that where /proc is right a zombie still counts as gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lockcheck.cluster.node import (
    ForeignProc,
    check_proc,
    parse_boottime_offset,
    parse_stat,
    pid_alive,
    pid_start_time,
    pid_state,
)
from lockcheck.cluster.remote import RemoteDaemon, RemoteNode

ROOT = Path(__file__).resolve().parents[2]

# -- parsing -------------------------------------------------------------------------------

# fields 3.. of a real line: state, ppid, ..., field 22 (start time) is 4242
REST = "S 1 2 3 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 4242 1000 50 184467440737"


@pytest.mark.parametrize("comm", ["redis-server", "a b", "x) (y", ") S 1 2", "((", ""])
def test_the_fields_follow_the_last_parenthesis(comm: str) -> None:
    assert parse_stat(f"123 ({comm}) {REST}\n") == ("S", 4242)
    assert parse_stat(f"123 ({comm}) Z{REST[1:]}") == ("Z", 4242)


def test_a_truncated_line_is_an_error_not_a_guess() -> None:
    with pytest.raises((IndexError, ValueError)):
        parse_stat("123 (x) S 1 2")


@pytest.mark.parametrize(("text", "ticks"), [
    ("monotonic 0 0\nboottime 0 0\n", 0),
    ("monotonic 5 0\nboottime 1000 0\n", 100_000),
    ("monotonic 0 0\nboottime -30 500000000\n", -2_950),
    ("1 0 0\n7 12 0\n", 1_200),  # clock ids, as the first kernels with them wrote it
    ("", 0),
])
def test_the_boottime_offset_in_ticks(text: str, ticks: int) -> None:
    assert parse_boottime_offset(text, 100) == ticks


# -- this machine ----------------------------------------------------------------------------


def test_this_proc_is_ours() -> None:
    check_proc()


def test_a_proc_of_another_namespace_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "proc"
    other.mkdir()
    with pytest.raises(ForeignProc, match="no /proc/self"):
        check_proc(str(other))
    (other / "self").symlink_to("1")  # what a namespace's /proc calls us from outside
    with pytest.raises(ForeignProc, match="calls this process 1"):
        check_proc(str(other))


def test_a_zombie_is_gone_and_a_reaped_process_too() -> None:
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(p.pid) and pid_start_time(p.pid) is not None
        os.kill(p.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_state(p.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid_state(p.pid) == "Z" and not pid_alive(p.pid)
    finally:
        p.kill()
        p.wait()
    assert pid_state(p.pid) is None and not pid_alive(p.pid)


# -- the node's scripts, run by a shell of this machine --------------------------------------


@dataclass
class LocalShell:
    """A `cluster.remote.Shell` that runs on this machine, behind `prefix` (nsenter)."""

    prefix: Sequence[str] = ()
    calls: list[list[str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return " ".join(self.prefix) or "this machine"

    def run(self, argv: Sequence[str], *, timeout: float,
            stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        self.calls.append(list(argv))
        r = subprocess.run([*self.prefix, *argv], input=stdin, capture_output=True,
                           timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def write(self, path: str, data: bytes) -> None:
        Path(path).write_bytes(data)


def node(tmp_path: Path, shell: LocalShell) -> RemoteNode:
    return RemoteNode(name="n1", address="127.0.0.1", workdir=tmp_path, chain="lc-test",
                      shell=shell)


def gone_within(d: RemoteDaemon, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while d.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_launch_and_signal_name_one_process(tmp_path: Path) -> None:
    d = node(tmp_path, LocalShell()).spawn("sleeper", ["sleep", "30"], log=tmp_path / "log")
    try:
        assert d.alive() and d.start == str(pid_start_time(d.pid))
        other = RemoteDaemon("reused", "n1", d.pid, str(int(d.start) + 1), d.shell)
        assert not other.alive() and not other.signal(signal.SIGKILL)  # a reused PID
        never = RemoteDaemon("exited at once", "n1", d.pid, "-", d.shell)
        assert not never.alive()  # its PID may be anyone's now
        assert d.alive()
    finally:
        d.kill()
    assert gone_within(d, 10)


# -- in PID namespaces of their own (root, unshare, nsenter) ----------------------------------

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="needs root, unshare and nsenter (util-linux) for PID namespaces")


@pytest.fixture
def pid_namespace(request: pytest.FixtureRequest) -> Iterator[int]:
    """A PID namespace whose init is a `sleep` (it reaps nobody: a killed child stays a
    zombie); with `mount_proc`, in a mount namespace with its own /proc, as in a
    container; without, it sees this machine's /proc, as in a chroot that mounted the
    host's. Yields the host PID of its init, to nsenter."""
    argv = ["unshare", "--pid", "--fork", "--kill-child"]
    if request.param:
        argv += ["--mount", "--mount-proc"]
    holder = subprocess.Popen([*argv, "sleep", "300"], start_new_session=True)
    try:
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children")
        deadline = time.monotonic() + 10

        def init() -> int | None:
            # the child is the namespace's init once it runs `sleep`: before its exec it
            # may not have mounted its own /proc yet (a loaded machine widens that gap,
            # and a node entered then sees this machine's /proc)
            pids = children.read_text().split()
            if not pids:
                return None
            try:
                comm = Path(f"/proc/{pids[0]}/comm").read_text().strip()
            except OSError:
                return None
            return int(pids[0]) if comm == "sleep" else None

        while init() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = init()
        assert pid is not None, "unshare's child never ran its init"
        yield pid
    finally:
        holder.kill()  # --kill-child: its init and everything in the namespace go too
        holder.wait()


@needs_namespaces
@pytest.mark.parametrize("pid_namespace", [True], indirect=True)
def test_in_a_namespace_with_its_own_proc_a_killed_server_is_gone(
        tmp_path: Path, pid_namespace: int) -> None:
    shell = LocalShell(["nsenter", "--target", str(pid_namespace), "--pid", "--mount", "--"])
    d = node(tmp_path, shell).spawn("listener", ["sleep", "60"])
    assert d.pid < 100 and d.alive()  # a PID of the namespace
    d.kill()
    assert gone_within(d, 10)  # a zombie there (init is `sleep`): gone all the same


@needs_namespaces
@pytest.mark.parametrize("pid_namespace", [False], indirect=True)
def test_with_another_namespaces_proc_the_node_refuses_to_answer(
        tmp_path: Path, pid_namespace: int) -> None:
    """What a chroot with the host's /proc does: the PID of the namespace names another
    process in /proc (the host's PID 2 is a kernel thread, alive for ever), so a killed
    listener read as alive. Now the first command says why it cannot answer."""
    shell = LocalShell(["nsenter", "--target", str(pid_namespace), "--pid", "--"])
    with pytest.raises(RuntimeError, match="/proc there is not its own PID namespace's"):
        node(tmp_path, shell).spawn("listener", ["sleep", "60"])


@needs_namespaces
def test_a_controller_with_another_namespaces_proc_refuses_to_answer() -> None:
    """The controller's own checks, run in a PID namespace that sees this machine's
    /proc: its child's PID is another process there."""
    code = ("import subprocess\n"
            "from lockcheck.cluster.node import ForeignProc, pid_alive\n"
            "p = subprocess.Popen(['sleep', '30']); p.kill(); p.wait()\n"
            "try:\n    print('alive' if pid_alive(p.pid) else 'gone')\n"
            "except ForeignProc as e:\n    print('refused:', e)\n")
    r = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c",
                        code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.startswith("refused: /proc is not this PID namespace's"), r


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None
                    or not Path("/proc/self/timens_offsets").exists(),
                    reason="needs root, unshare and a kernel with time namespaces")
def test_a_start_time_reads_the_same_from_a_time_namespace() -> None:
    """/proc/<pid>/stat gives the start time shifted by the reader's boottime offset: a
    lockcheck in such a namespace would take a live run's owner for gone and reap it."""
    code = ("import sys\nfrom lockcheck.cluster.node import pid_start_time\n"
            "print(pid_start_time(int(sys.argv[1])))\n")
    r = subprocess.run(["unshare", "--time", "--boottime", "1000", "--fork", sys.executable,
                        "-c", code, str(os.getpid())], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == pid_start_time(os.getpid())
