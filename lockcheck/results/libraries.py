"""The lock libraries page (`lockcheck libraries --out docs/libraries.md`).

`publish_pairs` copies each library/backend folder of `lockcheck libraries`'s results
next to the page (OUT without its suffix: docs/libraries/<pair>/) the way
`compare --publish` does (histories and logs compressed, the machine's paths replaced,
a report or a short page per run), so every cell links to a run that `lockcheck check`
re-checks from its history. `render_page` writes the page from the published records
alone: the page and its folder always agree.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from lockcheck.errors import BadInput
from lockcheck.libraries import (
    BATTERY,
    CLIENT_CHECK_LOG,
    FAULT_TITLES,
    RECORD,
    FaultCell,
    PairRecord,
    available,
    pair_dirs,
    read_record,
    write_record,
)
from lockcheck.results import publish as publishing
from lockcheck.results import store
from lockcheck.results.matrix import MATRIX

COMMAND = "lockcheck libraries"
MARK = {"ok": "ok", "note": "note", "FAIL": "**FAIL**"}


def pages_dir(out: Path) -> Path:
    """Where the runs a page links go: docs/libraries.md -> docs/libraries/."""
    return out.with_suffix("")


def run_page(pair_dir: Path, run_dir: str | None) -> str | None:
    """The page of a published run, relative to its pair's folder."""
    if run_dir is None:
        return None
    for name in (publishing.REPORT, publishing.RUN_PAGE):
        if (pair_dir / run_dir / name).is_file():
            return Path(run_dir, name).as_posix()
    return None


def publish_pairs(sources: Sequence[Path], dest: Path,
                  say: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Each pair folder into dest/<pair>/, made fit to publish; its record gets the
    page of each run. Returns the published folders."""
    published = []
    for src in sources:
        [out] = publishing.publish([src], dest, say)
        scrub = publishing.scrubber([src.resolve(), src.resolve().parent, out])
        # the matrix records and client-check's output name the results folder itself
        for p in [out / CLIENT_CHECK_LOG, *sorted((out / "test-all").rglob("*"))]:
            if p.is_file() and not p.is_symlink() and p.suffix in publishing.TEXT_SUFFIXES:
                if p.name == MATRIX:
                    _drop_paths_of_argv(p)
                text = p.read_text(errors="replace")
                if scrub(text) != text:
                    p.write_text(scrub(text), encoding="utf-8")
        record = read_record(out)
        for cell in record.cells:
            for run in cell.runs:
                run.summary = scrub(run.summary)
                run.page = run_page(out, run.run_dir)
        write_record(out, record)
        published.append(out)
    return published


def _drop_paths_of_argv(matrix: Path) -> None:
    """A matrix record keeps the command that made it, whose paths (the page, the
    results folder) are this machine's: each becomes `<path>`."""
    data = json.loads(matrix.read_text())
    argv = data.get("argv")
    if isinstance(argv, list):
        data["argv"] = ["<path>" if isinstance(a, str) and os.path.isabs(a) else a
                        for a in argv]
        store.write_json(matrix, data)


def published_records(dest: Path) -> list[PairRecord]:
    """The records next to a page, in the adapters' order (then by name)."""
    from lockcheck.clients import CLIENTS

    order = {n: i for i, n in enumerate(CLIENTS)}

    def key(r: PairRecord) -> tuple[int, str, int, str]:
        a = CLIENTS.get(r.client)
        backends = list(a.backends) if a is not None else []
        return (order.get(r.client, len(order)), r.client,
                backends.index(r.backend) if r.backend in backends else len(backends),
                r.backend)

    return sorted((read_record(d) for d in pair_dirs(dest)), key=key)


# -- the page ------------------------------------------------------------------------------


def _md(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def link(pages: str, record: PairRecord, page: str | None) -> str | None:
    """A run's page as the page links it: relative, with forward slashes."""
    if page is None:
        return None
    return f"{pages}/{record.name}/{page}"


def cell_text(cell: FaultCell | None, record: PairRecord, pages: str) -> str:
    """A table cell: `**k of n**` unsafe runs and a link to each run; refused with its
    reason; not yet available; not run."""
    if cell is None:
        return "not run"
    if cell.state == "refused":
        return f"refused: {_md(cell.reason)}"
    if cell.state == "unavailable":
        return "not yet available"
    if cell.state != "ran" or not cell.runs:
        return "not run"
    decided = [r for r in cell.runs if r.status in ("safe", "unsafe")]
    k = sum(1 for r in decided if r.status == "unsafe")
    head = f"**{k} of {len(decided)}** unsafe" if k else f"0 of {len(decided)} unsafe"
    parts = [head]
    undecided = [r for r in cell.runs if r not in decided]
    if undecided:
        kinds = sorted({r.status for r in undecided})
        parts.append(f"({len(undecided)} {'/'.join(kinds)})")
    links = []
    for i, r in enumerate(cell.runs, 1):
        href = link(pages, record, r.page)
        if href is not None:
            links.append(f"[{r.status if len(cell.runs) == 1 else i}]({href})")
    if links:
        parts.append(" ".join(links))
    return " ".join(parts)


def check_text(record: PairRecord) -> str:
    """client-check in a cell: passed or failed, with its steps counted by mark."""
    cc = record.client_check
    counts = [(m, sum(1 for s in cc.steps if s.mark == m)) for m in ("FAIL", "ok", "note")]
    marks = ", ".join(f"{n} {m}" for m, n in counts if n)
    if cc.status == "failed":
        return f"**failed**: {marks}"
    return f"{cc.status}: {marks}" if marks else cc.status


def headline(records: Sequence[PairRecord], faults: Sequence[str]) -> list[str]:
    """Which pairs had no unsafe run (and under which faults), which had."""
    held, broke = [], []
    for r in records:
        ran = [c for c in r.cells if c.state == "ran" and c.fault in faults and
               any(x.status in ("safe", "unsafe") for x in c.runs)]
        bad = [c for c in ran if any(x.status == "unsafe" for x in c.runs)]
        label = f"{r.client} on {r.backend}"
        if bad:
            broke.append(f"{label}: {', '.join(FAULT_TITLES.get(c.fault, c.fault) for c in bad)}")
        elif ran:
            held.append(label)
    lines = []
    if held:
        lines.append("- **No unsafe run** under any fault of its row: " + "; ".join(held) + ".")
    if broke:
        lines.append("- **Unsafe in at least one run**, under: " + "; ".join(broke) + ".")
    return lines


def fault_legend(faults: Sequence[str]) -> list[str]:
    """One line per column: the fault as the nemesis registry describes it, with the
    defaults of `lockcheck test`."""
    from lockcheck.nemesis.registry import NEMESES

    lines = []
    for f in faults:
        kind = NEMESES.get(f)
        what = "the lock under contention alone" if f == "none" else \
            _md(kind.description) if kind is not None else "not in this lockcheck yet"
        lines.append(f"- *{FAULT_TITLES.get(f, f)}* (`{f}`): {what}")
    return lines


def _load(records: Sequence[PairRecord]) -> str:
    loads = [x for r in records for x in r.load]
    return f"{min(loads):g} to {max(loads):g}" if loads else "not recorded"


def render_page(records: Sequence[PairRecord], pages: str,
                own: Sequence[tuple[str, str, str]] = (), comparison: str | None = None) -> str:
    """The page, in Markdown. `pages`: the runs' folder relative to the page; `own`:
    (backend, library, version) of lockcheck's own clients, listed for reference."""
    faults = [f for f in BATTERY if any(r.cell(f) is not None for r in records)] or \
        list(BATTERY)
    runs = sorted({r.runs for r in records})
    limits = sorted({r.time_limit for r in records})
    started = min((r.started for r in records if r.started), default="")
    finished = max((r.finished for r in records if r.finished), default="")
    n = "/".join(str(x) for x in runs) or "?"
    out = [
        "# Lock libraries, side by side",
        "",
        f"<!-- made by `{COMMAND}`; edits by hand are lost the next time it runs -->",
        "",
        "Every lock library lockcheck has an adapter for, on the servers of each backend "
        "it supports: its version, what `lockcheck client-check` found step by step, and "
        "a short battery of runs of `lockcheck test --client NAME` (the `mutex` workload), "
        "one column per fault.",
        "",
        "**How to read it.** A cell says in how many of its n runs the checkers found "
        "the lock unsafe (two holders at once, or a grant while another lease was "
        "valid). A library that holds is \"0 of n runs unsafe, with these faults\": a "
        f"small n (here n = {n}) finds common failures, not rare ones, and says "
        "nothing about faults not in its column. *Refused* cells are faults the backend "
        "cannot take, never run. Each cell links to its runs; every run's history is "
        "published next to this page, so `lockcheck check <run folder>` re-checks its "
        "verdict.",
        "",
        f"Made by `{COMMAND} --runs {n} --time-limit "
        f"{'/'.join(f'{x:g}' for x in limits) or '?'} --out docs/libraries.md` "
        f"between {started or '?'} and {finished or '?'} ({len(records)} library/backend "
        f"pairs, {n} run(s) per cell of {'/'.join(f'{x:g}' for x in limits) or '?'} s; "
        f"the machine's 1-minute load average was {_load(records)} during the runs).",
        "",
    ]
    if "reply-loss" in BATTERY and not available("reply-loss"):
        out += ["The reply-loss column is not yet available: this lockcheck has no "
                "`reply-loss` fault.", ""]
    out += [*headline(records, faults), "", "## Side by side", "",
            *fault_legend(faults), ""]
    titles = [FAULT_TITLES.get(f, f) for f in faults]
    out.append("| library | version | backend | client-check | " + " | ".join(titles) + " |")
    out.append("|---|---|---|---|" + "---|" * len(faults))
    for r in records:
        cells = [cell_text(r.cell(f), r, pages) for f in faults]
        out.append(f"| [{r.client}](#{r.name}) | {r.version} | {r.backend} | "
                   f"{check_text(r)} | " + " | ".join(cells) + " |")
    out += ["", "## Per library", ""]
    for r in records:
        cc = r.client_check
        out += [f'<a id="{r.name}"></a>', "",
                f"### {r.client} {r.version} on {r.backend}", "",
                f"PyPI `{r.library}` {r.version}. {_md(r.description)}.", "",
                f"Expected: {_md(r.expect)}.", "",
                f"`lockcheck client-check {r.client} --backend {r.backend}`: **{cc.status}**"
                + (f" ({_md(cc.summary)})" if cc.summary else "")
                + (f", [its output]({pages}/{r.name}/{cc.log})" if cc.log else "") + ".", ""]
        if cc.steps:
            out += ["| | step | what the client did |", "|---|---|---|"]
            out += [f"| {MARK.get(s.mark, s.mark)} | {_md(s.step)} | {_md(s.detail)} |"
                    for s in cc.steps]
            out.append("")
    if own:
        out += ["## The libraries under lockcheck's own backends", "",
                "lockcheck's own backends run lockcheck's own lock clients (their renewal, "
                "loss detection and fencing are lockcheck's code) on these libraries; "
                "their runs, under the same faults, are the "
                + (f"[published comparison]({comparison})" if comparison else
                   "published comparison (`lockcheck test-all`, `lockcheck compare`)")
                + ", not this page.", "",
                "| backend | library | version |", "|---|---|---|"]
        out += [f"| {b} | {lib} | {v} |" for b, lib, v in own]
        out.append("")
    return "\n".join(out)


def own_libraries() -> list[tuple[str, str, str]]:
    """(backend, library, version) of each default backend of the published comparison."""
    from lockcheck.backends import BACKENDS
    from lockcheck.libraries import library_version
    from lockcheck.results.matrix import PUBLISHED_BACKENDS

    return [(b, BACKENDS[b].library, library_version(BACKENDS[b].library))
            for b in PUBLISHED_BACKENDS if b in BACKENDS]


def write_page(out: Path, sources: Sequence[Path] = (),
               say: Callable[[str], None] = lambda line: None) -> Path:
    """Publish the pair folders under each source next to `out`, then write `out` from
    everything published there."""
    found = [pair_dirs(root.resolve()) for root in sources]
    for root, dirs in zip(sources, found, strict=True):
        if not dirs:
            raise BadInput(f"{root}: no results of `{COMMAND}` here (a folder per library "
                           f"and backend, each with its {RECORD})")
    dest = pages_dir(out.resolve())
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create {dest}: {e.strerror or e}") from None
    for dirs in found:
        publish_pairs(dirs, dest, say)
    records = published_records(dest)
    pages = Path(os.path.relpath(dest, out.resolve().parent)).as_posix()
    readme = publishing.checkout() / "docs" / "report" / "README.md"
    # linked only from the checkout's docs, where the link resolves in the repository
    comparison = Path(os.path.relpath(readme, out.resolve().parent)).as_posix() \
        if readme.is_file() and out.resolve().parent == readme.parent.parent else None
    out.write_text(render_page(records, pages, own_libraries(), comparison),
                   encoding="utf-8")
    return out


__all__ = ["RECORD", "cell_text", "link", "pages_dir", "publish_pairs", "render_page",
           "write_page"]
