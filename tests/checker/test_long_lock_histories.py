"""`lockcheck check` on long lock histories of every shape decides: valid or invalid,
never unknown (the 1,000,000-op figures are in docs/benchmarks-locks.md)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockcheck import exitcodes
from lockcheck.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_locks


@pytest.mark.parametrize("shape", ["acq-fences", "all-fences", "no-fences", "no-fences-crash5"])
@pytest.mark.parametrize("plant", [False, True], ids=["valid", "lie"])
def test_long_history_is_decided(tmp_path: Path, shape: str, plant: bool) -> None:
    p = tmp_path / "history.jsonl"
    bench_locks.generate(p, ops=3000, keys=3, clients=8, ttl_ms=100, seed=7,
                         shape=dataclasses.replace(bench_locks.SHAPES[shape], plant=plant))
    r = CliRunner().invoke(main, ["check", "--model", "linearizable", str(p)],
                           catch_exceptions=False)
    want = exitcodes.INVALID if plant else exitcodes.VALID
    assert r.exit_code == want, r.output
