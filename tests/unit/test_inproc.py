"""The inproc provider: hosts on loopback addresses, plain processes, no root.

A cluster registers itself before it starts anything; every process it starts is
registered (PID and start time) and marked with the run id; `down` and a later
reap stop exactly those. Faults that need to cut traffic are refused in one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockcheck import exitcodes
from lockcheck.cli import main
from lockcheck.cluster.inproc import REFUSED, RUN_ENV, InprocCluster, pick_block, reap
from lockcheck.cluster.node import pid_alive, pid_start_time
from lockcheck.cluster.providers import check_provider, provider
from lockcheck.cluster.state import Registry
from lockcheck.errors import BadInput
from lockcheck.nemesis.registry import NEMESES
from lockcheck.spec import TestSpec

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(x.decode().split("=", 1) for x in raw if b"=" in x)


def test_a_cluster_on_loopback_and_what_down_removes(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg")
    c = InprocCluster(3, 2, reg).up()
    try:
        [st] = reg.all()
        assert st.provider == "inproc" and st.owner_pid == os.getpid()
        block = c.nodes[0].address.rsplit(".", 1)[0]
        assert [n.address for n in c.nodes] == [f"{block}.{i}" for i in (11, 12, 13)]
        assert [h.address for h in c.clients] == [f"{block}.100", f"{block}.101"]
        assert all(not h.own_network for h in c.clients)
        assert c.workdir.stat().st_mode & 0o777 == 0o700
        d = c.nodes[1].spawn("sleeper", SLEEP, log=c.nodes[1].workdir / "s.log")
        assert environ(d.pid)[RUN_ENV] == c.run_id
        assert reg.all()[0].remote["daemons"] == [[d.pid, pid_start_time(d.pid)]]
        other = InprocCluster(1, 0, reg).up()  # a second run takes another block
        assert other.nodes[0].address.rsplit(".", 1)[0] != block
        other.down()
    finally:
        c.down()
    assert d.wait(5) and not d.alive()
    assert reg.all() == [] and not c.workdir.exists()


def test_blocks_skip_those_taken_and_never_use_127_0() -> None:
    assert pick_block("000000", set()) == "127.1.0"
    assert pick_block("000000", {"127.1.0"}) == "127.1.1"
    blocks = [pick_block(f"{v:04x}00", set()) for v in range(0, 65536, 97)]
    assert not [b for b in blocks if b.startswith("127.0.")]


def test_reap_stops_a_dead_runs_processes_but_not_a_reused_pid(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg")
    c = InprocCluster(1, 0, reg).up()
    mine = c.nodes[0].spawn("sleeper", SLEEP)
    stranger = subprocess.Popen(SLEEP)  # a PID the registry names with another start time
    try:
        assert c.state is not None
        c.state.remote["daemons"].append([stranger.pid, 1])
        c.state.owner_pid, c.state.owner_start = 2**22 + 1, 1  # its lockcheck died
        reg.save(c.state)
        assert reap(reg) == [c.run_id]
        assert mine.wait(5)
        assert pid_alive(stranger.pid)
        assert reg.all() == [] and not c.workdir.exists()
    finally:
        stranger.send_signal(signal.SIGKILL)
        stranger.wait()
        c.state = None


def test_a_live_run_is_not_reaped(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg")
    c = InprocCluster(1, 0, reg).up()
    try:
        assert reap(reg) == []
        assert [s.run_id for s in reg.all()] == [c.run_id]
    finally:
        c.down()


def test_hosts_cannot_be_cut_off(tmp_path: Path) -> None:
    c = InprocCluster(1, 1, Registry(tmp_path / "reg")).up()
    try:
        for h in (*c.nodes, *c.clients):
            with pytest.raises(RuntimeError, match="nothing can be cut off"):
                h.block(["127.0.0.1"])
            with pytest.raises(RuntimeError, match="nothing can be cut off"):
                h.intercept(1, 2, ["127.0.0.1"])
            h.heal()
            h.unintercept()
    finally:
        c.down()


def test_every_fault_that_cuts_traffic_is_refused_and_the_others_are_not() -> None:
    cutting = {n for n in NEMESES
               if n.startswith("partition")
               or n in ("bridge-clock", "loss", "delay", "reply-loss")}
    assert set(REFUSED) == cutting
    p = provider("inproc")
    for n in cutting:
        with pytest.raises(BadInput, match=f"--nemesis {n} is not available with "
                                           "--provider inproc"):
            check_provider(p, TestSpec(provider="inproc", nemesis=(n,)))
    for n in ("kill", "pause", "client-pause", "clock-bump"):
        check_provider(p, TestSpec(provider="inproc", nemesis=(n,)))
    with pytest.raises(BadInput, match="--subnet is not used"):
        p.check_subnet("10.0.0.0/24")


def test_a_partition_is_refused_before_the_run_with_254(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["test", "--backend", "memory", "--provider", "inproc",
                                  "--nemesis", "partition", "--results-dir",
                                  str(tmp_path / "results")])
    assert r.exit_code == exitcodes.BAD_INPUT == 254
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("lockcheck: --nemesis partition is not available with "
                           "--provider inproc: ")
    assert not (tmp_path / "results").exists()


def test_the_registry_entry_reads_back(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "reg")
    c = InprocCluster(2, 1, reg).up()
    try:
        data = json.loads(reg.sidecar(c.run_id).read_text())
        assert data["provider"] == "inproc" and set(data["nodes"]) == {"n1", "n2", "c0"}
    finally:
        c.down()
