"""Reports of real runs: a `test-all` matrix against redis-server in namespaces, then
`compare`, the run reports and the matrix page in a browser; and a matrix whose runs
hang past their time, which test-all stops, records and goes past."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lockcheck.results.matrix import exit_code
from tests.reports.browser import chromium, render

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


@pytest.fixture(scope="module")
def matrix(module_cli: Any) -> tuple[Any, Path, dict[str, Any]]:
    results = module_cli.cwd / "matrix-results"
    r = module_cli("test-all", "--backends", "redis", "--nemeses", "none kill",
                   "--workloads", "mutex,fenced", "--time-limit", "4", "--seed", "11",
                   "--nemesis-interval", "1",  # passed through to each test
                   "--results-dir", results, timeout=240)
    record = json.loads((results / "test-all" / "latest" / "matrix.json").read_text())
    return r, results, record


def test_every_cell_ran_as_its_own_test(matrix: tuple[Any, Path, dict[str, Any]]) -> None:
    r, results, record = matrix
    cells = record["cells"]
    assert [(c["workload"], c["nemesis"]) for c in cells] == [
        ("mutex", "none"), ("mutex", "kill"), ("fenced", "none"), ("fenced", "kill")]
    assert all(c["status"] in ("safe", "unsafe") for c in cells), r.explain()
    assert r.code == exit_code([c["status"] for c in cells]) == record["exit_code"]
    assert cells[0]["status"] == "safe" and cells[2]["status"] == "safe"
    for c in cells:
        log = (results / c["log"]).read_text()
        assert log.startswith(f"$ lockcheck test --backend redis --workload {c['workload']}")
        run = results / c["run_dir"]
        res = json.loads((run / "results.json").read_text())
        assert res["valid"] == c["valid"]
        kill = res["metrics"]["availability"]["faults"].get("kill")
        assert (kill is not None) == (c["nemesis"] == "kill")
    assert "compare them with: lockcheck compare" in r.stderr


def test_compare_and_the_pages_in_a_browser(module_cli: Any, tmp_path: Path,
                                            matrix: tuple[Any, Path, dict[str, Any]]) -> None:
    _, results, record = matrix
    c = module_cli("compare", results, timeout=120)
    assert c.code == 0, c.explain()
    md = (results / "report.md").read_text()
    assert "| backend | none | kill |" in md and "| **redis** |" in md
    for cell in record["cells"]:
        assert (results / cell["run_dir"] / "report.html").is_file()
    if chromium() is None:
        pytest.skip("chromium is not installed (scripts/install --dev installs it)")
    page = render(results / "index.html", screenshot=tmp_path / "index.png", size=(1300, 900))
    assert len(re.findall(r'<td class="cell \w+" data-status=', page.dom)) == 4
    assert not page.console_errors() and "data-js-errors" not in page.dom[:400]
    kill = next(x for x in record["cells"] if x["nemesis"] == "kill")
    rep = render(results / kill["run_dir"] / "report.html", screenshot=tmp_path / "run.png")
    head = rep.dom[:400]
    assert 'data-timeline-ready="1"' in head and 'data-images-loaded="5"' in head, head
    assert not rep.console_errors() and "data-js-errors" not in head


def test_runs_that_hang_are_stopped_and_recorded(module_cli: Any) -> None:
    results = module_cli.cwd / "stuck-results"
    r = module_cli("test-all", "--backends", "redis", "--nemeses", "none,kill",
                   "--workloads", "mutex", "--time-limit", "30", "--cell-timeout", "3",
                   "--results-dir", results, timeout=180)
    assert r.code == 2, r.explain()
    record = json.loads((results / "test-all" / "latest" / "matrix.json").read_text())
    assert [c["status"] for c in record["cells"]] == ["error", "error"]  # and it went on
    for c in record["cells"]:
        assert c["summary"].startswith("timed out after 3 s")
        assert (results / c["log"]).is_file()
        # stopped like a Ctrl-C: torn down, and what was recorded still checked
        assert c["exit_code"] == 130
        assert (results / c["run_dir"] / "results.json").is_file()
    module_cli.assert_no_leftovers()
