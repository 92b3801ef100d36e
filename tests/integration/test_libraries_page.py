"""`lockcheck libraries` with real servers: one library, two faults, one short run each;
the page's cells must say what the linked runs say."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunTrace

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]


def row_cells(text: str, library: str) -> dict[str, str]:
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("| library |"))
    row = next(ln for ln in lines if ln.startswith(f"| [{library}]"))
    names = [c.strip() for c in header.strip("|").split(" | ")]
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    return dict(zip(names, cells, strict=True))


def test_a_library_page_made_by_its_command(cli: Any, tmp_path: Path,
                                            assert_no_leftovers: Any) -> None:
    out = tmp_path / "docs" / "libraries.md"
    r = cli("libraries", "--libraries", "python-redis-lock", "--faults", "none,client-pause",
            "--runs", "1", "--time-limit", "6", "--results-dir", tmp_path / "runs",
            "--out", out, timeout=400)
    assert r.code in (0, 1), r.stderr
    text = out.read_text()
    cells = row_cells(text, "python-redis-lock")
    assert cells["backend"] == "redis"
    assert cells["client-check"].startswith("passed: ")
    assert cells["no fault"].startswith("0 of 1 unsafe"), cells
    assert "python-redis-lock-auto-renewal" not in text  # only the adapter named
    for title, fault in (("no fault", "none"), ("client pause", "client-pause")):
        # the cell's count is what its run's own results say (whichever way it went)
        m = re.match(r"(?:\*\*)?(\d+) of (\d+)(?:\*\*)? unsafe", cells[title])
        assert m is not None, cells[title]
        [href] = re.findall(r"\]\(([^)]+)\)", cells[title])
        page = out.parent / href
        assert page.is_file(), href
        test = json.loads((page.parent / "test.json").read_text())
        results = json.loads((page.parent / "results.json").read_text())
        assert test["nemesis"] == ([] if fault == "none" else [fault])
        assert test["client"]["name"] == "python-redis-lock"
        assert (m.group(1), m.group(2)) == ("1" if results["valid"] is False else "0", "1")
        assert (page.parent / "history.jsonl.xz").is_file()
    assert str(tmp_path) not in text
    assert "| ok | acquire a free lock |" in text
    # the runs sit deeper than the watcher looks: each run's id, from its test.json
    for t in (out.parent / "libraries").rglob("test.json"):
        cli.traces.setdefault(json.loads(t.read_text())["run_id"],
                              RunTrace(json.loads(t.read_text())["run_id"]))
    assert_no_leftovers(None)
