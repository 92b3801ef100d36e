"""`--nemesis outage`: every server of the lock service killed at once for longer than
a lease, real servers. All start at once, each on its own cluster:

* an in-house lock that fails open (`planted_fail_open_lock.py`: a refused connection
  reads as "granted"): its holders enter with every server down, and the outage
  checker names those grants;
* lockcheck's Redis client: every acquire in the outage fails, nothing is granted;
* etcd, three members all down: they come back together (a quorum cannot form one
  member at a time), and the lock serves again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

REPO = Path(__file__).resolve().parents[2]
OUTAGE = ("--nemesis", "outage", "--time-limit", "10", "--nemesis-interval", "2",
          "--quiet", "3")
RUNS = {
    "fail-open": ("--backend", "redis", "--client",
                  "tests/integration/planted_fail_open_lock.py:make_clients", *OUTAGE),
    "redis": ("--backend", "redis", *OUTAGE),
    "etcd": ("--backend", "etcd", *OUTAGE),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    started = {name: module_cli.start("test", *argv, cwd=REPO) for name, argv in RUNS.items()}
    done = {name: p.wait(timeout=180) for name, p in started.items()}
    for name, r in done.items():
        assert r.run_dir is not None, f"{name}: {r.explain()}"
    yield done
    module_cli.assert_no_leftovers(None)


def outage(r: Any) -> dict[str, Any]:
    res: dict[str, Any] = r.results()["checkers"]["outage"]
    return res


def test_a_client_that_fails_open_is_flagged(runs: dict[str, Any]) -> None:
    r = runs["fail-open"]
    assert r.code == 1, r.explain()
    o = outage(r)
    assert o["valid"] is False and o["windows"] >= 1, o
    assert o["acquires"]["granted"] > 0 and o["acquires"]["failed"] == 0, o
    g = o["granted_without_a_server"][0]
    assert g["outage_ns"][0] <= g["invoke_ns"] < g["ok_ns"] < g["outage_ns"][1]
    assert "granted while every server was down" in r.results()["summary"]


def test_lockchecks_redis_client_fails_and_grants_nothing(runs: dict[str, Any]) -> None:
    o = outage(runs["redis"])
    assert o["valid"] is True and o["windows"] >= 1, o
    a = o["acquires"]
    assert a["granted"] == 0 and a["failed"] > 0, o
    # the fault lasted two TTLs at least (1000 ms each)
    assert o["outage_s"] >= 2.0 * o["windows"] - 0.05, o


def test_an_ensemble_all_down_comes_back_together(runs: dict[str, Any]) -> None:
    r = runs["etcd"]
    assert r.code == 0, r.explain()
    res = r.results()
    assert outage(r)["valid"] is True and not res.get("heal_errors"), res.get("heal_errors")
    # the recovery phase got the lock after the last restart
    assert "NOT RECOVERED" not in r.stdout + r.stderr
