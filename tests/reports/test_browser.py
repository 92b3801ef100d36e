"""The pages in a real browser: headless Chromium loads report.html and index.html from
the file, the scripts run, and the page says what it drew; a screenshot is taken."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lockcheck.checker.intervals import critical_sections
from lockcheck.history import read_history
from lockcheck.results.compare import compare
from lockcheck.results.html import page
from lockcheck.results.report import write_report
from tests.reports.browser import Rendered, chromium, render

pytestmark = pytest.mark.skipif(
    chromium() is None, reason="chromium is not installed (scripts/install --dev installs it)")

PNG = b"\x89PNG\r\n\x1a\n"


def root_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<html([^>]*)>", dom)
    assert m, dom[:300]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))


def assert_clean(r: Rendered) -> None:
    attrs = root_attrs(r.dom)
    assert "data-js-errors" not in attrs, re.search(r'id="lc-errors">([^<]*)', r.dom)
    assert not r.console_errors(), r.console_errors()
    assert attrs.get("data-images") == attrs.get("data-images-loaded")


def test_report_draws_its_timeline_and_plots(fenced_run: Path, tmp_path: Path) -> None:
    report = write_report(fenced_run)
    shot = tmp_path / "report.png"
    r = render(report, screenshot=shot, size=(1300, 2200))
    assert_clean(r)
    attrs = root_attrs(r.dom)
    n_sections = len(critical_sections(read_history(fenced_run / "history.jsonl")))
    assert attrs["data-timeline-ready"] == "1"
    assert int(attrs["data-timeline-bars"]) == n_sections
    assert 0 < int(attrs["data-timeline-drawn"]) <= n_sections
    assert attrs["data-images"] == "5"
    assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 50_000


def test_report_opens_at_a_violation(fenced_run: Path) -> None:
    r = render(write_report(fenced_run), fragment="v=1")
    assert_clean(r)
    attrs = root_attrs(r.dom)
    # zoomed in on violation 1: only the holders around it are drawn
    assert int(attrs["data-timeline-drawn"]) < int(attrs["data-timeline-bars"])


def test_index_shows_the_matrix(fenced_run: Path, unfenced_run: Path, mutex_run: Path,
                                tmp_path: Path) -> None:
    # the three session runs live in separate folders; compare a folder holding all three
    root = tmp_path / "results"
    for run in (fenced_run, unfenced_run, mutex_run):
        shutil.copytree(run, root / run.parent.name / run.name)
    index, _ = compare(root, root)
    shot = root / "index.png"
    r = render(index, screenshot=shot, size=(1300, 1000))
    assert_clean(r)
    cells = re.findall(r'<td class="cell (\w+)" data-status="(\w+)"', r.dom)
    # the fenced run's lock failed too (the resource held): every cell is unsafe
    assert sorted(s for _, s in cells) == ["unsafe", "unsafe", "unsafe"]
    assert shot.read_bytes().startswith(PNG)


def test_a_broken_page_is_caught(tmp_path: Path) -> None:
    """The checks above can fail: a script error shows in the DOM and the console."""
    bad = tmp_path / "bad.html"
    bad.write_text(page("broken", "<p>x</p><script>undefinedFunction();</script>"))
    r = render(bad)
    assert root_attrs(r.dom).get("data-js-errors") == "1"
    assert "undefinedFunction" in r.dom
    assert any("undefinedFunction" in m for m in r.console_errors())
