"""Server programs found whatever major the distribution ships: PostgreSQL in Debian's
versioned folders or through pg_config, and any program named with a version `*`."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from lockcheck.db import postgres
from lockcheck.errors import BadInput
from lockcheck.preflight import find_program


def fake_runner(outputs: dict[tuple[str, ...], tuple[int, str]]):
    """A `run` that answers each argv (by its first words) as a machine would."""

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        for head, (code, out) in outputs.items():
            if tuple(argv[:len(head)]) == head:
                return subprocess.CompletedProcess(list(argv), code, out, "")
        return subprocess.CompletedProcess(list(argv), 127, "", "not found")

    return run


def test_the_newest_supported_major_is_chosen() -> None:
    i = postgres.choose_install({15: Path("/p/15/bin"), 17: Path("/p/17/bin")})
    assert (i.major, i.postgres) == (17, Path("/p/17/bin/postgres"))


def test_an_unsupported_major_is_refused_naming_what_was_found_and_what_runs() -> None:
    with pytest.raises(BadInput) as e:
        postgres.choose_install({13: Path("/usr/lib/postgresql/13/bin")})
    msg = str(e.value)
    assert "found PostgreSQL 13 (/usr/lib/postgresql/13/bin/postgres)" in msg
    assert f"runs PostgreSQL {postgres.SUPPORTED[0]} to {postgres.SUPPORTED[-1]}" in msg
    assert "\n" not in msg


def test_no_server_at_all_says_how_to_install_it() -> None:
    with pytest.raises(BadInput, match=r"no PostgreSQL server found.*apt-get install -y "
                                       r"postgresql"):
        postgres.choose_install({})


def test_versioned_folders_are_read_from_where_the_server_runs() -> None:
    run = fake_runner({("find",): (0, "/usr/lib/postgresql/16/bin/postgres\n"
                                       "/usr/lib/postgresql/17/bin/postgres\n")})
    assert postgres.find_install(run) == postgres.Install(
        Path("/usr/lib/postgresql/17/bin"), 17)


def test_without_versioned_folders_pg_config_names_the_server() -> None:
    run = fake_runner({("find",): (1, ""), ("pg_config", "--bindir"): (0, "/opt/pg/bin\n"),
                       ("pg_config", "--version"): (0, "PostgreSQL 16.4\n"),
                       ("test", "-x", "/opt/pg/bin/postgres"): (0, "")})
    assert postgres.find_install(run) == postgres.Install(Path("/opt/pg/bin"), 16)
    # a pg_config (libpq-dev's) whose folder has no server is not a server
    run = fake_runner({("find",): (1, ""), ("pg_config", "--bindir"): (0, "/usr/bin\n"),
                       ("pg_config", "--version"): (0, "PostgreSQL 16.4\n")})
    with pytest.raises(BadInput, match="no PostgreSQL server found"):
        postgres.find_install(run)


def test_a_version_star_finds_the_highest_version_by_number(tmp_path: Path) -> None:
    for major in ("9", "10", "17"):
        d = tmp_path / major / "bin"
        d.mkdir(parents=True)
        (d / "postgres").write_text("")
    assert find_program(f"{tmp_path}/*/bin/postgres") == f"{tmp_path}/17/bin/postgres"
    (tmp_path / "17" / "bin" / "postgres").unlink()
    assert find_program(f"{tmp_path}/*/bin/postgres") == f"{tmp_path}/10/bin/postgres"
    assert find_program(f"{tmp_path}/*/bin/initdb") is None


def test_this_machines_server_is_found_and_its_version_read() -> None:
    try:
        i = postgres.find_install(postgres.run_here)
    except BadInput as e:
        pytest.skip(f"no PostgreSQL server here: {e}")
    assert postgres.postgres_version(i).split(".")[0] == str(i.major)


# -- compare keeps server versions apart -----------------------------------------------


def _with_servers(run_dir: Path, servers: dict[str, str], server: str | None = None) -> None:
    import json

    from lockcheck.results import store

    test = json.loads((run_dir / store.TEST).read_text())
    test["server_versions"] = servers
    if server:
        test["server"] = server
    (run_dir / store.TEST).write_text(json.dumps(test))


def test_compare_gives_each_server_release_line_its_own_row(tmp_path: Path) -> None:
    from lockcheck.results.compare import load
    from tests.reports.synthetic import make_run

    a = make_run(tmp_path / "res" / "a", ops=300, backend="redis", nemesis=("none",))
    b = make_run(tmp_path / "res" / "b", ops=300, backend="redis", nemesis=("none",), seed=8)
    v = make_run(tmp_path / "res" / "v", ops=300, backend="redis", nemesis=("none",), seed=9)
    _with_servers(a, {"redis-server": "7.0.15"})
    _with_servers(b, {"redis-server": "8.0.2"})
    _with_servers(v, {"valkey-server": "8.1.1"}, server="valkey")
    c = load([tmp_path / "res"])
    rows = c.backends(c.workloads[0])
    assert sorted(rows) == ["redis (redis 7.0)", "redis (redis 8.0)", "redis@valkey"]
    assert any("redis ran on 2 server versions (redis 7.0, redis 8.0)" in w
               for w in c.warnings), c.warnings


def test_one_release_line_keeps_one_row(tmp_path: Path) -> None:
    from lockcheck.results.compare import load
    from tests.reports.synthetic import make_run

    for name, version, seed in (("a", "15.18", 7), ("b", "15.14", 8)):
        _with_servers(make_run(tmp_path / "res" / name, ops=300, backend="postgres",
                               nemesis=("none",), seed=seed), {"postgres": version})
    c = load([tmp_path / "res"])
    assert c.backends(c.workloads[0]) == ["postgres"]
    assert not any("server versions" in w for w in c.warnings)


# -- servers older than lockcheck runs -------------------------------------------------


def test_a_server_older_than_lockcheck_runs_is_refused_in_one_line() -> None:
    from lockcheck.preflight import check_server_versions

    check_server_versions({"etcd": "3.4.23", "redis-server": "7.0.15", "zookeeper": "3.8.0",
                           "postgres": "15.18", "java": "1.8.0", "valkey-server": "9.1.2"})
    check_server_versions({"etcd": "version unknown"})  # unreadable: let through
    with pytest.raises(BadInput, match=r"^found etcd 3\.3\.25; lockcheck runs etcd 3\.4 "):
        check_server_versions({"etcd": "3.3.25"})
    with pytest.raises(BadInput, match=r"redis-sentinel 6\.0\.16"):
        check_server_versions({"redis-server": "6.2.1", "redis-sentinel": "6.0.16"})
    with pytest.raises(BadInput, match=r"zookeeper 3\.4\.13"):
        check_server_versions({"zookeeper": "3.4.13"})


# -- the docker provider's image follows this machine's release -------------------------


@pytest.mark.parametrize(("os_release", "suite"), [
    ('ID=debian\nVERSION_CODENAME=trixie\nPRETTY_NAME="Debian GNU/Linux 13 (trixie)"\n',
     "trixie"),
    ("ID=debian\nVERSION_CODENAME=bookworm\n", "bookworm"),
    ('ID=ubuntu\nVERSION_CODENAME=noble\nPRETTY_NAME="Ubuntu 24.04.3 LTS"\n', "bookworm"),
    ("ID=debian\nVERSION_CODENAME=forky\n", "bookworm"),  # not built on yet
    ("", "bookworm"),
])
def test_the_node_image_follows_the_hosts_debian_release(tmp_path: Path, os_release: str,
                                                         suite: str) -> None:
    from lockcheck.cluster import images

    (tmp_path / "os-release").write_text(os_release)
    assert images.host_suite(tmp_path / "os-release") == suite


def test_the_distribution_is_named_with_debians_point_release(tmp_path: Path) -> None:
    from lockcheck.distro import distribution

    (tmp_path / "os-release").write_text(
        'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_ID="13"\n')
    (tmp_path / "debian_version").write_text("13.8\n")
    assert distribution(tmp_path / "os-release") == "Debian GNU/Linux 13 (trixie), 13.8"
    (tmp_path / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\n')
    (tmp_path / "debian_version").write_text("trixie/sid\n")
    assert distribution(tmp_path / "os-release") == "Ubuntu 24.04.3 LTS"
    assert distribution(tmp_path / "missing") == "unknown"


def test_a_server_that_does_not_start_under_libfaketime_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lockcheck.db import redis

    monkeypatch.setattr(redis, "redis_version", lambda program: "8.0.2")
    crashed = redis.faked_start_refused("redis-server", "redis on n1 exited; log tail:\nx")
    assert crashed.startswith("clock faults: redis-server 8.0.2 does not start under "
                              "libfaketime on this system (it crashed at start)")
    hung = redis.faked_start_refused("valkey-server", "redis on n2 did not become ready in "
                                                      "10 s; log tail:\nexited")
    assert "(it did not answer at start)" in hung and "\n" not in hung
