"""`lockcheck compare --publish`: turn results folders into a folder fit to publish (a
git repository, GitHub Pages): every run stays re-checkable, nothing names the
machine that made it, and the whole stays small.

Each results folder is copied to OUT/<its name> (a shard keeps its own tree, so two
shards never collide). In every run:

- the history, the resource log and the logs are compressed with xz (`lockcheck check`
  and `compare --verify` read `history.jsonl.xz` as they read `history.jsonl`);
- the paths of the machine (the results folder, the checkout, the home folder, the
  servers' temporary work folders) are replaced by placeholders in every text file;
- one run per cell (the first unsafe one, else the first) gets a full report.html
  without the plots (the bulk of a report; `lockcheck check` draws them again), and
  every other run a short run.html: verdict, seed, the command to run it again, its
  files. Linearizability visualizations are kept for the reported run only
  (`lockcheck check --html` makes them from the history).
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from lockcheck.errors import BadInput
from lockcheck.results import store
from lockcheck.results.cells import Run, read_run
from lockcheck.results.html import badge, esc
from lockcheck.results.progress import verdict_word

PACKED = (store.HISTORY, store.RESOURCE)  # compressed besides every *.log
TEXT_SUFFIXES = (".json", ".jsonl", ".log", ".cfg", ".conf", ".txt", ".html", ".md")
WORK_PATH = re.compile(r"/tmp/lockcheck-[A-Za-z0-9_.-]+")
RUN_PAGE = "run.html"
REPORT = "report.html"
RUN_PAGE_STYLE = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:1rem auto;"
                  "padding:0 1rem;color:#1d2230}.muted{color:#667}.small{font-size:.9em}"
                  ".badge{padding:.1rem .5rem;border-radius:.3rem;font-weight:bold}"
                  ".valid{background:#e3f4ea;color:#17663a}.invalid{background:#fbe3e3;"
                  "color:#a11}.unknown{background:#fff4d6;color:#7a5a00}"
                  "code{background:#f3f3f6;padding:0 .2rem}")


def checkout() -> Path:
    """The folder this lockcheck was installed from (its paths must not leak)."""
    return Path(__file__).resolve().parents[2]


def scrubber(sources: Sequence[Path]) -> Callable[[str], str]:
    """Replaces the machine's paths in a text by placeholders, longest first."""
    pairs = [(str(s), "<results>") for s in sources]
    pairs.append((str(checkout()), "<checkout>"))
    home = str(Path.home())
    if home not in ("/", ""):
        pairs.append((home, "~"))
    pairs.sort(key=lambda p: -len(p[0]))

    def scrub(text: str) -> str:
        for old, new in pairs:
            text = text.replace(old, new)
        return WORK_PATH.sub("<work>", text)

    return scrub


def _scrub_file(p: Path, scrub: Callable[[str], str]) -> None:
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    new = scrub(text)
    if new != text:
        p.write_text(new, encoding="utf-8")


def _pack(p: Path) -> Path:
    """p -> p.xz (and p removed)."""
    out = p.with_name(p.name + ".xz")
    with p.open("rb") as src, lzma.open(out, "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst)
    p.unlink()
    return out


def _files(run_dir: Path) -> Iterable[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())


def _representatives(runs: Sequence[Run]) -> set[Path]:
    """Per cell, the run that gets a full report: the first unsafe, else the first."""
    cells: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        if r.dir is not None:
            cells.setdefault((r.workload, r.backend, r.nemesis), []).append(r)
    chosen = set()
    for rs in cells.values():
        rs = sorted(rs, key=lambda r: (r.started, str(r.dir)))
        pick = next((r for r in rs if r.status == "unsafe"), rs[0])
        assert pick.dir is not None
        chosen.add(pick.dir)
    return chosen


def _again(args: Sequence[Any]) -> list[str]:
    """The run's command to type again: without where its results went or whether it
    wrote a report (the defaults do)."""
    out: list[str] = []
    skip = False
    for a in map(str, args):
        if skip:
            skip = False
        elif a == "--results-dir":
            skip = True
        elif a != "--no-report":
            out.append(a)
    return out


def run_page_html(run_dir: Path, test: dict[str, Any], results: dict[str, Any] | None,
                  report: str | None) -> str:
    valid = (results or {}).get("valid")
    argv = test.get("argv")
    cmd = ("lockcheck " + " ".join(_again(argv[1:]))) if isinstance(argv, list) and argv \
        else ""
    files = "".join(f'<li><a href="{esc(p.relative_to(run_dir).as_posix())}">'
                    f"{esc(p.relative_to(run_dir).as_posix())}</a></li>"
                    for p in _files(run_dir) if p.name != RUN_PAGE)
    nem = test.get("nemesis")
    nem = "+".join(nem) if isinstance(nem, list) and nem else "none"
    full = (f'<p>The full report of this cell is that of <a href="{esc(report)}">another '
            "of its runs</a>.</p>") if report else ""
    body = (f'<header class="top"><h1>{esc(test.get("name") or run_dir.name)}</h1>'
            f"{badge(valid, verdict_word(valid))}</header>"
            f'<p class="muted small">backend <b>{esc(test.get("backend", "?"))}</b> · workload '
            f'<b>{esc(test.get("workload", "?"))}</b> · nemesis <b>{esc(nem)}</b> · '
            f'{esc(test.get("time_limit", "?"))} s · started {esc(test.get("started", "?"))} · '
            f'seed {esc(test.get("seed", "?"))}</p>'
            f'<p class="summary">{esc((results or {}).get("summary", "no results"))}</p>'
            f"<p>Run it again: <code>{esc(cmd)}</code><br>Check it again from its history: "
            f"<code>lockcheck check {esc(run_dir.name)}</code> (writes the full report with "
            f"its plots)</p>{full}<h2>Files</h2><ul>{files}</ul>")
    # a few lines of style, not the reports' stylesheet: hundreds of these are published
    title = esc(f"lockcheck: {test.get('name', run_dir.name)} ({verdict_word(valid)})")
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{RUN_PAGE_STYLE}</style></head><body>"
            f"<main>{body}</main></body></html>\n")


def _publish_run(run_dir: Path, roots: list[Path], full: bool,
                 report_of_cell: Path | None) -> None:
    scrub = scrubber(roots)
    for name in (REPORT, RUN_PAGE):
        (run_dir / name).unlink(missing_ok=True)
    if not full:
        shutil.rmtree(run_dir / "linearizable", ignore_errors=True)
    for p in _files(run_dir):
        if p.suffix in TEXT_SUFFIXES or p.name in PACKED:
            _scrub_file(p, scrub)
    test = json.loads((run_dir / store.TEST).read_text())
    results: dict[str, Any] | None
    try:
        results = json.loads((run_dir / store.RESULTS).read_text())
    except (OSError, ValueError):
        results = None
    for p in _files(run_dir):
        if p.name in PACKED or p.suffix == ".log":
            _pack(p)
    if full and store.is_run_dir(run_dir):
        from lockcheck.results.report import write_report

        _scrub_file(write_report(run_dir, results=results, with_plots=False), scrub)
        return
    rel = None if report_of_cell is None else \
        Path(os.path.relpath(report_of_cell / REPORT, run_dir)).as_posix()
    (run_dir / RUN_PAGE).write_text(run_page_html(run_dir, test, results, rel),
                                    encoding="utf-8")
    _scrub_file(run_dir / RUN_PAGE, scrub)


def publish(sources: Sequence[Path], out: Path,
            say: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Copy each results folder into out/<name> and make it publishable (see the module
    doc); returns the published folders, which `compare` then reads."""
    srcs = [s.resolve() for s in sources]
    names = [s.name for s in srcs]
    if len(set(names)) != len(names):
        raise BadInput("--publish: the results folders need different names "
                       f"({', '.join(names)})")
    out = out.resolve()
    dests = []
    for src in srcs:
        if not src.is_dir():
            raise BadInput(f"{src}: no such results folder")
        dest = out / src.name
        if dest == src:
            raise BadInput(f"--publish: {src} is already inside {out}")
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest, symlinks=True)
        dests.append(dest)
    scrub = scrubber(srcs + dests)
    runs: list[Run] = []
    for dest in dests:
        for d in store.run_dirs(dest):
            try:
                runs.append(read_run(d, dest.name))
            except (OSError, ValueError):
                continue
    reps = _representatives(runs)
    rep_of: dict[tuple[str, str, str], Path] = {}
    for r in runs:
        if r.dir in reps:
            rep_of[(r.workload, r.backend, r.nemesis)] = r.dir
    jobs = [(r.dir, r.dir in reps, rep_of.get((r.workload, r.backend, r.nemesis)))
            for r in runs if r.dir is not None]
    # a few processes: each run is independent, and most of the time is compression
    with ProcessPoolExecutor(max_workers=min(4, os.cpu_count() or 1) or 1) as pool:
        futures = {pool.submit(_publish_run, d, srcs + dests, full, rep): (d, full)
                   for d, full, rep in jobs}
        for i, f in enumerate(as_completed(futures), 1):
            f.result()
            d, full = futures[f]
            say(f"[{i}/{len(jobs)}] {d.relative_to(out)}" + (" (report)" if full else ""))
    for dest in dests:  # the matrix records: their command logs and matrix.json
        for p in dest.rglob("*"):
            if p.is_file() and not p.is_symlink() and "test-all" in p.parts and \
                    p.suffix in TEXT_SUFFIXES:
                _scrub_file(p, scrub)
    return dests
