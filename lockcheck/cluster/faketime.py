"""libfaketime, one process at a time: a wall clock lockcheck can move at run time.

The machine's clock is never touched. A faked process is started with libfaketime
preloaded and reads its time spec from a file of its own (`FAKETIME_TIMESTAMP_FILE`,
re-read at every clock call with `FAKETIME_NO_CACHE`), so writing that file moves its
clock from the next call on. What was measured (docs/benchmarks.md, infra.md):

* Only offsets are written ("+1.250 x1"). A rate ("x4") counts from the process's
  start, so switching to it makes the clock jump by the time the process has run,
  and once set it sticks even when a later spec has no "x". A fast clock is made by
  the nemesis instead, by moving the offset in small steps (`nemesis/clock.py`).
* `FAKETIME_DONT_FAKE_MONOTONIC`: only the wall clock moves. Redis expires keys by
  the wall clock (Kleppmann's scenario B), and our workers stamp the history with
  CLOCK_MONOTONIC, which must stay true for every process of a run.
* redis-server hangs at start under plain libfaketime (its jemalloc asks the clock
  while libfaketime initialises); glibc's malloc wrapper preloaded first avoids it.
* Python's `time.sleep` fails with EINVAL under `FAKETIME_DONT_FAKE_MONOTONIC`
  (libfaketime 0.9.10 shifts its absolute CLOCK_MONOTONIC deadline by the fake
  offset); a faked worker sleeps with `select` instead (`FAKED_ENV`).
* libfaketime leaves `/dev/shm/faketime_shm_<pid>` and `sem.faketime_sem_<pid>`
  behind, even when the process exits normally: `remove_shm` deletes them for every
  process of a run once it is gone (teardown, and the next run's reap after a crash).
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from lockcheck.cluster.node import pid_alive
from lockcheck.errors import BadInput

if TYPE_CHECKING:
    from lockcheck.cluster.api import Node

SHM = Path("/dev/shm")
FAKED_ENV = "LOCKCHECK_FAKE_CLOCK"  # set in a faked worker: sleep without clock_nanosleep


def _libdirs() -> list[Path]:
    arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    return [Path("/usr/lib") / arch, Path("/lib") / arch, Path("/usr/lib"), Path("/lib")]


def libfaketime() -> Path | None:
    for d in _libdirs():
        p = d / "faketime" / "libfaketime.so.1"
        if p.is_file():
            return p
    return None


def malloc_shim() -> Path | None:
    """glibc's malloc wrapper, which keeps redis-server's jemalloc out of libfaketime's
    way (infra.md §4d)."""
    for d in _libdirs():
        p = d / "libc_malloc_debug.so.0"
        if p.is_file():
            return p
    return None


def require_libfaketime() -> Path:
    lib = libfaketime()
    if lib is None:
        raise BadInput("clock faults need libfaketime; install it with: "
                       "apt-get install -y libfaketime")
    return lib


def spec(offset_ms: float) -> str:
    """libfaketime's spec for a clock `offset_ms` ahead of the real one (always x1)."""
    return f"{offset_ms / 1000.0:+.3f} x1\n"


def env(clock_file: Path, *, shim: bool) -> dict[str, str]:
    """The environment of a process whose wall clock reads `clock_file`."""
    libs = [require_libfaketime()]
    if shim:
        m = malloc_shim()
        if m is None:
            raise BadInput("redis-server under libfaketime needs glibc's "
                           "libc_malloc_debug.so.0 (package libc6), which is missing")
        libs.insert(0, m)
    preload = ":".join(str(p) for p in libs)
    if os.environ.get("LD_PRELOAD"):
        preload += ":" + os.environ["LD_PRELOAD"]
    return {"LD_PRELOAD": preload, "FAKETIME_TIMESTAMP_FILE": str(clock_file),
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1", FAKED_ENV: "1"}


def server_clock_file(node: Node) -> Path:
    """The clock file of the server a database runs on `node` (one server per node)."""
    return node.workdir / "faketime.rc"


def server_env(node: Node, *, shim: bool) -> dict[str, str]:
    """The environment of a server about to start on `node` under a clock lockcheck can
    move; its clock starts true (so does a server restarted after a kill)."""
    node.write_file(server_clock_file(node), spec(0))
    return env(server_clock_file(node), shim=shim)


def set_server_clock(node: Node, offset_ms: float) -> None:
    node.write_file(server_clock_file(node), spec(offset_ms))


def shm_files(pid: int) -> list[Path]:
    return [SHM / f"faketime_shm_{pid}", SHM / f"sem.faketime_sem_{pid}"]


def runs_libfaketime(pid: int) -> bool:
    """The live process `pid` has libfaketime loaded (so its files are its own)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as fh:
            return "libfaketime" in fh.read()
    except OSError:
        return False


def remove_shm(pids: Iterable[int]) -> list[Path]:
    """Delete libfaketime's files of these processes, unless the PID belongs to a live
    process that runs libfaketime (then they are its own; a PID is reused within
    minutes on a busy machine, and a stale file makes the next faked process with that
    PID fail to start its clock). Returns what was removed."""
    removed = []
    for pid in set(pids):
        if pid_alive(pid) and runs_libfaketime(pid):
            continue
        for p in shm_files(pid):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed.append(p)
    return removed
