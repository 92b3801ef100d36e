"""`lockcheck compare` over a results folder of synthetic runs and a test-all record."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lockcheck.errors import BadInput
from lockcheck.results import store
from lockcheck.results.cells import CellView, Run, apply_results, detection_bound
from lockcheck.results.compare import Comparison, cell_text, compare, load
from lockcheck.results.matrix import Cell, CellResult, Matrix
from lockcheck.results.publish import publish
from lockcheck.results.store import new_run_dir
from lockcheck.results.verify import recheck, verify
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
    assert none.startswith("✅ **safe**<br>0 of 1 run unsafe<br>tried: ")
    assert "per-run detection chance < 95% (95% bound)" in none
    assert kill.startswith("❌ **unsafe**<br>2 of 3 runs unsafe<br>first violation after ")
    assert re.search(r"\d+ overlaps \(2 of 3\)", kill)
    assert "granted" in kill and "acquire p50/p99" in kill and "hold p99" in kill
    assert "renewals failed" in kill and "expiries while working" in kill
    assert md_row(md, "mutex", "otherlock")[1].startswith("⚠️ **error**<br>crashed in 1 of 1")
    assert md_row(md, "mutex", "otherlock")[0] == ""  # not run


def test_the_lock_alone_or_the_lock_and_the_resource(built: tuple[str, str, Path]) -> None:
    _, md, _ = built
    (fenced,) = md_row(md, "fenced", "simlock")
    # overlaps make a fenced cell unsafe even where the fence kept the resource safe
    assert fenced.startswith("❌ **unsafe**") and "the lock alone failed in 1" in fenced
    # the simulated service's fences go backwards: those refusals are not saves
    assert re.search(r"0 saves, \d+ fence regressions", fenced)
    (unfenced,) = md_row(md, "fenced (unfenced resource)", "simlock")
    assert unfenced.startswith("❌ **unsafe**") and "stale writes accepted" in unfenced
    assert "the lock and the resource in 1" in unfenced
    top = md.split("## Workload", 1)[0]
    assert "an outage rather than a save: simlock under kill (" in top
    assert "so the resource held where the lock failed" not in top
    assert "Stale writes reached the resource: simlock under kill" in top
    assert "Mutual exclusion was lost by simlock under kill" in top
    assert "otherlock under kill (mutex, crashed in 1 of 1 runs)" in top
    assert "7 runs" in top and "Versions:" in top and "How to read a cell" in top


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
    assert sorted(statuses) == ["error", "safe", "unsafe", "unsafe", "unsafe"]


def test_no_violation_anywhere_is_said_per_backend(tmp_path: Path) -> None:
    make_run(tmp_path / "quietlock-mutex-none" / "r1", ops=300, backend="quietlock",
             workload="mutex", nemesis=(), interval_ms=10**6)
    make_run(tmp_path / "fencedlock-fenced-kill" / "r1", ops=2000, backend="fencedlock",
             nemesis=("kill",))
    _, md = compare(tmp_path, tmp_path / "site")
    top = md.read_text().split("## Workload", 1)[0]
    assert "No violation in any run of any cell: quietlock." in top
    assert "fencedlock" not in top.split("No violation", 1)[1]


def _cells(c: Comparison) -> list[tuple[str, str, str, list[str]]]:
    return [(w, b, n, cell_text(cell, n)) for w, b, n, cell in c.cells()]


def test_two_shard_folders_merge_to_the_cells_of_one(results_root: Path,
                                                     tmp_path: Path) -> None:
    """The runs of one folder, split over two (as two machines' shards would leave
    them): the merged page has the same cells, word for word."""
    a, b = tmp_path / "shard-1", tmp_path / "shard-2"
    shutil.copytree(results_root, a, symlinks=True, ignore=shutil.ignore_patterns("site"))
    b.mkdir()
    moved = 0
    for i, d in enumerate(sorted(store.run_dirs(a))):
        if i % 2:
            dest = b / d.relative_to(a)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(d), dest)
            moved += 1
    assert moved >= 2 and list(store.run_dirs(a))
    one, two = load([results_root]), load([a, b])
    assert len(two.runs) == len(one.runs)
    assert _cells(two) == _cells(one)
    assert two.warnings == []
    idx, _ = compare([a, b], tmp_path / "site")
    assert sorted(re.findall(r'data-status="(\w+)"', idx.read_text())) == \
        sorted(re.findall(r'data-status="(\w+)"', (results_root / "site" / "index.html")
                          .read_text()))
    # a shard that ran another server version: said, and the cells are still merged
    t = next(store.run_dirs(b)) / store.TEST
    test = json.loads(t.read_text())
    test["versions"]["simulator"] = "another"
    t.write_text(json.dumps(test))
    warnings = load([a, b]).warnings
    assert len(warnings) == 1 and "simulator differs" in warnings[0], warnings


def test_published_folder_compares_the_same_and_verifies(results_root: Path, tmp_path: Path,
                                                         built: tuple[str, str, Path]) -> None:
    """--publish: compressed histories, no machine path, one full report per cell; the
    cells are the same, and every verdict re-checks from the published history."""
    src = tmp_path / "results"
    shutil.copytree(results_root, src, symlinks=True, ignore=shutil.ignore_patterns("site"))
    out = tmp_path / "site"
    (dest,) = publish([src], out)
    assert not list(dest.rglob("history.jsonl")) and list(dest.rglob("history.jsonl.xz"))
    assert _cells(load([dest])) == _cells(load([results_root]))
    reports = list(dest.rglob("report.html"))
    assert len(reports) == 4  # one per cell that has run folders
    assert len(list(dest.rglob("run.html"))) == 6 - 4
    for p in dest.rglob("*"):
        if p.is_file() and p.suffix != ".xz":
            assert str(tmp_path) not in p.read_text(errors="replace"), p
    assert all(r.agrees for r in verify(dest))
    # a published verdict that the history does not bear out is named
    res = next(p for p in dest.rglob("results.json") if '"valid": false' in p.read_text())
    res.write_text(res.read_text().replace('"valid": false', '"valid": true', 1))
    bad = [r for r in verify(dest) if not r.agrees]
    assert [r.run_dir for r in bad] == [res.parent]
    assert bad[0].published is True and bad[0].rechecked is False
    # a run that crashed before its results.json published no verdict: counted apart
    other = next(p for p in dest.rglob("results.json") if p.parent != res.parent)
    other.unlink()
    checked = {r.run_dir: r for r in verify(dest)}
    assert not checked[other.parent].verdict and checked[other.parent].agrees
    assert [d for d, r in checked.items() if not r.agrees] == [res.parent]
    # and a history that is gone leaves a published verdict unproven: a difference
    kept = next(d for d, r in checked.items() if r.verdict and d != res.parent)
    (kept / "history.jsonl.xz").unlink()
    assert not recheck(kept).agrees and recheck(kept).note == "no history to re-check"


def test_detection_bound() -> None:
    assert round(detection_bound(20), 3) == 0.139  # 0 of 20 runs: < 14%
    assert round(detection_bound(5), 3) == 0.451
    assert detection_bound(1) == pytest.approx(0.95)


def test_fence_regressions_are_counted_apart_from_saves() -> None:
    fe = {"valid": False, "resource_valid": True, "saves": 223, "saves_stale_holder": 0,
          "saves_regressed_fence": 223, "accepted": 10}
    run = Run("redis", "fenced", "kill", "unknown", trial="lock+resource")
    apply_results(run, {"valid": False, "summary": "x", "checkers": {
        "fencing": fe, "mutual-exclusion": {"valid": False, "violation_count": 2}}})
    assert (run.saves, run.regressions, run.lock_failed, run.status) == (0, 223, True,
                                                                         "unsafe")
    lines = CellView([run]).lines()
    assert "0 saves, 223 fence regressions" in lines
    assert "the lock alone failed in 1" in lines


def test_no_fence_says_the_resource_cannot_refuse() -> None:
    fe = {"valid": "unknown", "resource_valid": True, "saves": 0, "accepted": 0,
          "unfenced_rejections": 40}
    run = Run("redlock", "fenced", "none", "unknown", trial="lock+resource")
    apply_results(run, {"valid": True, "summary": "x", "checkers": {"fencing": fe}})
    assert run.no_fence and "no fence: the resource cannot refuse" in CellView([run]).lines()


def test_not_a_results_folder(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such results folder"):
        compare(tmp_path / "nope", tmp_path)
    with pytest.raises(BadInput, match="no runs in it"):
        compare(tmp_path, tmp_path)


def test_a_run_the_matrix_interrupted_is_left_out(tmp_path: Path) -> None:
    """Stopping a matrix mid-run is no verdict on the lock: that run is not counted."""
    root = tmp_path / "results"
    kept = make_run(root / "quietlock" / "mutex" / "none" / "t1", ops=300, backend="quietlock",
                    workload="mutex", nemesis=(), interval_ms=10**6)
    stopped = make_run(root / "quietlock" / "mutex" / "none" / "t2", ops=300,
                       backend="quietlock", workload="mutex", nemesis=(), interval_ms=10**6)
    assert len(load([root]).runs) == 2
    record = new_run_dir(root, "test-all")
    m = Matrix(root, record, [Cell("quietlock", "mutex", "none", 2)], time_limit=5, count=2,
               pass_through=[])
    m.results = [CellResult("quietlock", "mutex", "none", 2, "interrupted",
                            run_dir=str(stopped.relative_to(root)))]
    m.save(130)
    assert [r.dir for r in load([root]).runs] == [kept]
