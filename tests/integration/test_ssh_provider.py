"""The ssh provider against real sshds: stand-in hosts in namespaces of this machine.

Debian's sshd runs in three namespaces (`standin.py`), with a key made for the test;
`lockcheck test --provider ssh` logs in to them as it would to VMs, starts its
servers there, partitions and kills them, and must leave each "host" as it found it:
no process, no iptables rule, no folder. The stand-ins share this machine's kernel:
the provider must see that, and never move this machine's clock.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockcheck.cluster.api import HostClock
from lockcheck.cluster.ssh import SSHCluster
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry
from lockcheck.history import read_history
from tests.conftest import faketime_files
from tests.integration.standin import SSH_PORT, StandIns, sshd_missing

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]
BAD_INPUT = 254


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIns]:
    why = sshd_missing()
    if why is not None:
        pytest.skip(why)
    s = StandIns(tmp_path_factory.mktemp("standin"), 3)
    try:
        yield s.start()
    finally:
        s.stop()


def wall_minus_monotonic() -> float:
    return time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)


def one_error_line(r: Any) -> str:
    assert r.code == BAD_INPUT, r.explain()
    assert "Traceback" not in r.stderr, r.explain()
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockcheck: "), r.explain()
    line: str = lines[0]
    return line


def clean(cli: Any, hosts: StandIns, r: Any) -> None:
    """Nothing of the run is left, here or on any stand-in host."""
    cli.assert_no_leftovers(None)
    for rid in r.traces:
        assert hosts.leftovers(rid) == [], hosts.leftovers(rid)
        assert not (DEFAULT_STATE_DIR / f"{rid}.remote").exists()


def nemesis_ops(r: Any) -> list[Any]:
    ops = read_history(r.run_dir / "history.jsonl")
    return [o for o in ops if o.process == "nemesis" and o.type == "info"]


def test_a_run_with_partitions_and_kills_ends_clean(cli: Any, hosts: StandIns) -> None:
    skew = wall_minus_monotonic()
    nodes = hosts.nodes_file(clients=10)
    r = cli("test", "--provider", "ssh", "--nodes-file", nodes, "--backend", "redis",
            "--nodes", "3", "--nemesis", "partition,kill", "--time-limit", "14",
            "--nemesis-interval", "1", "--quiet", "3", "--seed", "7", timeout=240)
    assert r.code in (0, 1), r.explain()  # a verdict: a kill may make fences regress
    res = r.results()
    assert "failure" not in res and res.get("heal_errors", []) == [], res
    assert res["recovery"]["valid"] is True, res["recovery"]
    nem = nemesis_ops(r)
    starts = {o.f for o in nem if o.value and "error" not in o.value}
    assert {"start-partition", "kill"} <= starts, [(o.f, o.value) for o in nem]
    # client namespaces on the hosts' network: partitions cut clients too
    sides = [o.value["sides"] for o in nem if o.f == "start-partition"]
    assert any(c.startswith("c") for s in sides for side in s for c in side), sides
    t = r.test_json()
    assert t["cluster"]["provider"] == "ssh" and t["cluster"]["clients"] == "namespaces"
    assert sorted(t["cluster"]["same_machine"]) == ["n1", "n2", "n3"]  # stand-ins are here
    assert (r.run_dir / "nodes" / "n1" / "redis.log").stat().st_size > 0  # logs came back
    clean(cli, hosts, r)
    assert abs(wall_minus_monotonic() - skew) < 0.5  # this machine's clock never moved


@pytest.mark.usefixtures("faked_redis")
def test_fake_clocks_on_hosts_that_are_this_machine_leave_no_files(cli: Any,
                                                                   hosts: StandIns) -> None:
    """Stand-ins share this machine's clock, so server clock faults fall back to
    libfaketime there; what it leaves in the host's /dev/shm goes with the run."""
    skew = wall_minus_monotonic()
    nodes = hosts.nodes_file(clients=10, name="fake-clock.yaml")
    r = cli("test", "--provider", "ssh", "--nodes-file", nodes, "--backend", "redis",
            "--nodes", "3", "--nemesis", "clock-bump", "--time-limit", "6",
            "--nemesis-interval", "1", "--quiet", "2", timeout=180)
    assert r.code in (0, 1), r.explain()
    res = r.results()
    assert "failure" not in res and res.get("heal_errors", []) == [], res
    bumps = [o for o in nemesis_ops(r) if o.f == "bump-clock"]
    assert bumps and all(o.value.get("offsets_ms") for o in bumps), bumps
    pids = [int(n["pid"]) for n in r.test_json()["db"].values()]
    assert len(pids) == 3
    assert faketime_files(pids) == [], "libfaketime's files left on the hosts"
    clean(cli, hosts, r)
    assert abs(wall_minus_monotonic() - skew) < 0.5  # this machine's clock never moved


def test_plain_client_processes_partition_between_nodes_only(cli: Any,
                                                             hosts: StandIns) -> None:
    nodes = hosts.nodes_file(clients=None, name="plain.yaml")
    r = cli("test", "--provider", "ssh", "--nodes-file", nodes, "--backend", "redis",
            "--nodes", "3", "--nemesis", "partition", "--time-limit", "8",
            "--nemesis-interval", "1", "--quiet", "2", timeout=180)
    assert r.code == 0, r.explain()
    sides = [o.value["sides"] for o in nemesis_ops(r) if o.f == "start-partition"]
    assert sides and all(h.startswith("n") for s in sides for side in s for h in side), sides
    assert r.test_json()["cluster"]["clients"] == "processes"
    clean(cli, hosts, r)


def test_unknown_host_keys_are_refused_unless_accepted(cli: Any, hosts: StandIns,
                                                       tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    nodes = hosts.nodes_file(clients=None, known_hosts=known, name="unknown.json")
    args = ("test", "--provider", "ssh", "--nodes-file", nodes, "--backend", "redis",
            "--nodes", "2", "--nemesis", "none", "--time-limit", "3", "--quiet", "1")
    line = one_error_line(cli(*args, timeout=60))
    assert "is not in" in line and "--accept-new-host-keys" in line, line
    assert known.read_text() == ""
    r = cli(*args, "--accept-new-host-keys", timeout=120)
    assert r.code == 0, r.explain()
    assert r.stderr.count("accepted the new host key of") == 2, r.stderr
    assert len(known.read_text().splitlines()) == 2
    # a key that changed is refused, new keys accepted or not
    lines = known.read_text().splitlines()
    other = (hosts.dir / "id_test.pub").read_text().split()  # some other ed25519 key
    lines[0] = f"{lines[0].split()[0]} {other[0]} {other[1]}"
    known.write_text("\n".join(lines) + "\n")
    line = one_error_line(cli(*args, "--accept-new-host-keys", timeout=60))
    assert "which is not the one in" in line, line
    cli.assert_no_leftovers(None)


def test_bad_nodes_files_are_one_line(cli: Any, hosts: StandIns, tmp_path: Path) -> None:
    good = json.loads(hosts.nodes_file(clients=None, name="base.json").read_text())

    def write(name: str, data: object) -> Path:
        p = tmp_path / name
        p.write_text(data if isinstance(data, str) else json.dumps(data))
        return p

    nobody = str(hosts.subnet.network_address + 99) if hosts.subnet else "10.79.0.99"
    cases = {
        "missing.yaml": (None, "cannot read it"),
        "broken.yaml": ("hosts: [a, b\n", "not valid YAML"),
        "unknown.json": ({**good, "colour": "red"}, "unknown key 'colour'"),
        "nohosts.json": ({**good, "hosts": []}, "non-empty list"),
        "badport.json": ({**good, "port": 0}, "port must be"),
        "nokey.json": ({**good, "key": "no-such-key"}, "does not exist"),
        "unreachable.json": ({**good, "connect_timeout": 2,
                              "hosts": [{"name": "n1", "address": nobody}]}, "cannot reach"),
    }
    for name, (data, want) in cases.items():
        path = tmp_path / name if data is None else write(name, data)
        r = cli("test", "--provider", "ssh", "--nodes-file", path, "--nemesis", "none",
                timeout=60)
        line = one_error_line(r)
        assert want in line, (name, line)
    base = tmp_path / "base.json"
    base.write_text(json.dumps(good))
    for args, want in [(("--nodes", "9"), "lists only 3"),
                       (("--nodes", "1", "--nemesis", "partition"), "leaves nothing to cut")]:
        line = one_error_line(cli("test", "--provider", "ssh", "--nodes-file", base, *args,
                                  timeout=60))
        assert want in line, (args, line)
    line = one_error_line(cli("test", "--provider", "ssh", "--nemesis", "none", timeout=60))
    assert "needs --nodes-file" in line, line
    line = one_error_line(cli("test", "--nodes-file", base, "--nemesis", "none", timeout=60))
    assert "option of --provider ssh" in line, line


def test_hosts_that_are_this_machine_get_no_host_clock(hosts: StandIns) -> None:
    """boot_id over SSH is this machine's: no node offers a clock that is really ours."""
    from lockcheck.cluster.nodes_file import load

    skew = wall_minus_monotonic()
    c = SSHCluster(3, 1, Registry(DEFAULT_STATE_DIR),
                   load(str(hosts.nodes_file(clients=None, name="clock.json"))))
    try:
        c.up()
        assert c.nodes and not any(isinstance(n, HostClock) for n in c.nodes)
        assert sorted(c.describe()["same_machine"]) == ["n1", "n2", "n3"]
    finally:
        c.down()
    assert hosts.leftovers(c.run_id) == []
    assert abs(wall_minus_monotonic() - skew) < 0.5


def test_block_cuts_real_traffic_and_heal_restores_it(hosts: StandIns) -> None:
    """From n2 (a real remote shell) to n1's sshd: connects, then not, then again."""
    from lockcheck.cluster.nodes_file import load

    c = SSHCluster(2, 1, Registry(DEFAULT_STATE_DIR),
                   load(str(hosts.nodes_file(clients=None, name="cut.json"))))

    def reaches(src: Any, dst: Any) -> bool:
        probe = ["bash", "-c", 'exec 3<>"/dev/tcp/$1/$2"', "bash", dst.address, str(SSH_PORT)]
        # 3 s: a connect that is let through takes milliseconds, but bash's start on a
        # loaded machine took more than 1 s once
        return src.run(["timeout", "3", *probe], check=False, timeout=10).returncode == 0

    try:
        c.up()
        n1, n2 = c.nodes
        assert reaches(n2, n1)
        n1.block([n2.address])
        assert not reaches(n2, n1)
        assert reaches(n1, n1)  # only what was named is dropped
        n1.heal()
        assert reaches(n2, n1)
        n1.block([n2.address])  # left in place: down removes the chain
        # what reaches the remote shell is the argument list: a hostile argument stays one
        evil = "$(touch /tmp/lockcheck-pwned); `id` ;rm -rf /nonexistent"
        assert n1.run(["echo", evil]).stdout == evil + "\n"
        assert not os.path.exists("/tmp/lockcheck-pwned")
    finally:
        c.down()
    assert hosts.leftovers(c.run_id) == []


def long_run(cli: Any, hosts: StandIns, name: str, nemesis: str) -> tuple[Any, Any]:
    """A 60 s run with frequent faults, started and running: (process, trace)."""
    nodes = hosts.nodes_file(clients=10, name=name)
    p = cli.start("test", "--provider", "ssh", "--nodes-file", nodes, "--backend", "redis",
                  "--nodes", "3", "--nemesis", nemesis, "--time-limit", "60",
                  "--nemesis-interval", "0.5")
    return p, p.wait_running(timeout=90)


@pytest.mark.alone  # a killed run, which another run's start may reap first
def test_a_killed_run_is_cleaned_by_cluster_down(cli: Any, hosts: StandIns) -> None:
    p, trace = long_run(cli, hosts, "killed.json", "partition")
    deadline = time.monotonic() + 30
    while not any(hosts.processes(h) for h in hosts.hosts) and time.monotonic() < deadline:
        time.sleep(0.2)
    p.wait_for_partition()
    p.signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert any(hosts.processes(h) for h in hosts.hosts), "the run left nothing to clean?"
    r = cli("cluster", "down", trace.run_id, timeout=120)
    assert r.code == 0 and trace.run_id in r.stdout, r.explain() + "\n" + hosts.diagnosis()
    assert hosts.leftovers(trace.run_id) == [], hosts.leftovers(trace.run_id)
    cli.assert_no_leftovers(trace.run_id)
    assert not (DEFAULT_STATE_DIR / f"{trace.run_id}.remote").exists()


def test_ctrl_c_heals_and_removes_everything(cli: Any, hosts: StandIns) -> None:
    p, trace = long_run(cli, hosts, "ctrl-c.json", "partition,kill")
    p.wait_for_partition()  # faults are under way
    p.signal(signal.SIGINT)
    r = p.wait(timeout=120)
    assert r.code == 130, r.explain()
    assert "interrupted: faults healed, cluster removed" in r.stderr
    assert hosts.leftovers(trace.run_id) == [], hosts.leftovers(trace.run_id)
    cli.assert_no_leftovers(trace.run_id)


@pytest.mark.alone  # `cluster down` of every cluster
def test_status_and_a_cluster_left_up(cli: Any, hosts: StandIns) -> None:
    nodes = hosts.nodes_file(clients=None, name="kept.json")
    r = cli("cluster", "up", "--provider", "ssh", "--nodes-file", nodes, "--nodes", "2",
            timeout=120)
    assert r.code == 0, r.explain()
    rid = r.stdout.split()[1]
    assert all(hosts.processes(h) for h in hosts.hosts[:2])  # redis runs on n1, n2
    st = cli("cluster", "status", timeout=30)
    assert re.search(rf"^{rid} cluster - left up \(ssh\)$", st.stdout, re.M), st.stdout
    assert re.search(r"^cluster [0-9a-f]{6} up on .*kept\.json \(ssh\):$", r.stdout, re.M)
    down = cli("cluster", "down", timeout=120)
    assert down.code == 0 and rid in down.stdout, down.explain()
    assert hosts.leftovers(rid) == []
    cli.assert_no_leftovers(rid)


@pytest.mark.alone  # `cluster down` of every cluster
def test_a_host_gone_for_good_is_reported_then_forgotten(cli: Any, hosts: StandIns) -> None:
    """A kept cluster whose host cannot be reached stays registered (and says so) until
    `cluster down --forget` drops it."""
    from lockcheck.cluster.state import RunState

    assert hosts.subnet is not None
    nobody = str(hosts.subnet.network_address + 99)  # nothing answers there
    rid = "f0f0f0"
    reg = Registry(DEFAULT_STATE_DIR)
    reg.save(RunState(rid, "cluster", 1, None, "", "", f"/tmp/lockcheck-{rid}",
                      provider="ssh", remote={
                          "known_hosts": str(hosts.known_hosts()),
                          "run_dir": f"/var/tmp/lockcheck-{rid}", "chain": f"lc-{rid}",
                          "hosts": {"n1": {"name": "n1", "address": nobody, "port": SSH_PORT,
                                           "user": "root", "key": str(hosts.key),
                                           "sudo": False, "pids": []}}}))
    try:
        r = cli("cluster", "down", timeout=120)
        assert r.code == 254 and "could not clean n1" in r.stderr, r.explain()
        assert rid in {s.run_id for s in reg.all()}
        r = cli("cluster", "down", "--forget", rid, timeout=120)
        assert r.code == 0 and f"forgot {rid}" in r.stdout, r.explain()
        assert rid not in {s.run_id for s in reg.all()}
    finally:
        reg.remove(rid)
