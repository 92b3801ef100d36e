"""A fault that fails mid-run: the run tears down, keeps and checks its history, and says so."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from lockcheck.nemesis.partition import Partition
from lockcheck.runner import run_test
from lockcheck.spec import TestSpec
from tests.conftest import lockcheck_ids_on_host

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


def test_failing_nemesis_keeps_the_evidence(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_start(self: Partition, rng: random.Random) -> dict[str, object]:
        raise RuntimeError("iptables exploded")

    monkeypatch.setattr(Partition, "start", broken_start)
    out = io.StringIO()
    spec = TestSpec(nemesis=("partition",), time_limit=6, nemesis_interval=1.0,
                    results_dir=str(tmp_path / "results"), seed=3)
    outcome = run_test(spec, out=out)
    assert outcome.failure is not None and "iptables exploded" in outcome.failure
    assert outcome.valid in ("unknown", False)
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert "iptables exploded" in results["failure"]
    history = (outcome.run_dir / "history.jsonl").read_text().splitlines()
    assert any('"f": "acquire"' in line for line in history), "the clients' ops were kept"
    assert "start-partition" in "".join(history), "the attempted fault is on record"
    rid = json.loads((outcome.run_dir / "test.json").read_text())["run_id"]
    assert rid not in lockcheck_ids_on_host(), "the failed run left namespaces behind"
