"""The README's first command uses the default, relative `results/`: it must work as is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import lockcheck_ids_on_host

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


def test_relative_default_results_dir(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "lockcheck.cli", "test", "--nemesis", "none",
                        "--time-limit", "3"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, start_new_session=True)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "results" / "redis" / "mutex" / "none" / "latest"
    # results/latest is the newest run of all
    assert (tmp_path / "results" / "latest").resolve() == run.resolve()
    assert json.loads((run / "results.json").read_text())["valid"] is True
    assert "Ready to accept connections" in (run / "nodes" / "n1" / "redis.log").read_text()
    rid = json.loads((run / "test.json").read_text())["run_id"]
    assert rid not in lockcheck_ids_on_host(), "the run left something behind"
