"""Valkey in Redis's place (`--server valkey`): the Redis backends run valkey-server and
valkey-sentinel with the same clients, a run records it, and Redlock's first finding
(a majority of masters restarted empty inside one TTL grants the lock twice) holds on
Valkey as on Redis.

Valkey is packaged from Debian 13 and Ubuntu 25.04 on. Where the distribution has none
(Debian 12) the runs here skip, also on CI: CI's Debian 13 check (scripts/release-check)
runs the Valkey backends there; the refusal without Valkey is tested everywhere.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from lockcheck.preflight import find_program
from tests.conftest import NOT_PACKAGED
from tests.integration.detect import first_showing
from tests.integration.test_redlock import KILL

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

needs_valkey = pytest.mark.skipif(
    find_program("valkey-server") is None or find_program("valkey-sentinel") is None,
    reason=f"valkey-server/valkey-sentinel: {NOT_PACKAGED} (Valkey is packaged in Debian 13, "
           "Ubuntu 25.04 and newer)")


@needs_valkey
@pytest.mark.parametrize("backend", ["redis", "redlock", "redis-sentinel"])
def test_the_redis_backends_run_on_valkey(cli: Any, backend: str) -> None:
    r = cli("test", "--backend", backend, "--server", "valkey", "--nemesis", "none",
            "--time-limit", "4", "--quiet", "1")
    assert r.code == 0, r.explain()
    assert r.run_dir is not None and r.run_dir.parts[-4] == f"{backend}@valkey"
    t = r.test_json()
    assert t["server"] == "valkey"
    assert "valkey-server" in t["server_versions"], t["server_versions"]
    assert not any(k.startswith("redis-server") for k in t["server_versions"])
    assert r.results()["checkers"]["mutual-exclusion"]["sections"] > 5
    cli.assert_no_leftovers()


@needs_valkey
@pytest.mark.detection
def test_valkey_masters_restarted_empty_inside_a_ttl_grant_twice(cli: Any) -> None:
    argv = (*KILL, "--server", "valkey", "--restart-delay-ms", "100")
    r = first_showing(cli, argv, lambda r: r.code == 1)
    assert r.code == 1, r.explain()
    c = r.results()["checkers"]
    assert c["lease-safety"]["valid"] is False and c["mutual-exclusion"]["valid"] is False
    assert r.test_json()["server_versions"].get("valkey-server")


def test_without_valkey_the_run_is_refused_with_the_reason(cli: Any, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for program in ("ip", "iptables", "redis-server"):  # all but Valkey
        found = find_program(program)
        if found is None:
            pytest.skip(f"{program} not installed")
        (bindir / program).symlink_to(found)
    r = cli("test", "--backend", "redlock", "--server", "valkey", "--time-limit", "2",
            env={"PATH": f"{bindir}:{os.path.dirname(sys.executable)}"})
    assert r.code == 254, r.explain()
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines == ["lockcheck: valkey-server not found; install it with: apt-get install -y "
                     "valkey-server (packaged in Debian 13, Ubuntu 25.04 and newer)"], lines
    assert not r.traces
