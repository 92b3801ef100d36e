"""`lockcheck compare`: the matrix of many runs, as `index.html` and `report.md`.

Rows are backends (and their variants), columns nemeses, one table per workload.
Each cell adds up its runs (results/cells.py): how many of them were unsafe, when the
first violation came, what kinds were found, and for a clean cell what was tried and
how much n clean runs can rule out; then the metrics (availability under the fault,
acquire latency, hold time p99, renewal failures, expiries while working) and links
to each run. Several results folders (the shards of one matrix, run on several
machines) merge into one page; a warning says where their versions differ. It reads
only run folders (test.json, results.json) and the matrix files `test-all` wrote,
which name the runs that crashed before leaving a folder.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockcheck.errors import BadInput
from lockcheck.results import store
from lockcheck.results.cells import (
    CellView,
    Run,
    keep_server_versions_apart,
    nemesis_label,
    order,
    read_run,
)
from lockcheck.results.html import esc, page
from lockcheck.results.matrix import MATRIX, MATRIX_DIR
from lockcheck.workloads.registry import on_trial

INDEX, MARKDOWN = "index.html", "report.md"
RUN_PAGE = "run.html"  # a published run's own page, where it has no full report
BACKEND_ORDER = ("redis", "redlock", "redlock-fenced", "zookeeper", "etcd", "postgres",
                 "redis-sentinel", "consul", "dynamodb", "azure-blob", "gcs")
NEMESIS_ORDER = ("none", "partition", "kill", "pause", "client-pause")
WORKLOAD_ORDER = ("mutex", "fenced", "fenced (unfenced resource)")
LEGEND_ORDER = ("unsafe", "safe", "unknown", "error", "refused")
ICON = {"safe": "✅", "unsafe": "❌", "unknown": "❓", "error": "⚠️", "refused": "⛔"}
# in HTML: glyphs every font has (a headless browser or a bare desktop has no emoji font)
GLYPH = {"safe": "✓", "unsafe": "✗", "unknown": "?", "error": "!", "refused": "&ndash;"}
HOW_TO_READ = [
    "✗ unsafe: k of n runs found a violation of the lock (mutual exclusion, lease safety, "
    "linearizability) or of the resource; one unsafe run is enough. The cell gives the "
    "median and range of the time to the first violation and the kinds found (total, and "
    "in how many runs); in the fenced workload, whether the lock alone failed (the "
    "resource held) or the lock and the resource.",
    "✓ safe: 0 of n runs found one. That is a count, not a proof: the cell says what was "
    "tried (ops, fault windows, seconds under fault) and the 95% upper bound on the chance "
    "that one run catches the bug, which n clean runs leave (1 - 0.05^(1/n): 5 runs leave "
    "< 45%, 20 runs < 14%).",
    "? unknown and ! error: no run could decide, or the runs crashed; the reason is in "
    "the cell.",
    "A save is a write the fence refused from a holder that had lost the lock; a fence "
    "regression is a write of a current holder refused because the fence went backwards "
    "(the service's counter restarted lower): lost work, not a save. \"No fence: the "
    "resource cannot refuse\" marks a backend that issues no fence token.",
    "Metrics: the share of acquire attempts granted and answered (granted or busy; a "
    "blocking acquire whose wait ran out while another client held the lock is busy), "
    "while the fault was active (the whole run for none); acquire latency p50/p99 and "
    "hold time p99 (medians over the runs); renewals that failed; expiries while working "
    "(holds that outlived the holder's own lease clock; a double grant by the service "
    "itself does not show there).",
]


def _walk_run_dirs(root: Path) -> Iterable[Path]:
    return store.run_dirs(root)


def collect(root: Path, source: str = "") -> list[Run]:
    runs: list[Run] = []
    seen: set[Path] = set()
    for d in _walk_run_dirs(root):
        try:
            runs.append(read_run(d, source))
        except (OSError, ValueError):
            continue  # not a readable run: leave it out rather than guess
        seen.add(d.resolve())
    # runs that test-all started but that left no folder (or no results)
    for mf in sorted(root.rglob(f"{MATRIX_DIR}/*/{MATRIX}")):
        if mf.parent.is_symlink():
            continue  # `latest`: the same matrix again
        try:
            matrix = json.loads(mf.read_text())
        except (OSError, ValueError):
            continue
        base = mf.parent.parent.parent  # the results folder that matrix ran into
        for c in matrix.get("cells") or []:
            rd = (base / c["run_dir"]).resolve() if c.get("run_dir") else None
            if c.get("status") == "interrupted":
                # stopped by whoever ran the matrix: no verdict on the lock, left out
                # (unless it had found a violation before it was stopped)
                runs = [r for r in runs if r.dir is None or r.dir.resolve() != rd
                        or r.status == "unsafe"]
                continue
            if rd is not None and rd in seen and (rd / store.RESULTS).exists():
                continue
            if rd is not None and rd in seen:
                runs = [r for r in runs if r.dir is None or r.dir.resolve() != rd]
            status = c.get("status") if c.get("status") in ("refused", "unsafe") else "error"
            runs.append(Run(backend=str(c.get("backend")), workload=str(c.get("workload")),
                            trial=on_trial(str(c.get("workload"))),
                            nemesis=nemesis_label(c.get("nemesis")), status=status,
                            dir=rd if rd is not None and rd.exists() else None,
                            log=base / c["log"] if c.get("log") else None, source=source,
                            summary=str(c.get("summary") or f"exit code {c.get('exit_code')}"),
                            started=str(matrix.get("started", "")),
                            time_limit=matrix.get("time_limit"),
                            seed=c.get("seed") if isinstance(c.get("seed"), int) else None))
    return runs


def version_warnings(runs: Sequence[Run]) -> list[str]:
    """Where the results folders (shards) ran different server or client versions."""
    by_source: dict[str, dict[str, set[str]]] = {}
    for r in runs:
        for k, v in r.versions.items():
            by_source.setdefault(r.source, {}).setdefault(k, set()).add(str(v))
    if len(by_source) < 2:
        return []
    out = []
    for k in sorted({k for vs in by_source.values() for k in vs}):
        seen = {s: sorted(vs[k]) for s, vs in by_source.items() if k in vs}
        if len({tuple(v) for v in seen.values()}) > 1:
            out.append(f"{k} differs between the results folders: " + "; ".join(
                f"{s}: {', '.join(v)}" for s, v in sorted(seen.items())))
    return out


@dataclass
class Comparison:
    roots: list[Path]
    runs: list[Run]
    warnings: list[str] = field(default_factory=list)

    @property
    def workloads(self) -> list[str]:
        return order([r.workload for r in self.runs], WORKLOAD_ORDER)

    def backends(self, workload: str) -> list[str]:
        return order([r.backend for r in self.runs if r.workload == workload], BACKEND_ORDER)

    def nemeses(self, workload: str) -> list[str]:
        return order([r.nemesis for r in self.runs if r.workload == workload], NEMESIS_ORDER)

    def cell(self, workload: str, backend: str, nemesis: str) -> CellView:
        return CellView(sorted((r for r in self.runs if (r.workload, r.backend, r.nemesis) ==
                                (workload, backend, nemesis)),
                               key=lambda r: (r.started, r.seed or 0, r.summary)))

    def grid(self, workload: str) -> list[tuple[str, list[tuple[str, CellView]]]]:
        """One workload's table: (backend, [(nemesis, cell)...]) rows."""
        nem = self.nemeses(workload)
        return [(b, [(n, self.cell(workload, b, n)) for n in nem])
                for b in self.backends(workload)]

    def cells(self) -> Iterable[tuple[str, str, str, CellView]]:
        for w in self.workloads:
            for b in self.backends(w):
                for n in self.nemeses(w):
                    c = self.cell(w, b, n)
                    if c.runs:
                        yield w, b, n, c


def _join(items: Sequence[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


@dataclass
class Overview:
    ran: str  # what was run, when
    versions: str
    findings: list[str]


def overview(c: Comparison) -> Overview:
    """What was run, on what, when, and what the matrix shows: plain sentences."""
    runs = c.runs
    backends = order([r.backend for r in runs], BACKEND_ORDER)
    nemeses = order([r.nemesis for r in runs], NEMESIS_ORDER)
    dates = sorted(r.started[:16].replace("T", " ") for r in runs if r.started)
    when = ("" if not dates else f" on {dates[0]}" if dates[0] == dates[-1]
            else f" between {dates[0]} and {dates[-1]}")
    limits = sorted({f"{r.time_limit:g} s" for r in runs
                     if isinstance(r.time_limit, (int, float))})
    n_cells = sum(1 for _ in c.cells())
    sizes = sorted({len(cell.runs) for *_, cell in c.cells()}) or [0]
    each = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    ran = (f"{_plural(len(runs), 'run', 'runs')}{when} in "
           f"{_plural(n_cells, 'cell', 'cells')} ({each} {'run' if each == '1' else 'runs'} "
           "each): "
           f"{_plural(len(backends), 'backend', 'backends')} ({', '.join(backends)}) \u00d7 "
           f"{_plural(len(nemeses), 'nemesis', 'nemeses')} ({', '.join(nemeses)}) \u00d7 "
           f"{_plural(len(c.workloads), 'workload', 'workloads')} ({', '.join(c.workloads)})"
           + (f", {' / '.join(limits)} per run." if limits else "."))
    versions: dict[str, set[str]] = {}
    for r in runs:
        for k, v in r.versions.items():
            versions.setdefault(k, set()).add(str(v))
    vtext = ("Versions: " + "; ".join(f"{k} {', '.join(sorted(v))}"
                                      for k, v in sorted(versions.items())) + ".") if versions \
        else ""
    lost: dict[str, list[str]] = {}
    service: list[str] = []
    caught, not_caught, backwards = [], [], []
    for w, b, n, cell in c.cells():
        total = len(cell.decided)
        ov = sum(1 for r in cell.runs if r.counts.get("overlaps"))
        if ov:
            lost.setdefault(b, []).append(n)
        if ov and any(r.trial == "lock+resource" for r in cell.runs):
            stale = cell.total("stale")
            if stale:
                not_caught.append(f"{b} under {n} ({_plural(stale, 'stale write', 'stale writes')}"
                                  f" accepted, {w})")
            elif cell.saves:
                caught.append(f"{b} under {n} ({_plural(cell.saves, 'save', 'saves')})")
        if cell.regressions:
            backwards.append(f"{b} under {n} ({_plural(cell.regressions, 'write', 'writes')})")
        if cell.total("lease"):
            runs_with = sum(1 for r in cell.runs if r.counts.get("lease"))
            service.append(f"{b} under {n} ({w}, {runs_with} of {total} runs)")
    out = []
    if lost:
        out.append("Mutual exclusion was lost by " + "; ".join(
            f"{b} under {_join(sorted(set(ns), key=nemeses.index))}" for b, ns in lost.items())
            + ".")
    else:
        out.append("No setup lost mutual exclusion in these runs.")
    if caught:
        out.append("The fence refused the stale holders' writes (saves), so the resource "
                   "held where the lock failed: " + "; ".join(caught) + ".")
    if not_caught:
        out.append("Stale writes reached the resource: " + "; ".join(not_caught) + ".")
    if backwards:
        out.append("The fence went backwards (the service's counter restarted lower) and the "
                   "resource refused current holders' work, an outage rather than a save: "
                   + "; ".join(backwards) + ".")
    if service:
        out.append("The lock service itself granted a lock while another client's lease was "
                   "provably valid: " + "; ".join(service) + ".")
    clean = [b for b in backends
             if all(cell.status == "safe" for _w, bb, _n, cell in c.cells() if bb == b)]
    if clean:
        out.append(f"No violation in any run of any cell: {', '.join(clean)}.")
    broken = [f"{b} under {n} ({w}, {cell.headline()})" for w, b, n, cell in c.cells()
              if cell.status in ("error", "unknown")]
    if broken:
        out.append("Undecided or crashed (the reasons are in the cells): "
                   + "; ".join(broken[:12]) + (" ..." if len(broken) > 12 else "") + ".")
    return Overview(ran, vtext, out)


def _rel(target: Path, out_dir: Path) -> str:
    return Path(os.path.relpath(target, out_dir)).as_posix()


def run_page(r: Run, write_reports: bool) -> Path | None:
    """The page a cell links for a run: its report.html, or a published run's run.html;
    with write_reports, a report is written where a run has none."""
    if r.dir is None:
        return None
    for name in ("report.html", RUN_PAGE):
        if (r.dir / name).exists():
            return r.dir / name
    if write_reports and store.is_run_dir(r.dir):
        from lockcheck.results.report import write_report

        try:
            return write_report(r.dir)
        except Exception:  # an old or broken run still gets its cell, without a report
            return None
    return None


def _links(cell: CellView, out_dir: Path, md: bool, write_reports: bool) -> list[str]:
    links = []
    for i, r in enumerate(cell.runs, 1):
        rep = run_page(r, write_reports)
        target, label = (rep, f"run {i}") if rep is not None else (r.log, f"log {i}")
        if target is None:
            continue
        href = _rel(target, out_dir)
        if rep is not None and rep.name == "report.html" and r.status == "unsafe":
            href += "#v=1"
        links.append(f"[{label}]({href})" if md else f'<a href="{esc(href)}">{esc(label)}</a>')
    return links


def cell_text(cell: CellView, nemesis: str) -> list[str]:
    """Everything a cell says but its links: what a merged and an unmerged page share."""
    return [f"{ICON[cell.status]} {cell.status}", *cell.lines(), *cell.metric_lines(nemesis)]


def _md_cell(cell: CellView, nemesis: str, out_dir: Path, write_reports: bool) -> str:
    if not cell.runs:
        return ""
    head, *rest = cell_text(cell, nemesis)
    icon, word = head.split(" ", 1)
    body = [f"{icon} **{word}**", *(s.replace("|", "\\|") for s in rest)]
    links = _links(cell, out_dir, True, write_reports)
    if links:
        body.append(" ".join(links))
    return "<br>".join(body)


def _html_cell(cell: CellView, nemesis: str, out_dir: Path, write_reports: bool) -> str:
    if not cell.runs:
        return '<td class="cell empty">not run</td>'
    _, headline, *lines = cell_text(cell, nemesis)
    body = "".join(f"<div>{esc(s)}</div>" for s in lines)
    links = " ".join(_links(cell, out_dir, False, write_reports))
    title = esc(" | ".join(r.summary for r in cell.runs)[:600])
    return (f'<td class="cell {cell.status}" data-status="{cell.status}" title="{title}">'
            f'<div class="verdict">{GLYPH[cell.status]} {esc(cell.status)}: {esc(headline)}'
            f"</div>{body}<div>{links}</div></td>")


def _generated(c: Comparison) -> str:
    # the folders' names only: a published page need not tell the machine's paths
    names = ", ".join(f"{r.name}/" for r in c.roots)
    return f"{time.strftime('%Y-%m-%d %H:%M %z')} from {names}"


def render_markdown(c: Comparison, out_dir: Path, write_reports: bool = True) -> str:
    ov = overview(c)
    parts = ["# lockcheck: which lock setups survive which faults", ""]
    parts += [f"{ov.ran} {ov.versions}".strip(), ""]
    parts += [f"> warning: {w}" for w in c.warnings] + ([""] if c.warnings else [])
    parts += ["**What the matrix shows**", ""]
    parts += [f"- {f}" for f in ov.findings] + [""]
    parts += ["*A lock is not a correctness mechanism unless the resource enforces the "
              "fence.*", "", "**How to read a cell**", ""]
    parts += [f"- {line}" for line in HOW_TO_READ] + [""]
    for w in c.workloads:
        nem = c.nemeses(w)
        parts += [f"## Workload: {w}", "", "| backend | " + " | ".join(nem) + " |",
                  "|---|" + "---|" * len(nem)]
        for b, row in c.grid(w):
            cells = [_md_cell(cell, n, out_dir, write_reports) for n, cell in row]
            parts.append(f"| **{b}** | " + " | ".join(cells) + " |")
        parts.append("")
    parts.append(f"Generated by `lockcheck compare` on {_generated(c)}.")
    return "\n".join(parts) + "\n"


def render_html(c: Comparison, out_dir: Path, write_reports: bool = True) -> str:
    legend = " ".join(f'<span class="cell {s} chip">{GLYPH[s]} {s}</span>'
                      for s in LEGEND_ORDER)
    tables = []
    for w in c.workloads:
        nem = c.nemeses(w)
        head = "".join(f"<th>{esc(n)}</th>" for n in nem)
        rows = []
        for b, row in c.grid(w):
            tds = [_html_cell(cell, n, out_dir, write_reports) for n, cell in row]
            rows.append(f'<tr><td class="rowh">{esc(b)}</td>{"".join(tds)}</tr>')
        tables.append(f'<h2>Workload: {esc(w)}</h2><table class="matrix"><thead><tr>'
                      f'<th>backend</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    ov = overview(c)
    warn = "".join(f'<p class="warn">warning: {esc(w)}</p>' for w in c.warnings)
    text = (f"<p>{esc(ov.ran)}</p><p class='small muted'>{esc(ov.versions)}</p>{warn}"
            "<p><b>What the matrix shows</b></p><ul>"
            + "".join(f"<li>{esc(f)}</li>" for f in ov.findings) + "</ul>")
    how = ("<details open><summary><b>How to read a cell</b></summary><ul>"
           + "".join(f"<li>{esc(line)}</li>" for line in HOW_TO_READ) + "</ul></details>")
    body = (f'<header class="top"><h1>Which lock setups survive which faults</h1></header>'
            f'<div class="thesis"><p><b>A lock is not a correctness mechanism unless the '
            f"resource enforces the fence.</b></p>{text}</div>"
            f'<p class="small muted">{legend}</p><div class="small">{how}</div>'
            '<p class="small muted">Hover a cell for its runs\' verdicts.</p>'
            + "".join(tables)
            + f'<p class="muted small">Generated by lockcheck compare on '
            f"{esc(_generated(c))}.</p>")
    return page("lockcheck comparison", body)


def load(roots: Sequence[Path]) -> Comparison:
    """The runs of every results folder; BadInput when a folder is missing or empty."""
    resolved: list[Path] = []
    runs: list[Run] = []
    for root in roots:
        if not root.is_dir():
            raise BadInput(f"{root}: no such results folder")
        root = root.resolve()
        found = collect(root, source=root.name)
        if not found:
            raise BadInput(f"{root}: no runs in it (run folders have {store.TEST} and "
                           f"{store.HISTORY})")
        resolved.append(root)
        runs += found
    apart = keep_server_versions_apart(runs)
    return Comparison(resolved, runs, apart + version_warnings(runs))


def compare(roots: Path | Sequence[Path], out_dir: Path, *,
            write_reports: bool = True) -> tuple[Path, Path]:
    """Write index.html and report.md into out_dir; returns their paths."""
    c = load([roots] if isinstance(roots, Path) else list(roots))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create {out_dir}: {e.strerror or e}") from None
    index, md = out_dir / INDEX, out_dir / MARKDOWN
    index.write_text(render_html(c, out_dir.resolve(), write_reports), encoding="utf-8")
    md.write_text(render_markdown(c, out_dir.resolve(), write_reports), encoding="utf-8")
    return index, md
