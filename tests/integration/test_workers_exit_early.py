"""A run whose every client worker quits early (here at its 20th acquire, exit status
0) is unknown, exit status 2, never valid: the history shows no overlap only because
the clients stopped trying."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

REPO = Path(__file__).resolve().parents[2]


def test_every_worker_gone_early_is_unknown_not_valid(module_cli: Any) -> None:
    r = module_cli("test", "--backend", "redis", "--client",
                   "tests/integration/dying_lock.py:make_clients", "--nemesis", "none",
                   "--time-limit", "8", timeout=150, cwd=REPO)
    assert r.code == 2, r.explain()
    res = r.results()
    assert res["valid"] == "unknown", res["summary"]
    assert res["checkers"]["mutual-exclusion"]["valid"] is True  # no overlap in what ran
    assert "every client worker exited before the time limit" in res["summary"]
    assert "every worker exited early" in r.stderr
    module_cli.assert_no_leftovers(None)
