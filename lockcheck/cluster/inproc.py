"""The inproc provider: nodes and clients are plain processes of this machine, on loopback.

No namespaces, no bridge, no root: node `nI` is the address 127.A.B.(10+I) and client
`cI` 127.A.B.(100+I), where A.B is this run's own (every 127/8 address is this
machine's loopback on Linux), so each node's server can listen on the same port.
Nothing can be cut off, so partitions, packet loss and delay are refused before the
run; kill, pause, client pauses and clock faults act on processes and work as on the
local provider.

Every process a run starts is registered with its PID and start time (a PID may be
reused once its process is gone), and carries `LOCKCHECK_RUN=<run id>` in its
environment; teardown and the next run's reap stop only those.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lockcheck.cluster.clienthosts import PlainClient
from lockcheck.cluster.faketime import remove_shm
from lockcheck.cluster.netns import _kill_pids, new_run_id
from lockcheck.cluster.node import LocalDaemon, check_proc, pid_alive, pid_start_time
from lockcheck.cluster.providers import ClusterRequest, Provider
from lockcheck.cluster.state import Registry, RunState, keep_running
from lockcheck.errors import BadInput

NAME = "inproc"
NODE_OFFSET = 10  # n1 = 127.A.B.11
CLIENT_OFFSET = 100  # c0 = 127.A.B.100
MAX_NODES = 80
MAX_CLIENTS = 150
RUN_ENV = "LOCKCHECK_RUN"
CUT = ("every process of an inproc run shares this machine's loopback, so nothing can "
       "be cut off; use --provider local (as root)")
# the faults that drop, or redirect, a node's or client's traffic
REFUSED = {n: CUT for n in ("partition", "partition-one", "partition-majority",
                            "partition-halves", "partition-ring", "partition-bridge",
                            "partition-clients", "partition-primary", "partition-holder",
                            "bridge-clock", "loss", "delay", "reply-loss")}


@dataclass
class InprocHost(PlainClient):
    """A node or a client: a name and an address on loopback; its processes are
    plain processes of this machine."""

    run_id: str = ""

    def spawn(self, name: str, argv: Sequence[str], *, log: Path | None = None,
              log_path: Path | None = None, env: Mapping[str, str] | None = None,
              stdin: int | IO[Any] | None = None,
              stdout: int | IO[Any] | None = None) -> LocalDaemon:
        return super().spawn(name, argv, log=log, log_path=log_path,
                             env={**(env or {}), RUN_ENV: self.run_id},
                             stdin=stdin, stdout=stdout)

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        raise RuntimeError(f"{self.name}: {CUT}")

    def intercept(self, port: int, to_port: int, sources: Sequence[str]) -> None:
        raise RuntimeError(f"{self.name}: {CUT}")

    def unintercept(self) -> None:
        """Nothing was ever redirected here."""


def run_workdir(run_id: str) -> Path:
    # not /tmp/lockcheck-<id>: the local provider takes such a folder without a
    # registry entry of its own for an orphan
    return Path(tempfile.gettempdir()) / f"lockcheck-inproc-{run_id}"


def pick_block(run_id: str, taken: set[str]) -> str:
    """127.A.B: from the run id, moved on past the blocks of other live inproc runs."""
    start = int(run_id[:4], 16)
    for k in range(65536):
        v = (start + k) % 65536
        a, b = 1 + v // 256 % 254, v % 256  # never 127.0.x.x, where 127.0.0.1 is
        block = f"127.{a}.{b}"
        if block not in taken:
            return block
    raise BadInput("no free loopback block for a new inproc run")


@dataclass
class InprocCluster:
    n_nodes: int
    n_clients: int
    registry: Registry
    kind: str = "test"
    run_id: str = field(default_factory=new_run_id)
    nodes: list[InprocHost] = field(default_factory=list)
    clients: list[InprocHost] = field(default_factory=list)
    state: RunState | None = None

    provider = NAME

    @property
    def workdir(self) -> Path:
        return run_workdir(self.run_id)

    def _note_pid(self, pid: int) -> None:
        assert self.state is not None
        self.state.pids.append(pid)
        self.state.remote.setdefault("daemons", []).append([pid, pid_start_time(pid)])
        self.registry.save(self.state)

    def up(self) -> InprocCluster:
        if not 1 <= self.n_nodes <= MAX_NODES:
            raise BadInput(f"--nodes must be between 1 and {MAX_NODES} with --provider inproc")
        if not 0 <= self.n_clients <= MAX_CLIENTS:
            raise BadInput(f"--concurrency must be between 1 and {MAX_CLIENTS}")
        with self.registry.locked():  # two runs starting at once pick different blocks
            taken = {st.subnet.rsplit(".", 2)[0] for st in self.registry.all()
                     if st.provider == NAME}
            block = pick_block(self.run_id, taken)
            me = os.getpid()
            self.state = RunState(
                run_id=self.run_id, kind=self.kind, owner_pid=me,
                owner_start=pid_start_time(me), subnet=f"{block}.0/24", bridge="",
                workdir=str(self.workdir), created=time.time(), provider=NAME)
            self.registry.save(self.state)  # before creating anything
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        specs = [(f"n{i + 1}", f"{block}.{NODE_OFFSET + i + 1}") for i in range(self.n_nodes)]
        specs += [(f"c{i}", f"{block}.{CLIENT_OFFSET + i}") for i in range(self.n_clients)]
        for name, addr in specs:
            host = InprocHost(name=name, address=addr, netns="", workdir=self.workdir / name,
                              chain="", on_spawn=self._note_pid, run_id=self.run_id)
            (self.nodes if name.startswith("n") else self.clients).append(host)
            self.state.nodes[name] = addr
        self.registry.save(self.state)
        return self

    def describe(self) -> dict[str, Any]:
        st = self.state
        return {"provider": NAME, "run_id": self.run_id, "hosts": dict(st.nodes) if st else {}}

    def keep(self, services: Mapping[str, Mapping[str, object]]) -> None:
        if self.state is None:
            return
        self.kind = "cluster"
        keep_running(self.state, self.registry, services)
        self.state = None  # down() must not remove it now

    def down(self) -> None:
        if self.state is None:
            return
        destroy(self.state, self.registry)
        self.state = None


def ours(pid: int, start: int | None) -> bool:
    """The process is still the one the run started (not a reused PID)."""
    return pid_alive(pid) and pid_start_time(pid) == start


def destroy(state: RunState, registry: Registry) -> None:
    """Stop the run's processes, remove libfaketime's files and the run's folder."""
    pids = [int(p) for p, start in state.remote.get("daemons", []) if ours(int(p), start)]
    _kill_pids(pids)
    remove_shm(state.pids)  # only for processes that are gone
    if Path(state.workdir).name.startswith("lockcheck-inproc-"):
        shutil.rmtree(state.workdir, ignore_errors=True)
    registry.remove(state.run_id)


def reap(registry: Registry) -> list[str]:
    """The inproc runs whose lockcheck died; never a live one or one kept on purpose."""
    cleaned = []
    with registry.locked():
        for st in registry.all():
            if st.provider == NAME and st.kind != "cluster" and not st.owner_alive():
                destroy(st, registry)
                cleaned.append(st.run_id)
    return cleaned


def remove_kept(registry: Registry) -> list[str]:
    removed = []
    for st in registry.all():
        if st.provider == NAME and st.kind == "cluster":
            destroy(st, registry)
            removed.append(st.run_id)
    return removed


def prerequisites() -> str | None:
    try:
        check_proc()
    except BadInput as e:
        return str(e)
    return None


def check_subnet(subnet: str) -> None:
    raise BadInput("--subnet is not used by --provider inproc: its hosts are addresses "
                   "of this machine's loopback")


def _make(req: ClusterRequest) -> InprocCluster:
    return InprocCluster(req.nodes, req.clients, req.registry, kind=req.kind)


PROVIDER = Provider(
    name=NAME,
    description="plain processes of this machine on loopback addresses, without "
                "root: kill, pause, client pauses and clocks, no partitions",
    make=_make, reap=reap, remove_kept=remove_kept, prerequisites=prerequisites,
    max_nodes=MAX_NODES, max_clients=MAX_CLIENTS, check_subnet=check_subnet,
    refused=REFUSED, place="a process on loopback", pids_here=True,
    notes={"kill": "SIGKILL of the server process", "pause": "SIGSTOP of the server "
           "process", "clock": "libfaketime per process, as on the local provider"})
