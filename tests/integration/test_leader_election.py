"""The leader workload on Redis, real servers: a leader paused past its lease
(`client-pause`) acts once more with its old term after another leader was elected.
The leadership checker catches that deposed leader's action: accepted by an unfenced
store (the run is invalid), refused by a store that refuses stale terms (valid); with
no fault, no leader is ever deposed.

All start at once, each on its own cluster, each 8 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

BASE = ("--backend", "redis", "--workload", "leader", "--hold-ms", "2000",
        "--time-limit", "8", "--keys", "1", "--quiet", "2", "--seed", "3")
PAUSES = (*BASE, "--nemesis", "client-pause", "--nemesis-interval", "1")
RUNS = {
    "pauses unfenced": (*PAUSES, "--resource", "unfenced"),
    "pauses fenced": (*PAUSES, "--resource", "fenced"),
    "no fault": (*BASE, "--nemesis", "none", "--resource", "unfenced"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    started = {name: module_cli.start("test", *argv) for name, argv in RUNS.items()}
    done = {name: p.wait(timeout=180) for name, p in started.items()}
    for name, r in done.items():
        assert r.run_dir is not None and r.code in (0, 1), f"{name}: {r.explain()}"
    yield done
    module_cli.assert_no_leftovers(None)


def leadership(r: Any) -> dict[str, Any]:
    res: dict[str, Any] = r.results()["checkers"]["leadership"]
    return res


def test_a_deposed_leaders_action_is_caught_when_the_store_accepts_it(
        runs: dict[str, Any]) -> None:
    r = runs["pauses unfenced"]
    le = leadership(r)
    assert r.code == 1 and le["valid"] is False, r.explain()
    assert le["deposed_accepted_count"] >= 1, le
    d = le["deposed"][0]
    # acted after its lease was over and after its successor's term began
    assert d["invoke"] > d["lease_over_by"] and d["invoke"] > d["successor"]["since"], d
    assert d["successor"]["term"] > d["term"], d
    m = r.results()["metrics"]["leadership"]
    assert m["stale_accepted"] >= 1 and m["leadership_changes"] >= 1, m


def test_a_store_that_refuses_stale_terms_stops_the_deposed_leader(
        runs: dict[str, Any]) -> None:
    r = runs["pauses fenced"]
    le = leadership(r)
    assert r.code == 0 and le["valid"] is True, r.explain()
    assert le["deposed_refused_count"] >= 1 and le["deposed_accepted_count"] == 0, le
    assert le["split_brain_count"] == 0, le
    assert r.results()["metrics"]["leadership"]["stale_refused"] >= 1


def test_without_faults_no_leader_is_deposed(runs: dict[str, Any]) -> None:
    r = runs["no fault"]
    le = leadership(r)
    assert r.code == 0 and le["valid"] is True, r.explain()
    assert le["deposed_count"] == 0 and le["split_brain_count"] == 0, le
    assert le["actions"] > 10 and le["leaders"] >= 2, le
