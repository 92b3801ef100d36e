"""The database's own concurrency control in the settlement workload, real servers:
`--resource row-lock` (the row read FOR UPDATE in the transaction that settles it) and
`--resource version` (a conditional update on the row's version), neither with a fence.

With no lock at all in front (`memory-no-lock` grants every acquire), the lock-only
job pays merchant-days twice at once, with no fault, and each database layer alone
pays every one at most once; with Redis's lock under client pauses, the same.

All start at once, each on its own cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

NO_LOCK = ("--backend", "memory-no-lock", "--workload", "settlement", "--nemesis", "none",
           "--time-limit", "8", "--keys", "2", "--quiet", "3")
PAUSES = ("--backend", "redis", "--workload", "settlement", "--nemesis", "client-pause",
          "--time-limit", "16", "--nemesis-interval", "1.5", "--keys", "2", "--quiet", "3")
RUNS = {
    "no-lock unfenced": (*NO_LOCK, "--resource", "unfenced"),
    "no-lock row-lock": (*NO_LOCK, "--resource", "row-lock"),
    "no-lock version": (*NO_LOCK, "--resource", "version"),
    "pauses row-lock": (*PAUSES, "--resource", "row-lock"),
    "pauses version": (*PAUSES, "--resource", "version"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    started = {name: module_cli.start("test", *argv) for name, argv in RUNS.items()}
    done = {name: p.wait(timeout=180) for name, p in started.items()}
    for name, r in done.items():
        assert r.run_dir is not None and r.code in (0, 1), f"{name}: {r.explain()}"
    yield done
    module_cli.assert_no_leftovers(None)


def settlement(r: Any) -> dict[str, Any]:
    res: dict[str, Any] = r.results()["checkers"]["settlement"]
    return res


def paid_once(r: Any) -> None:
    """The verdict, the checker and the store's own rows agree: no day paid twice."""
    assert r.code == 0, r.explain()
    s = settlement(r)
    assert s["valid"] is True and s["double_settlement_count"] == 0, s
    assert s["merchant_days_settled"] > 10, s
    table = json.loads((r.run_dir / "settlements.json").read_text())
    days = [(p["merchant"], p["day"]) for p in table["payments"]]
    assert days and len(days) == len(set(days))


def test_with_no_lock_the_lock_only_job_pays_days_twice(runs: dict[str, Any]) -> None:
    r = runs["no-lock unfenced"]
    assert r.code == 1, r.explain()
    s = settlement(r)
    assert s["double_settlement_count"] > 0 and s["ground_truth"] == "store", s
    # no lock at all: every acquire was granted, with no fault
    assert r.results()["checkers"]["mutual-exclusion"]["valid"] is False


@pytest.mark.parametrize("mode", ["row-lock", "version"])
def test_with_no_lock_the_database_alone_pays_each_day_once(runs: dict[str, Any],
                                                            mode: str) -> None:
    r = runs[f"no-lock {mode}"]
    paid_once(r)
    s = settlement(r)
    # the layer did the stopping: second runs waited on the row and read it paid, or
    # their update found another version
    assert s["stopped"][mode] > 0, s
    assert r.results()["checkers"]["mutual-exclusion"]["valid"] is False
    assert f"by the {'row lock' if mode == 'row-lock' else 'version check'}" in s["summary"]


@pytest.mark.parametrize("mode", ["row-lock", "version"])
def test_under_client_pauses_the_database_pays_each_day_once(runs: dict[str, Any],
                                                             mode: str) -> None:
    paid_once(runs[f"pauses {mode}"])
