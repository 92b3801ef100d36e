"""The real runner (`lockcheck/runner.py`) end to end, without root: backend `memory`
(lockcheck's own lock server) on provider `inproc` (plain processes on loopback).

What it must keep whatever happens: the teardown in reverse order (faults healed,
then workers, then servers, then the cluster, then the history), a heal that failed
written to results.json, a run whose harness fails mid-way checked as unknown, an
interrupt healed and checked; in every case the cluster removed and no process of
the run left.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lockcheck import exitcodes, runner
from lockcheck.cluster.inproc import RUN_ENV, run_workdir
from lockcheck.cluster.state import Registry
from lockcheck.db.memory import MemoryDB
from lockcheck.runner import RunOutcome, Teardown, run_test
from lockcheck.spec import TestSpec
from tests.conftest import sigint_default


def spec(tmp: Path, **kw: Any) -> TestSpec:
    base = TestSpec(backend="memory", provider="inproc", nemesis=("kill",), time_limit=4.0,
                    nemesis_interval=1.0, quiet=1.0, concurrency=3, keys=2, seed=7,
                    report=False, results_dir=str(tmp / "results"))
    return replace(base, **kw)


def processes_of(run_id: str) -> dict[int, str]:
    """Live processes carrying the run's mark (this user's: their environ is readable)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{RUN_ENV}={run_id}".encode() in env and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found[int(d.name)] = cmd
    return found


def role(cmd: str) -> str:
    return "server" if "memory_server" in cmd else "worker" if "worker" in cmd else "other"


def go(tmp: Path, s: TestSpec) -> tuple[RunOutcome, Registry, dict[str, Any]]:
    reg = Registry(tmp / "reg")
    out = run_test(s, out=io.StringIO(), registry=reg)
    results = json.loads((out.run_dir / "results.json").read_text())
    return out, reg, results


def run_id(outcome: RunOutcome) -> str:
    rid: str = json.loads((outcome.run_dir / "test.json").read_text())["run_id"]
    return rid


def assert_all_gone(outcome: RunOutcome, reg: Registry) -> None:
    rid = run_id(outcome)
    assert reg.all() == []
    assert not run_workdir(rid).exists()
    assert processes_of(rid) == {}


def test_teardown_heals_then_stops_workers_then_servers_then_removes_the_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, set[str]]] = []
    ids: list[str] = []
    run = Teardown.run

    def spy(self: Teardown) -> list[str]:
        def watch(what: str, fn: Callable[[], Any]) -> Callable[[], Any]:
            def step() -> Any:
                seen.append((what, {role(c) for c in processes_of(ids[0]).values()}))
                return fn()
            return step
        self.steps = [(what, watch(what, fn)) for what, fn in self.steps]
        return run(self)

    monkeypatch.setattr(Teardown, "run", spy)
    start_db = runner.Run.start_db

    def note(self: runner.Run) -> None:
        assert self.cluster is not None
        ids.append(self.cluster.run_id)
        start_db(self)

    monkeypatch.setattr(runner.Run, "start_db", note)
    outcome, reg, results = go(tmp_path, spec(tmp_path))
    # the recovery worker started last (every fault healed by then), so it stops first
    assert [what for what, _ in seen] == [
        "stop the recovery worker", "heal faults", "stop workers", "stop servers",
        "remove cluster", "stop copying ops", "close history"]
    alive = dict(seen)
    assert alive["heal faults"] == {"server"}  # workers had stopped; servers serve
    assert alive["stop servers"] == {"server"}
    assert alive["remove cluster"] == set()
    assert results["stats"]["faults"] >= 1 and results["interrupted"] is False
    # every worker, the recovery worker included, ended on its own and cleanly
    assert results["errors"] == []
    assert_all_gone(outcome, reg)


def test_a_failed_heal_is_in_results_json(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def start(self: MemoryDB, node: str) -> None:
        raise RuntimeError("the server would not start")

    monkeypatch.setattr(MemoryDB, "start", start)
    # the recovery check gives up soon: the killed server stays down
    outcome, reg, results = go(tmp_path, spec(tmp_path, nemesis=("kill",), recover_s=1.0))
    assert any("restart failed on n1: the server would not start" in e
               for e in results["heal_errors"]), results.get("heal_errors")
    assert results["heal_errors"][0] in results["errors"]
    assert_all_gone(outcome, reg)


def test_a_run_whose_harness_fails_mid_way_is_unknown_and_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: runner.Run) -> None:
        time.sleep(1.0)  # the clients and servers are at work
        raise RuntimeError("the harness broke")

    monkeypatch.setattr(runner.Run, "run_phases", broken)
    outcome, reg, results = go(tmp_path, spec(tmp_path, nemesis=()))
    assert outcome.failure == "RuntimeError: the harness broke"
    assert results["failure"] == outcome.failure
    assert results["valid"] == "unknown" == outcome.valid
    assert results["stats"]["ops"] > 0  # what was recorded was checked
    assert_all_gone(outcome, reg)


@pytest.mark.usefixtures("sigint_raises")
def test_an_interrupt_heals_removes_and_checks_what_was_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start_nemesis = runner.Run.start_nemesis

    def then_ctrl_c(self: runner.Run) -> None:
        start_nemesis(self)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the KeyboardInterrupt lands here

    monkeypatch.setattr(runner.Run, "start_nemesis", then_ctrl_c)
    outcome, reg, results = go(tmp_path, spec(tmp_path, nemesis=("pause",)))
    assert outcome.interrupted and results["interrupted"] is True
    assert outcome.failure is None and "failure" not in results
    assert results["stats"]["ops"] > 0
    assert_all_gone(outcome, reg)


def test_ctrl_c_at_the_terminal_stops_the_command_with_130(tmp_path: Path) -> None:
    """The real command, its process group sent SIGINT as a terminal does: the
    servers and workers are in sessions of their own, so only the controller gets it."""
    env = {**os.environ, "LOCKCHECK_STATE_DIR": str(tmp_path / "reg")}
    results = tmp_path / "results"
    proc = subprocess.Popen(sigint_default(
        [sys.executable, "-m", "lockcheck.cli", "test", "--backend", "memory", "--provider",
         "inproc", "--nemesis", "kill", "--time-limit", "60", "--no-report",
         "--results-dir", str(results)]), env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        history = None
        while time.monotonic() < deadline:
            found = list(results.glob("memory/mutex/kill/*/history.jsonl"))
            if found and found[0].stat().st_size > 2000:
                history = found[0]
                break
            time.sleep(0.1)
        assert history is not None, "the run recorded nothing"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            # killed, the controller cannot stop its servers and workers (own sessions):
            # lockcheck's cleanup removes them, or they outlive the suite
            proc.kill()
            proc.wait()
            for st in Registry(tmp_path / "reg").all():
                subprocess.run([sys.executable, "-m", "lockcheck.cli", "cluster", "down",
                                st.run_id], env=env, capture_output=True, timeout=60)
    assert proc.returncode == exitcodes.INTERRUPTED, err
    assert "interrupted: faults healed, cluster removed" in err
    rid = json.loads((history.parent / "test.json").read_text())["run_id"]
    assert json.loads((history.parent / "results.json").read_text())["interrupted"] is True
    assert Registry(tmp_path / "reg").all() == []
    assert processes_of(rid) == {}


def test_a_fault_that_started_late_keeps_its_whole_hold_before_the_quiet_phase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An aimed kill may wait for its moment, so that its restart delay would run past
    the start of the quiet phase; the heal then waits for it: a restart cut short is
    not the fault asked for (a Redlock master restarted before a TTL passed grants
    twice where the delayed restart under test would not)."""
    from lockcheck.nemesis.process import Kill

    start = Kill.start

    def late(self: Kill, rng: Any) -> dict[str, Any]:
        time.sleep(1.2)  # as an aimed kill waits for a holder
        return start(self, rng)

    monkeypatch.setattr(Kill, "start", late)
    # faults from 1 s; the quiet phase from 3 s; the kill lands at about 2.2 s
    outcome, reg, results = go(tmp_path, spec(tmp_path, nemesis=("kill",), time_limit=4.0,
                                              quiet=1.0, restart_delay=1.5))
    ops = [json.loads(line) for line in (outcome.run_dir / "history.jsonl").open()]
    kills = [o["time"] for o in ops if o["process"] == "nemesis" and o["f"] == "kill"
             and o["type"] == "info"]
    restarts = [o["time"] for o in ops if o["process"] == "nemesis" and o["f"] == "restart"
                and o["type"] == "info"]
    assert len(kills) == 1 and len(restarts) == 1, (kills, restarts)
    assert restarts[0] - kills[0] >= 1.5e9, (restarts[0] - kills[0]) / 1e9
    assert results.get("heal_errors", []) == []
    assert_all_gone(outcome, reg)
