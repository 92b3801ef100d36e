"""Run folders for the report tests: synthetic ones (tests/reports/synthetic.py, made
with the project's writer and checkers), made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.synthetic import make_run


@pytest.fixture(scope="session")
def fenced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fenced workload, fenced resource: overlaps and saves, no stale write accepted."""
    return make_run(tmp_path_factory.mktemp("runs") / "synthetic-fenced" / "1", ops=6000)


@pytest.fixture(scope="session")
def unfenced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run against an unfenced resource: stale writes get through."""
    return make_run(tmp_path_factory.mktemp("runs") / "synthetic-unfenced" / "1", ops=6000,
                    resource="unfenced")


@pytest.fixture(scope="session")
def mutex_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs") / "synthetic-mutex" / "1", ops=4000,
                    workload="mutex")
