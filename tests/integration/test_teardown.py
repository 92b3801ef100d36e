"""Whatever happens to a run, lockcheck leaves nothing behind, or can remove what it left.

The controller runs in its own session; tests signal only its PID. After SIGKILL the
leftovers are asserted to exist (so the cleanup tests can fail for real), then
removed by `lockcheck cluster down` or by the next `lockcheck test`.
"""

from __future__ import annotations

import json
import re
import signal
import time
from typing import Any

import pytest

from lockcheck.cluster.state import DEFAULT_STATE_DIR
from lockcheck.history import read_history_full
from tests.conftest import partitions_open

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


def run_id_of(r: Any) -> str:
    rid: str = r.test_json()["run_id"]
    return rid


def test_normal_run_leaves_nothing(cli: Any) -> None:
    # a kill in the middle: the restarted redis-server must be stopped as well
    r = cli("test", "--nemesis", "kill", "--time-limit", "5", "--nemesis-interval", "1")
    assert r.code in (0, 1), r.explain()
    rid = run_id_of(r)
    trace = r.traces[rid]
    # the watcher saw the registry: redis, 5 workers, and the restarted redis
    assert len(trace.pids) >= 7, trace.pids
    assert r.results()["stats"]["faults"] >= 1
    cli.assert_no_leftovers(None)


def test_ctrl_c_mid_run(cli: Any) -> None:
    p = cli.start("test", "--nemesis", "partition", "--time-limit", "30",
                  "--nemesis-interval", "2")
    trace = p.wait_running()
    # the interrupt lands with a partition in place (started, not yet healed)
    p.wait_for_partition()
    p.signal(signal.SIGINT)
    r = p.wait(timeout=60)
    assert r.code == 130, r.explain()
    assert r.elapsed < 25, "it should stop soon after Ctrl-C, not run its 30 s"
    assert "interrupted" in r.stderr
    assert "Traceback" not in r.stderr
    cli.assert_no_leftovers(trace.run_id)
    # what was recorded is complete on disk, and was checked
    read = read_history_full(r.run_dir / "history.jsonl")
    assert read.truncated_line is None and len(read.ops) > 50
    res = r.results()
    assert res["interrupted"] is True
    assert res["valid"] in (True, False, "unknown")
    assert res["ops"] == len(read.ops)
    # every partition that started was healed before the cluster went away
    assert partitions_open(read.ops) == 0
    c = cli("check", r.run_dir)
    assert c.code == {True: 0, False: 1}.get(res["valid"], 2), c.explain()


def kill_mid_run(cli: Any) -> tuple[Any, str]:
    """Start a 30 s run, SIGKILL its controller once the workers run; return (result, id)."""
    p = cli.start("test", "--nemesis", "none", "--time-limit", "30")
    trace = p.wait_running()
    # once the workers have recorded (on a loaded machine they start seconds after
    # their processes), then a little more
    def recorded() -> bool:
        return any(h.exists() and h.stat().st_size > 0
                   for h in (d / "history.jsonl" for d in p._new_run_dirs()))

    p.wait_for(recorded, 60, "a first op in the history")
    time.sleep(1.0)
    p.signal(signal.SIGKILL)
    r = p.wait(timeout=30)
    assert r.code == -signal.SIGKILL, r.explain()
    rid = trace.run_id
    left = cli.leftovers(rid)
    kinds = " ".join(left)
    # a killed controller cannot clean up: its namespaces, bridge, temp dir, registry
    # entry and redis-server are still there
    assert f"namespace lc-{rid}-n1" in kinds, left
    assert f"link lcb{rid}" in kinds, left
    assert f"directory /tmp/lockcheck-{rid}" in kinds, left
    assert "registry file" in kinds, left
    assert "redis-server" in kinds, left
    # the history is readable up to the last complete line
    read = read_history_full(r.run_dir / "history.jsonl", allow_truncated=True)
    assert len(read.ops) > 0
    assert not (r.run_dir / "results.json").exists()
    return r, rid


@pytest.mark.alone  # a killed run, which another run's start may reap first
def test_sigkill_then_cluster_down(cli: Any) -> None:
    r, rid = kill_mid_run(cli)
    # by its id: nothing of anyone else's is touched
    down = cli("cluster", "down", rid)
    assert down.code == 0, down.explain()
    assert down.stdout.strip() == f"removed: {rid}", down.stdout
    cli.assert_no_leftovers(rid)
    # the killed run can still be checked, once told to ignore a cut-off last line
    c = cli("check", "--allow-truncated", r.run_dir)
    assert c.code in (0, 1, 2), c.explain()


@pytest.mark.alone  # a killed run, which another run's start may reap first
def test_sigkill_then_next_test_cleans_up(cli: Any) -> None:
    _, rid = kill_mid_run(cli)
    r = cli("test", "--nemesis", "none", "--time-limit", "3")
    assert r.code == 0, r.explain()
    m = re.search(r"^cleaned up leftovers of earlier runs: (.*)$", r.stderr, re.M)
    assert m and rid in m.group(1).split(", "), r.stderr
    cli.assert_no_leftovers(rid)
    cli.assert_no_leftovers(run_id_of(r))


def test_cluster_up_status_down(cli: Any) -> None:
    up = cli("cluster", "up", "--clients", "2", timeout=60)
    assert up.code == 0, up.explain()
    m = re.search(r"^cluster ([0-9a-f]{6}) up on (10\.77\.\d+\.0/24):", up.stdout, re.M)
    assert m, up.stdout
    rid, subnet = m.group(1), m.group(2)
    assert re.search(rf"^\s+n1\s+\S+\s+netns lc-{rid}-n1\s+redis :6379$", up.stdout, re.M)
    for c in ("c0", "c1"):
        assert f"netns lc-{rid}-{c}" in up.stdout
    assert f"lockcheck cluster down {rid}" in up.stdout
    # it is really up, and registered
    left = " ".join(cli.leftovers(rid))
    for ns in ("n1", "c0", "c1"):
        assert f"namespace lc-{rid}-{ns}" in left
    assert "registry file" in left and "redis-server" in left

    st = cli("cluster", "status")
    assert st.code == 0
    assert re.search(rf"^{rid} cluster {re.escape(subnet)} left up$", st.stdout, re.M), st.stdout
    block = st.stdout.split(f"{rid} cluster", 1)[1]
    assert re.search(r"^\s+n1\s+\S+\s+redis up$", block, re.M), st.stdout
    reg = json.loads((DEFAULT_STATE_DIR / f"{rid}.json").read_text())
    assert reg["kind"] == "cluster" and reg["services"]["n1"]["service"] == "redis"

    # a test run leaves a cluster that was left up on purpose alone
    t = cli("test", "--nemesis", "none", "--time-limit", "2")
    assert t.code == 0, t.explain()
    assert not re.search(rf"cleaned up leftovers.*\b{rid}\b", t.stderr)
    assert f"namespace lc-{rid}-n1" in " ".join(cli.leftovers(rid))

    # by its id: nothing of anyone else's is touched
    down = cli("cluster", "down", rid)
    assert down.code == 0, down.explain()
    assert down.stdout.strip() == f"removed: {rid}", down.stdout
    cli.assert_no_leftovers(rid)
    st = cli("cluster", "status")
    assert rid not in st.stdout
