"""The published comparison (docs/report/) as a reader gets it: every link of every page
leads somewhere, no file names a path of the machine that made it, and the folder
stays small enough for git. The checks are functions of a folder, so the same test
also runs them on a folder that breaks each rule."""

from __future__ import annotations

import gzip
import json
import lzma
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from lockcheck.checker.verdict import LOCK_CHECKERS
from lockcheck.results.cells import CellView
from lockcheck.results.compare import cell_text
from lockcheck.results.store import load_results

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "docs" / "report"
HREF = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
MACHINE = ("/tmp/lockcheck-", "/tmp/pytest-of-")
MAX_BYTES = 20 * 1024 * 1024


def published() -> Path:
    if not (REPORT / "index.html").is_file():
        pytest.skip("docs/report/index.html is not there: nothing published in this checkout")
    return REPORT


def pages(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.suffix in (".html", ".md") and p.is_file():
            yield p


def broken_links(root: Path) -> list[str]:
    """`page: target` for each relative link whose target is missing."""
    out = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8", errors="replace")
        links = HREF.findall(text) + (MD_LINK.findall(text) if page.suffix == ".md" else [])
        for link in links:
            u = urlsplit(link)
            if u.scheme or u.netloc or not u.path:  # external, mailto:, data:, #anchor
                continue
            target = (page.parent / unquote(u.path)).resolve()
            if not target.exists():
                out.append(f"{page.relative_to(root)}: {link}")
    return out


def text_of(p: Path) -> str:
    if p.suffix == ".xz":
        return lzma.decompress(p.read_bytes()).decode("utf-8", errors="replace")
    if p.suffix == ".gz":
        return gzip.decompress(p.read_bytes()).decode("utf-8", errors="replace")
    return p.read_bytes().decode("utf-8", errors="replace")


def machine_paths(root: Path, checkout: Path = REPO) -> list[str]:
    """`file: what` for each file that names a path of a machine: this checkout, the
    home folder, a run's temporary work folder; and for each recorded command or
    results folder (test.json, matrix.json) given as an absolute path."""
    home = str(Path.home())
    needles = [str(checkout), *MACHINE] + ([home + "/"] if home not in ("/", "") else [])
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        text = text_of(p)
        out += [f"{p.relative_to(root)}: {n}" for n in needles if n in text]
        if p.name in ("test.json", "matrix.json"):
            data = json.loads(text)
            recorded = [*(data.get("argv") or []), data.get("results_dir") or ""]
            recorded += [a for c in data.get("cells") or [] for a in c.get("command") or []]
            out += [f"{p.relative_to(root)}: {a}" for a in recorded
                    if isinstance(a, str) and a.startswith("/")]
    return out


def size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_every_link_of_every_published_page_leads_somewhere() -> None:
    root = published()
    assert len(list(pages(root))) > 2
    assert broken_links(root) == []


def test_no_published_file_names_a_path_of_the_machine() -> None:
    assert machine_paths(published()) == []


def test_the_published_folder_stays_under_20_mb() -> None:
    assert size(published()) < MAX_BYTES


def test_every_published_run_keeps_its_history() -> None:
    from lockcheck.results import store

    runs = list(store.run_dirs(published()))
    assert runs
    missing = [str(d.relative_to(REPORT)) for d in runs if not store.is_run_dir(d)]
    assert missing == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """A broken link, a checkout path in a compressed log and an absolute results
    folder in test.json are each found."""
    run = tmp_path / "r" / "redis" / "mutex" / "none" / "t1"
    run.mkdir(parents=True)
    (tmp_path / "index.html").write_text('<a href="r/redis/mutex/none/t1/report.html">1</a>'
                                         '<a href="https://example.org/">x</a><a href="#top">'
                                         "</a>")
    assert broken_links(tmp_path) == ["index.html: r/redis/mutex/none/t1/report.html"]
    (run / "report.html").write_text("<p>ok</p>")
    assert broken_links(tmp_path) == []
    checkout = Path("/srv/checkouts/lockcheck")
    (run / "lockcheck.log.xz").write_bytes(lzma.compress(f"{checkout}/x.py".encode()))
    (run / "test.json").write_text(json.dumps({"results_dir": "/data/results", "argv": []}))
    found = machine_paths(tmp_path, checkout)
    assert found == [f"r/redis/mutex/none/t1/lockcheck.log.xz: {checkout}",
                     "r/redis/mutex/none/t1/test.json: /data/results"]


def published_cells() -> list[tuple[str, str, str, CellView]]:
    from lockcheck.results.compare import load

    root = published()
    shards = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    return list(load(shards).cells())


def test_a_cell_is_unsafe_exactly_when_a_run_broke_the_lock_or_the_resource() -> None:
    """Every cell with a run whose lock checker (mutual exclusion, lease safety,
    linearizable) failed, or whose resource accepted a stale write, is unsafe; no safe
    cell has such a run."""
    cells = published_cells()
    assert cells
    for w, b, n, cell in cells:
        broken = []
        for r in cell.runs:
            res = load_results(r.dir) if r.dir is not None else None
            checkers = (res or {}).get("checkers") or {}
            if any((checkers.get(c) or {}).get("valid") is False for c in LOCK_CHECKERS) or \
                    (checkers.get("fencing") or {}).get("resource_valid") is False:
                broken.append(r)
        assert (cell.status == "unsafe") == bool(broken), (w, b, n, cell.status)
        assert len(cell.unsafe) >= len(broken)


def test_saves_and_fence_regressions_are_published_apart() -> None:
    seen_regressions = False
    for _w, _b, n, cell in published_cells():
        stale = regressed = 0
        for r in cell.runs:
            res = load_results(r.dir) if r.dir is not None else None
            fe = ((res or {}).get("checkers") or {}).get("fencing") or {}
            stale += fe.get("saves_stale_holder", 0)
            regressed += fe.get("saves_regressed_fence", 0)
        assert (cell.saves, cell.regressions) == (stale, regressed)
        text = " ".join(cell_text(cell, n))
        if regressed:
            seen_regressions = True
            assert f"{regressed:,} fence regression" in text and f"{stale:,} save" in text
    assert seen_regressions  # redis under kill restarts its fence counter
