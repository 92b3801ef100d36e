"""The docker provider against a real dockerd, real containers, real servers.

The module installs Debian's docker.io and debootstrap if they are missing (skipped,
with the reason, if apt cannot), starts a dockerd that leaves this machine's firewall
alone (`dockerd.py`), builds the node image with `--base debootstrap` (kept between
runs: a second build is a no-op while the Dockerfile is unchanged), and stops the
daemon and everything it made at the end. While it runs, the local provider must keep
working: a default dockerd would have cut its bridges.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lockcheck.backends import BACKENDS
from lockcheck.cluster import images
from lockcheck.cluster.containers import DockerCluster
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry
from lockcheck.history import read_history
from tests.integration.dockerd import Dockerd, firewall, install_packages

# the first test's setup installs docker.io and debootstrap and builds the node image on
# a machine that never had them (minutes, more under load): longer than the default
pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns, pytest.mark.slow,
              pytest.mark.timeout(1200)]

# the scenario; etcd comes with the etcd backend (a branch of its own)
BACKEND = "etcd" if "etcd" in BACKENDS else "redis"
NODES = "3"


@pytest.fixture(scope="module")
def daemon(module_cli: Any) -> Iterator[Dockerd]:
    why = install_packages()
    if why is not None:
        pytest.skip(f"docker.io cannot be installed here: {why}")
    d = Dockerd().start()
    os.environ["DOCKER_HOST"] = d.host  # for the provider used in this process too
    try:
        t = time.monotonic()
        r = module_cli("images", "build", "--base", "debootstrap", timeout=900,
                       env={"DOCKER_HOST": d.host})
        assert r.code == 0, r.explain()
        sys.stderr.write(f"\n[docker] images build --base debootstrap: "
                         f"{time.monotonic() - t:.1f} s ({r.stderr.strip().splitlines()[-1]})\n")
        yield d
    finally:
        os.environ.pop("DOCKER_HOST", None)
        problems = d.stop()
    assert problems == [], problems


def docker_leftovers(run_id: str) -> list[str]:
    import docker

    client = docker.from_env()
    out = [f"container {c.name}" for c in
           client.containers.list(all=True, filters={"label": f"lockcheck.run={run_id}"})]
    out += [f"network {n.name}" for n in
            client.networks.list(filters={"label": f"lockcheck.run={run_id}"})]
    return out


def test_a_partitioned_run_reaches_a_verdict_and_ends_clean(cli: Any, daemon: Dockerd) -> None:
    before = firewall()
    r = cli("test", "--provider", "docker", "--backend", BACKEND, "--nodes", NODES,
            "--nemesis", "partition", "--time-limit", "15", "--nemesis-interval", "1.5",
            "--quiet", "4", env={"DOCKER_HOST": daemon.host}, timeout=300)
    assert r.code in (0, 1), r.explain()
    res = r.results()
    assert "failure" not in res and res.get("heal_errors", []) == [], res
    assert res["recovery"]["valid"] is True, res["recovery"]
    ops = read_history(r.run_dir / "history.jsonl")
    starts = [o for o in ops if o.process == "nemesis" and o.f == "start-partition"
              and o.type == "info"]
    assert starts and all("error" not in o.value for o in starts), [o.value for o in starts]
    t = r.test_json()
    assert t["cluster"]["provider"] == "docker" and len(t["cluster"]["containers"]) == 3
    assert any((r.run_dir / "nodes" / "n1").iterdir())  # the servers' logs came back
    cli.assert_no_leftovers(None)
    for rid in r.traces:
        assert docker_leftovers(rid) == []
        assert not (DEFAULT_STATE_DIR / f"{rid}.remote").exists()
    assert firewall() == before


def test_postgres_in_containers_crashes_restarts_and_takes_clock_faults(
        cli: Any, daemon: Dockerd) -> None:
    """Postgres on the docker provider (no `unshare` in a container without
    CAP_SYS_ADMIN: the container's own IPC namespace): a kill is a crash and a restart
    in the container, and a server clock jump grants held leases again (findings P4),
    as on the local provider. The two runs go at once."""
    common = ("--provider", "docker", "--backend", "postgres", "--time-limit", "9",
              "--nemesis-interval", "1", "--quiet", "2")
    env = {"DOCKER_HOST": daemon.host}
    started = {f: cli.start("test", *common, "--nemesis", f, env=env)
               for f in ("kill", "clock-bump")}
    runs = {f: p.wait(timeout=300) for f, p in started.items()}
    for f, r in runs.items():
        assert r.code in (0, 1), (f, r.explain())
        res = r.results()
        assert "failure" not in res and res.get("heal_errors", []) == [], (f, res)
        assert res["recovery"]["valid"] is True, (f, res["recovery"])
        for rid in r.traces:
            assert docker_leftovers(rid) == []
    kill = runs["kill"]
    ops = read_history(kill.run_dir / "history.jsonl")
    kills = [o for o in ops if o.process == "nemesis" and o.f == "kill" and o.type == "info"]
    assert kills and all(o.value["targets"] == ["n1"] for o in kills), kills
    assert kill.results()["checkers"]["mutual-exclusion"]["sections"] > 3
    ls = runs["clock-bump"].results()["checkers"]["lease-safety"]
    assert ls["valid"] is False and ls["violation_count"] > 0, ls
    cli.assert_no_leftovers(None)


def test_a_server_lockcheck_installed_itself_runs_in_containers(
        cli: Any, daemon: Dockerd) -> None:
    """Consul, extracted by lockcheck under its own folder rather than installed from
    the image's packages, runs in the containers from that folder mounted read-only,
    and is killed and restarted there."""
    r = cli("test", "--provider", "docker", "--backend", "consul", "--nemesis", "kill",
            "--time-limit", "8", "--nemesis-interval", "2", "--quiet", "2",
            env={"DOCKER_HOST": daemon.host}, timeout=300)
    assert r.code == 0, r.explain()
    res = r.results()
    assert res["checkers"]["mutual-exclusion"]["sections"] > 3, res["checkers"]
    ops = read_history(r.run_dir / "history.jsonl")
    assert any(o.process == "nemesis" and o.f == "kill" and o.type == "info" for o in ops)
    for rid in r.traces:
        assert docker_leftovers(rid) == []


def test_the_local_provider_works_while_dockerd_runs(cli: Any, daemon: Dockerd) -> None:
    r = cli("test", "--backend", "redis", "--nodes", "3", "--nemesis", "partition",
            "--time-limit", "8", "--nemesis-interval", "1", "--quiet", "2", timeout=180)
    assert r.code == 0, r.explain()
    res = r.results()
    assert res["checkers"]["mutual-exclusion"]["sections"] > 3, res["checkers"]
    assert res["recovery"]["valid"] is True
    assert firewall() == daemon.before  # no FORWARD DROP, no ip_forward: the bridge works
    cli.assert_no_leftovers(None)


def test_block_cuts_real_traffic_into_a_container(daemon: Dockerd) -> None:
    """A client namespace and another container reach n1's server; blocked, they do not;
    healed, again."""
    c = DockerCluster(2, 1, Registry(DEFAULT_STATE_DIR))
    port = "7411"

    def from_container(src: Any, dst: Any) -> bool:
        probe = ["bash", "-c", 'exec 3<>"/dev/tcp/$1/$2"', "bash", dst.address, port]
        return src.run(["timeout", "1", *probe], check=False, timeout=5).returncode == 0

    def from_client(dst: Any) -> bool:
        code = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], "
                "int(sys.argv[2])), timeout=0.5).close(); print('ok')\nexcept OSError:\n"
                " print('no')\n")
        out = c.clients[0].run([sys.executable, "-c", code, dst.address, port], timeout=10)
        return out.stdout.strip() == "ok"

    try:
        c.up()
        n1, n2 = c.nodes
        d = n1.spawn("listener", ["redis-server", "--bind", n1.address, "--port", port,
                                  "--save", "", "--appendonly", "no"],
                     log=n1.workdir / "listener.log")
        deadline = time.monotonic() + 15
        while not from_container(n2, n1) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert from_container(n2, n1) and from_client(n1)
        n1.block([n2.address, c.clients[0].address])
        assert not from_container(n2, n1) and not from_client(n1)
        n1.heal()
        assert from_container(n2, n1) and from_client(n1)
        d.kill()
        assert not d.alive()
        n1.write_file(n1.workdir / "clock.rc", "+1.000 x1\n")  # replaced in one step
        assert n1.run(["cat", str(n1.workdir / "clock.rc")]).stdout == "+1.000 x1\n"
    finally:
        c.down()
    assert docker_leftovers(c.run_id) == []


def test_a_second_build_is_a_no_op(cli: Any, daemon: Dockerd) -> None:
    t = time.monotonic()
    r = cli("images", "build", "--base", "debootstrap", env={"DOCKER_HOST": daemon.host},
            timeout=120)
    assert r.code == 0 and "up to date" in r.stderr, r.explain()
    assert time.monotonic() - t < 30


def test_doctor_reports_the_daemon_and_the_image(cli: Any, daemon: Dockerd) -> None:
    r = cli("doctor", "--provider", "docker", env={"DOCKER_HOST": daemon.host}, timeout=60)
    assert "docker daemon" in r.stdout and "docker image" in r.stdout, r.explain()
    assert f"{images.IMAGE} (up to date)" in r.stdout, r.stdout
    gone = cli("doctor", "--provider", "docker",
               env={"DOCKER_HOST": "unix:///run/lockcheck-docker/nothing.sock"}, timeout=60)
    assert gone.code == 254 and "MISSING  docker daemon" in gone.stdout, gone.explain()


def test_no_daemon_or_no_image_is_one_line(cli: Any, daemon: Dockerd) -> None:
    r = cli("test", "--provider", "docker", "--nemesis", "none",
            env={"DOCKER_HOST": "unix:///run/lockcheck-docker/nothing.sock"}, timeout=60)
    assert r.code == 254 and "Traceback" not in r.stderr, r.explain()
    assert r.stderr.splitlines() == [r.stderr.strip()] and "cannot reach" in r.stderr
    r = cli("test", "--provider", "docker", "--image", "lockcheck-node:missing",
            "--nemesis", "none", env={"DOCKER_HOST": daemon.host}, timeout=60)
    assert r.code == 254 and "lockcheck images build" in r.stderr, r.explain()
