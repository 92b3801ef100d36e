"""Hidden grants on dynalite: a grant the client was told had failed.

Two runs start together under `loss` (50 % of n1's packets dropped, faults every 2 s):

* `dynamodb-retries`, botocore's default retries: a grant whose reply was lost is sent
  again and refused by its own first attempt, so the client says busy (a definite
  failure) for a grant the service made. The fence it used up is a number no acquire
  was told it got: the hidden-grants checker finds it and the run is invalid, though
  mutual exclusion, lease safety and linearizability all hold.
* `dynamodb`, retries off: a lost reply is an `info` (may have been applied), which
  explains every gap; the checker passes and the run is valid.

A retried grant needs a lost reply in a fault window: a run that shows none is tried
again, up to twice more, one at a time (tests/integration/detect.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.detect import first_showing
from tests.integration.test_dynamodb import dynalite_or_skip
from tests.integration.test_redlock import run_all

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

LOSS = ("--nemesis", "loss", "--loss-probability", "0.5", "--time-limit", "14",
        "--nemesis-interval", "2",
        "--quiet", "2")
RUNS: dict[str, tuple[str, ...]] = {
    "retries": ("--backend", "dynamodb-retries", *LOSS),
    "safe": ("--backend", "dynamodb", *LOSS),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    dynalite_or_skip()
    yield from run_all(module_cli, RUNS)


def hidden(r: Any) -> dict[str, Any]:
    res: dict[str, Any] = r.results()["checkers"]["hidden-grants"]
    return res


def found_hidden_grants(r: Any) -> bool:
    return bool(hidden(r).get("hidden_grant_count"))


def test_retries_hide_grants_the_client_reports_as_failed(module_cli: Any,
                                                          runs: dict[str, Any]) -> None:
    r = runs["retries"]
    if not found_hidden_grants(r):  # no reply of a grant was lost: again
        r = first_showing(module_cli, RUNS["retries"], found_hidden_grants, tries=2,
                          timeout=150)
    assert r.code == 1, r.explain()
    res = r.results()
    hg = res["checkers"]["hidden-grants"]
    assert hg["valid"] is False and hg["hidden_grant_count"] > 0, hg
    assert res["summary"].startswith("hidden-grants:"), res["summary"]
    # each gap names its lock and fences, and the acquires told failed around it
    gap = hg["gaps"][0]
    assert gap["missing"] and gap["key"].startswith("k"), gap
    assert gap["failed_acquire_count"] > 0 and gap["failed_acquires"], gap
    # nothing else sees it: the lock's other checkers hold
    for name in ("mutual-exclusion", "lease-safety", "linearizable"):
        assert res["checkers"][name]["valid"] is True, (name, res["checkers"][name])


def test_without_retries_every_gap_is_an_unknown_outcome(runs: dict[str, Any]) -> None:
    r = runs["safe"]
    assert r.code == 0, r.explain()
    hg = hidden(r)
    assert hg["valid"] is True and hg["hidden_grant_count"] == 0, hg
    assert hg["granted_fences"] > 0, hg
