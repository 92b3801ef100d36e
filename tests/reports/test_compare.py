"""`lockcheck compare` over a results folder of synthetic runs and a test-all record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockcheck.errors import BadInput
from lockcheck.results.compare import compare
from lockcheck.results.matrix import Cell, CellResult, Matrix
from lockcheck.results.store import new_run_dir
from tests.reports.synthetic import make_run


@pytest.fixture(scope="module")
def results_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("results")
    kill = ("kill",)
    make_run(root / "simlock-fenced-kill" / "r1", ops=2000, backend="simlock", nemesis=kill)
    make_run(root / "simlock-fenced-unfenced-kill" / "r1", ops=2000, backend="simlock",
             resource="unfenced", nemesis=kill)
    for r, seed in (("r1", 1), ("r2", 2)):
        make_run(root / "simlock-mutex-kill" / r, ops=2000, backend="simlock", seed=seed,
                 workload="mutex", nemesis=kill)
    # no fault in 300 ops: a safe cell, and a safe run in the unsafe cell (it must not
    # hide the two that lost mutual exclusion)
    make_run(root / "simlock-mutex-none" / "r1", ops=300, backend="simlock", workload="mutex",
             nemesis=(), interval_ms=10**6)
    make_run(root / "simlock-mutex-kill" / "r3", ops=300, backend="simlock", workload="mutex",
             nemesis=kill, interval_ms=10**6)
    # a run that crashed before it left a folder, as test-all records it
    record = new_run_dir(root, "test-all")
    cell = Cell("otherlock", "mutex", "kill")
    m = Matrix(root, record, [cell], time_limit=5, count=1, pass_through=[])
    (record / "cells").mkdir()
    log = record / "cells" / "001-otherlock-mutex-kill-1.log"
    log.write_text("Traceback (most recent call last):\nRuntimeError: boom\n")
    m.results = [CellResult("otherlock", "mutex", "kill", 1, "error", exit_code=255,
                            log=str(log.relative_to(root)), summary="RuntimeError: boom")]
    m.save(2)
    return root


@pytest.fixture(scope="module")
def built(results_root: Path) -> tuple[str, str, Path]:
    out = results_root / "site"
    index, md = compare(results_root, out)
    return index.read_text(), md.read_text(), out


def md_row(md: str, workload: str, backend: str) -> list[str]:
    section = md.split(f"## Workload: {workload}\n", 1)[1].split("\n## ", 1)[0]
    line = next(ln for ln in section.splitlines() if ln.startswith(f"| **{backend}** |"))
    return [c.strip() for c in line.strip("|").split(" | ")][1:]


def md_header(md: str, workload: str) -> list[str]:
    section = md.split(f"## Workload: {workload}\n", 1)[1]
    line = next(ln for ln in section.splitlines() if ln.startswith("| backend |"))
    return [c.strip() for c in line.strip("|").split(" | ")][1:]


def test_rows_backends_columns_nemeses_per_workload(built: tuple[str, str, Path]) -> None:
    _, md, _ = built
    assert md_header(md, "mutex") == ["none", "kill"]
    none, kill = md_row(md, "mutex", "simlock")
    assert none.startswith("✅ **safe**")
    assert kill.startswith("❌ **unsafe** (2/3)") and "overlap" in kill
    assert "granted" in kill and "p50/p99" in kill
    assert md_row(md, "mutex", "otherlock")[1].startswith("⚠️ **error**")
    assert md_row(md, "mutex", "otherlock")[0] == ""  # not run


def test_fence_caught_it_and_where_it_did_not(built: tuple[str, str, Path]) -> None:
    _, md, _ = built
    (fenced,) = md_row(md, "fenced", "simlock")
    assert fenced.startswith("✅ **safe**") and "the lock failed, the fence held" in fenced
    assert re.search(r"\d+ saves", fenced)
    (unfenced,) = md_row(md, "fenced (unfenced resource)", "simlock")
    assert unfenced.startswith("❌ **unsafe**") and "stale writes accepted" in unfenced
    top = md.split("## Workload", 1)[0]
    assert "The fence at the resource caught it: simlock under kill" in top
    assert "Stale writes reached the resource: simlock under kill" in top
    assert "Mutual exclusion was lost by simlock under kill" in top
    assert "otherlock under kill (mutex, error)" in top
    assert "7 runs" in top and "Versions:" in top


def test_links_to_every_runs_report_and_to_the_crash_log(results_root: Path,
                                                        built: tuple[str, str, Path]) -> None:
    index, md, out = built
    links = re.findall(r"\]\(([^)]+)\)", md)
    reports = [ln for ln in links if "report.html" in ln]
    assert len(reports) == 6  # every run that left a folder
    for ln in reports:
        assert (out / ln.split("#")[0]).resolve().is_file()  # compare wrote missing reports
    assert any(ln.endswith("001-otherlock-mutex-kill-1.log") for ln in links)
    assert str(results_root.parent) not in index + md  # no path of this machine
    statuses = re.findall(r'data-status="(\w+)"', index)
    assert sorted(statuses) == ["error", "safe", "safe", "unsafe", "unsafe"]


def test_safe_everywhere_says_whether_the_lock_or_only_the_fence_held(tmp_path: Path) -> None:
    make_run(tmp_path / "quietlock-mutex-none" / "r1", ops=300, backend="quietlock",
             workload="mutex", nemesis=(), interval_ms=10**6)
    make_run(tmp_path / "fencedlock-fenced-kill" / "r1", ops=2000, backend="fencedlock",
             nemesis=("kill",))
    _, md = compare(tmp_path, tmp_path / "site")
    top = md.read_text().split("## Workload", 1)[0]
    assert "Safe in every cell, mutual exclusion included: quietlock." in top
    assert ("Safe in every cell only because the fence held where the lock did not: "
            "fencedlock.") in top


def test_a_slimmed_folder_compares_the_same(results_root: Path, tmp_path: Path,
                                             built: tuple[str, str, Path]) -> None:
    """Without histories and logs (what `scripts/comparison --slim` keeps to publish),
    every run is still read from its results.json: the same cells, the same links."""
    import shutil

    slim = tmp_path / "slim"
    shutil.copytree(results_root, slim, symlinks=True,
                    ignore=shutil.ignore_patterns("history.jsonl", "site"))
    assert not list(slim.rglob("history.jsonl"))
    index, md = compare(slim, slim / "site")
    statuses = re.findall(r'data-status="(\w+)"', index.read_text())
    assert sorted(statuses) == sorted(re.findall(r'data-status="(\w+)"', built[0]))
    assert md.read_text().count("report.html") == built[1].count("report.html")


def test_not_a_results_folder(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such results folder"):
        compare(tmp_path / "nope", tmp_path)
    with pytest.raises(BadInput, match="no runs in it"):
        compare(tmp_path, tmp_path)
