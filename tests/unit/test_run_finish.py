"""The end of `lockcheck test` (runner.Run.finish) when the run's history cannot be read:
results.json is still written, with the error, and the CLI exits with the code of a
harness failure (255), not as for a user's bad input (254) with nothing written."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lockcheck import exitcodes
from lockcheck.backends import backend
from lockcheck.cli import main
from lockcheck.cluster.providers import provider
from lockcheck.cluster.state import Registry
from lockcheck.results import store
from lockcheck.runner import Plan, Run, RunOutcome
from lockcheck.spec import TestSpec
from lockcheck.workloads.registry import workload

# line 3 is a renew of process 0 after its info: the history breaks the process rules
BROKEN = (
    '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "acquire", "key": "k0"}\n'
    '{"index": 1, "time": 2, "process": 0, "type": "info", "f": "acquire", "key": "k0"}\n'
    '{"index": 2, "time": 3, "process": 0, "type": "invoke", "f": "renew", "key": "k0"}\n')


def finished_run(tmp_path: Path, history: str) -> tuple[RunOutcome, dict[str, Any], str]:
    """A run whose workers wrote `history`, ended (nothing else of it was started)."""
    spec = TestSpec(backend="redis", workload="mutex", nemesis=(), nodes=1,
                    results_dir=str(tmp_path), report=False)
    p = Plan(spec=spec, backend=backend("redis"), workload=workload("mutex"),
             provider=provider("local"), db=backend("redis").make_db(spec))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    out = io.StringIO()
    run = Run(p, run_dir, out, Registry(tmp_path / "state"))
    run.write_test_json()
    run.writer.close()
    (run_dir / store.HISTORY).write_text(history)
    outcome = run.finish(False, None)
    return outcome, json.loads((run_dir / store.RESULTS).read_text()), out.getvalue()


def test_an_unreadable_history_still_ends_with_results_json(tmp_path: Path) -> None:
    outcome, results, out = finished_run(tmp_path, BROKEN)
    assert results["valid"] == "unknown" and outcome.valid == "unknown"
    assert "the history could not be read" in results["failure"]
    assert ":3: invoke renew of process 0 after an info" in results["failure"]
    assert results["summary"].startswith("unknown: the history could not be read")
    assert outcome.failure == results["failure"]
    assert results["stats"]["ops"] == 0 and results["interrupted"] is False
    assert "results: " in out


def test_a_readable_history_is_checked(tmp_path: Path) -> None:
    # the same ops, the renew by the process that took over after the info
    outcome, results, _ = finished_run(tmp_path, BROKEN.replace(
        '"time": 3, "process": 0', '"time": 3, "process": 6'))
    assert "failure" not in results and outcome.failure is None
    assert results["stats"]["ops"] == 3


def test_the_cli_exits_255_with_the_results_written(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import lockcheck.runner as runner

    seen: dict[str, Any] = {}

    def run_test(spec: TestSpec, *a: Any, **kw: Any) -> RunOutcome:
        outcome, seen["results"], _ = finished_run(tmp_path, BROKEN)
        return outcome

    monkeypatch.setattr(runner, "run_test", run_test)
    r = CliRunner().invoke(main, ["test", "--backend", "redis", "--nemesis", "none",
                                  "--results-dir", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == exitcodes.INTERNAL, r.output
    assert "the run failed: the history could not be read" in r.stderr
    assert seen["results"]["failure"] in r.stderr
