"""`lockcheck compare`: the matrix of many runs, as `index.html` and `report.md`.

Rows are backends (and their variants), columns nemeses, one table per workload.
Each cell sums up its runs: the verdict over them (unsafe if any run found a
violation; error if any run crashed or left no results; unknown if any could not
decide; safe otherwise), violations by kind, fencing saves, availability under the
fault, acquire latency p50/p99 (medians over the runs), and links to each run's
report. It reads only run folders (test.json, results.json) and the matrix files
`test-all` wrote, which name the runs that crashed before leaving a folder.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.errors import BadInput
from lockcheck.results import store
from lockcheck.results.html import esc, page
from lockcheck.results.matrix import MATRIX, MATRIX_DIR

INDEX, MARKDOWN = "index.html", "report.md"
BACKEND_ORDER = ("redis", "redlock", "redlock-fenced", "zookeeper", "etcd", "postgres",
                 "redis-sentinel")
NEMESIS_ORDER = ("none", "partition", "kill", "pause", "client-pause")
WORKLOAD_ORDER = ("mutex", "fenced", "fenced (unfenced resource)")
STATUS_ORDER = ("unsafe", "error", "unknown", "safe", "refused")  # worst first
ICON = {"safe": "✅", "unsafe": "❌", "unknown": "❓", "error": "⚠️", "refused": "⛔"}
# in HTML: glyphs every font has (a headless browser or a bare desktop has no emoji font)
FENCE_HELD = "the lock failed, the fence held"
GLYPH = {"safe": "✓", "unsafe": "✗", "unknown": "?", "error": "!", "refused": "&ndash;"}
LEGEND = ("violations by kind; fencing saves (stale writes the resource rejected); granted: "
          "the share of acquire attempts that got the lock (a busy lock counts against it), "
          "answered: the share the service answered at all (granted or busy, not an error or "
          "a timeout), both while the fault was active (the whole run for none); acquire "
          "latency p50/p99 (medians over the runs); links to each run's report.")


@dataclass
class Run:
    backend: str
    workload: str  # label: mutex, fenced, "fenced (unfenced resource)"
    nemesis: str  # "none" or names joined by "+"
    status: str  # safe / unsafe / unknown / error / refused
    dir: Path | None = None
    log: Path | None = None
    summary: str = ""
    started: str = ""
    time_limit: Any = None
    versions: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    saves: int = 0
    availability: float | None = None  # granted share while the run's faults were active
    answered: float | None = None  # share the service answered (granted or busy), same time
    p50: float | None = None
    p99: float | None = None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _status(valid: Any) -> str:
    return {True: "safe", False: "unsafe"}.get(valid, "unknown") if isinstance(valid, bool) \
        else "unknown"


def workload_label(test: Mapping[str, Any]) -> str:
    w = str(test.get("workload", "?"))
    return f"{w} (unfenced resource)" if w == "fenced" and test.get("resource") == "unfenced" \
        else w


def nemesis_label(nemesis: Any) -> str:
    if isinstance(nemesis, (list, tuple)):
        return "+".join(str(n) for n in nemesis) or "none"
    return str(nemesis or "none").replace(",", "+")


def _counts(checkers: Mapping[str, Any]) -> dict[str, int]:
    me, fe = checkers.get("mutual-exclusion") or {}, checkers.get("fencing") or {}
    ls, lin = checkers.get("lease-safety") or {}, checkers.get("linearizable") or {}
    illegal = lin.get("illegal")
    return {"overlaps": _int(me.get("violation_count")),
            "lease": _int(ls.get("violation_count")),
            "stale": _int(fe.get("stale_accepted_count")) + _int(fe.get("interleaved_count")),
            "duplicate_fences": _int(fe.get("duplicate_fence_count")),
            "nonlinearizable_keys": len(illegal) if isinstance(illegal, list) else 0}


def _shares(metrics: Mapping[str, Any], nemesis: str) -> tuple[float | None, float | None]:
    """(granted, answered) shares of the acquires attempted while the run's faults were
    active (the whole run for nemesis none)."""
    av = metrics.get("availability") or {}
    scopes = [av.get("overall") or {}] if nemesis == "none" else list(
        (av.get("faults") or {}).values())
    attempts = sum(_int(f.get("attempts")) for f in scopes)
    ok = sum(_int(f.get("ok")) for f in scopes)
    busy = sum(_int(f.get("busy")) for f in scopes)
    return (ok / attempts, (ok + busy) / attempts) if attempts else (None, None)


def read_run(d: Path) -> Run:
    test = json.loads((d / store.TEST).read_text())
    try:
        results = json.loads((d / store.RESULTS).read_text())
    except (OSError, ValueError):
        results = None
    run = Run(backend=str(test.get("backend", "?")), workload=workload_label(test),
              nemesis=nemesis_label(test.get("nemesis")), status="error", dir=d,
              started=str(test.get("started", "")), time_limit=test.get("time_limit"),
              versions=dict(test.get("versions") or {}))
    if not isinstance(results, dict):
        run.summary = "no results.json: the run did not finish"
        return run
    run.status = _status(results.get("valid"))
    if results.get("failure"):
        run.status = "unsafe" if results.get("valid") is False else "error"
    run.summary = str(results.get("summary", ""))
    checkers = results.get("checkers") or {}
    run.counts = _counts(checkers)
    run.saves = _int((checkers.get("fencing") or {}).get("saves"))
    m = results.get("metrics")
    if isinstance(m, dict) and "error" not in m:
        run.availability, run.answered = _shares(m, run.nemesis)
        lat = m.get("acquire_latency_ms") or {}
        run.p50, run.p99 = lat.get("p50"), lat.get("p99")
    return run


def _walk_run_dirs(root: Path) -> Iterable[Path]:
    """Run folders under root, without following symlinks (`latest` is one). A folder
    slimmed for publishing (`scripts/comparison --slim`) keeps results.json but not its
    history: it is still a run."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if store.TEST in filenames and (store.HISTORY in filenames
                                        or store.RESULTS in filenames):
            dirnames[:] = []
            yield Path(dirpath)


def collect(root: Path) -> list[Run]:
    runs: list[Run] = []
    seen: set[Path] = set()
    for d in _walk_run_dirs(root):
        try:
            runs.append(read_run(d))
        except (OSError, ValueError):
            continue  # not a readable run: leave it out rather than guess
        seen.add(d.resolve())
    # runs that test-all started but that left no folder (or no results)
    for mf in sorted(root.glob(f"{MATRIX_DIR}/*/{MATRIX}")):
        if mf.parent.is_symlink():
            continue  # `latest`: the same matrix again
        try:
            matrix = json.loads(mf.read_text())
        except (OSError, ValueError):
            continue
        for c in matrix.get("cells") or []:
            rd = (root / c["run_dir"]).resolve() if c.get("run_dir") else None
            if rd is not None and rd in seen and (rd / store.RESULTS).exists():
                continue
            if rd is not None and rd in seen:
                runs = [r for r in runs if r.dir is None or r.dir.resolve() != rd]
            status = c.get("status") if c.get("status") in ("refused", "unsafe") else "error"
            runs.append(Run(backend=str(c.get("backend")), workload=str(c.get("workload")),
                            nemesis=nemesis_label(c.get("nemesis")), status=status,
                            dir=rd if rd is not None and rd.exists() else None,
                            log=root / c["log"] if c.get("log") else None,
                            summary=str(c.get("summary") or f"exit code {c.get('exit_code')}"),
                            started=str(matrix.get("started", "")),
                            time_limit=matrix.get("time_limit")))
    return runs


@dataclass
class CellView:
    runs: list[Run]

    @property
    def status(self) -> str:
        for s in STATUS_ORDER:
            if any(r.status == s for r in self.runs):
                if s == "refused" and any(r.status != "refused" for r in self.runs):
                    continue
                return s
        return "safe"

    def total(self, name: str) -> int:
        return sum(r.counts.get(name, 0) for r in self.runs)

    @property
    def saves(self) -> int:
        return sum(r.saves for r in self.runs)

    def median(self, attr: str) -> float | None:
        vals = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return statistics.median(vals) if vals else None

    def tally(self) -> str:
        n = len(self.runs)
        bad = sum(1 for r in self.runs if r.status == self.status)
        return f"{bad}/{n}" if n > 1 else ""

    def violation_parts(self) -> list[str]:
        names = (("overlaps", "overlap", "overlaps"),
                 ("lease", "grant during a valid lease", "grants during a valid lease"),
                 ("stale", "stale write accepted", "stale writes accepted"),
                 ("duplicate_fences", "duplicate fence", "duplicate fences"),
                 ("nonlinearizable_keys", "key not linearizable", "keys not linearizable"))
        out = []
        for key, one, many in names:
            n = self.total(key)
            if n:
                out.append(f"{n:,} {one if n == 1 else many}")
        return out


def _order(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    vs = set(values)
    return [v for v in preferred if v in vs] + sorted(vs - set(preferred))


@dataclass
class Comparison:
    root: Path
    runs: list[Run]

    @property
    def workloads(self) -> list[str]:
        return _order((r.workload for r in self.runs), WORKLOAD_ORDER)

    def backends(self, workload: str) -> list[str]:
        return _order((r.backend for r in self.runs if r.workload == workload), BACKEND_ORDER)

    def nemeses(self, workload: str) -> list[str]:
        return _order((r.nemesis for r in self.runs if r.workload == workload), NEMESIS_ORDER)

    def cell(self, workload: str, backend: str, nemesis: str) -> CellView:
        return CellView([r for r in self.runs if (r.workload, r.backend, r.nemesis) ==
                         (workload, backend, nemesis)])

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


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2f}" if v < 10 else f"{v:.0f}")


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
    backends = _order((r.backend for r in runs), BACKEND_ORDER)
    nemeses = _order((r.nemesis for r in runs), NEMESIS_ORDER)
    dates = sorted(r.started[:16].replace("T", " ") for r in runs if r.started)
    when = ("" if not dates else f" on {dates[0]}" if dates[0] == dates[-1]
            else f" between {dates[0]} and {dates[-1]}")
    limits = sorted({f"{r.time_limit:g} s" for r in runs
                     if isinstance(r.time_limit, (int, float))})
    ran = (f"{_plural(len(runs), 'run', 'runs')}{when}: "
           f"{_plural(len(backends), 'backend', 'backends')} ({', '.join(backends)}) \u00d7 "
           f"{_plural(len(nemeses), 'nemesis', 'nemeses')} ({', '.join(nemeses)}) \u00d7 "
           f"{_plural(len(c.workloads), 'workload', 'workloads')} ({', '.join(c.workloads)})"
           + (f", {' / '.join(limits)} each." if limits else "."))
    versions: dict[str, set[str]] = {}
    for r in runs:
        for k, v in r.versions.items():
            versions.setdefault(k, set()).add(str(v))
    vtext = ("Versions: " + "; ".join(f"{k} {', '.join(sorted(v))}"
                                      for k, v in sorted(versions.items())) + ".") if versions \
        else ""
    lost: dict[str, list[str]] = {}
    service: dict[tuple[str, str], list[str]] = {}
    caught, not_caught = [], []
    for w, b, n, cell in c.cells():
        ov = cell.total("overlaps")
        if ov:
            lost.setdefault(b, []).append(n)
        if w.startswith("fenced") and ov:
            stale = cell.total("stale")
            if stale:
                not_caught.append(f"{b} under {n} ({_plural(stale, 'stale write', 'stale writes')}"
                                  f" accepted, {w})")
            elif cell.saves:
                caught.append(f"{b} under {n}: {_plural(ov, 'overlap', 'overlaps')}, "
                              f"{_plural(cell.saves, 'stale write', 'stale writes')} rejected, "
                              "none accepted")
        if cell.total("lease"):
            service.setdefault((b, n), []).append(w)
    out = []
    if lost:
        out.append("Mutual exclusion was lost by " + "; ".join(
            f"{b} under {_join(sorted(set(ns), key=nemeses.index))}" for b, ns in lost.items())
            + ".")
    else:
        out.append("No setup lost mutual exclusion in these runs.")
    if caught:
        out.append("The fence at the resource caught it: " + "; ".join(caught) + ".")
    if not_caught:
        out.append("Stale writes reached the resource: " + "; ".join(not_caught) + ".")
    if service:
        out.append("The lock service itself granted a lock while another client's lease was "
                   "provably valid: " + "; ".join(f"{b} under {n}" for b, n in service) + ".")
    safe = [b for b in backends
            if all(cell.status == "safe" for _w, bb, _n, cell in c.cells() if bb == b)]
    # "safe" in a fenced cell can mean the fence held while the lock did not: say which
    held = [b for b in safe if b not in lost]
    saved = [b for b in safe if b in lost]
    if held:
        out.append(f"Safe in every cell, mutual exclusion included: {', '.join(held)}.")
    if saved:
        out.append(f"Safe in every cell only because the fence held where the lock did not: "
                   f"{', '.join(saved)}.")
    broken = [f"{b} under {n} ({w}, {cell.status})" for w, b, n, cell in c.cells()
              if cell.status in ("error", "unknown")]
    if broken:
        out.append("Undecided or crashed (see their logs): " + "; ".join(broken[:12])
                   + (" ..." if len(broken) > 12 else "") + ".")
    return Overview(ran, vtext, out)


def _rel(target: Path, out_dir: Path) -> str:
    return Path(os.path.relpath(target, out_dir)).as_posix()


def _report_link(r: Run, out_dir: Path) -> Path | None:
    if r.dir is None:
        return None
    p = r.dir / "report.html"
    if not p.exists() and store.is_run_dir(r.dir):
        from lockcheck.results.report import write_report

        try:
            write_report(r.dir)
        except Exception:  # an old or broken run still gets its cell, without a report
            return None
    return p if p.exists() else None


def _links(cell: CellView, out_dir: Path, md: bool) -> list[str]:
    links = []
    for i, r in enumerate(cell.runs, 1):
        rep = _report_link(r, out_dir)
        target, label = (rep, f"run {i}") if rep is not None else (r.log, f"log {i}")
        if target is None:
            continue
        href = _rel(target, out_dir)
        if rep is not None and r.status == "unsafe":
            href += "#v=1"
        links.append(f"[{label}]({href})" if md else f'<a href="{esc(href)}">{esc(label)}</a>')
    return links


def _cell_lines(cell: CellView, nemesis: str) -> list[str]:
    lines = []
    if cell.status == "safe" and cell.total("overlaps") and cell.saves:
        lines.append(FENCE_HELD)
    v = cell.violation_parts()
    if v:
        lines.append(", ".join(v))
    if cell.saves:
        lines.append(f"{cell.saves:,} saves")
    av = cell.median("availability")
    if av is not None:
        lines.append(f"{_pct(av)} granted, {_pct(cell.median('answered'))} answered"
                     + (" under the fault" if nemesis != "none" else ""))
    if cell.median("p50") is not None:
        lines.append(f"p50/p99 {_ms(cell.median('p50'))}/{_ms(cell.median('p99'))} ms")
    if cell.status in ("error", "refused") and cell.runs:
        lines.append(cell.runs[0].summary[:90])
    return lines


def _md_cell(cell: CellView, nemesis: str, out_dir: Path) -> str:
    if not cell.runs:
        return ""
    head = f"{ICON[cell.status]} **{cell.status}**"
    if cell.tally():
        head += f" ({cell.tally()})"
    body = [head, *(s.replace("|", "\\|") for s in _cell_lines(cell, nemesis))]
    links = _links(cell, out_dir, md=True)
    if links:
        body.append(" ".join(links))
    return "<br>".join(body)


def _html_cell(cell: CellView, nemesis: str, out_dir: Path) -> str:
    if not cell.runs:
        return '<td class="cell empty">not run</td>'
    tally = f" ({cell.tally()})" if cell.tally() else ""
    lines = "".join(f"<div><b>{esc(s)}</b></div>" if s == FENCE_HELD else f"<div>{esc(s)}</div>"
                    for s in _cell_lines(cell, nemesis))
    links = " ".join(_links(cell, out_dir, md=False))
    title = esc(" | ".join(r.summary for r in cell.runs)[:600])
    return (f'<td class="cell {cell.status}" data-status="{cell.status}" title="{title}">'
            f'<div class="verdict">{GLYPH[cell.status]} {esc(cell.status)}{esc(tally)}</div>'
            f"{lines}<div>{links}</div></td>")


def render_markdown(c: Comparison, out_dir: Path) -> str:
    ov = overview(c)
    parts = ["# lockcheck: which lock setups survive which faults", ""]
    parts += [f"{ov.ran} {ov.versions}".strip(), "", "**What the matrix shows**", ""]
    parts += [f"- {f}" for f in ov.findings] + [""]
    parts += ["*A lock is not a correctness mechanism unless the resource enforces the fence.* "
              "Each cell: verdict over its runs (" + ", ".join(f"{ICON[s]} {s}" for s in
                                                                 STATUS_ORDER)
              + "); " + LEGEND, ""]
    for w in c.workloads:
        nem = c.nemeses(w)
        parts += [f"## Workload: {w}", "", "| backend | " + " | ".join(nem) + " |",
                  "|---|" + "---|" * len(nem)]
        for b, row in c.grid(w):
            cells = [_md_cell(cell, n, out_dir) for n, cell in row]
            parts.append(f"| **{b}** | " + " | ".join(cells) + " |")
        parts.append("")
    parts.append(f"Generated by `lockcheck compare` on {time.strftime('%Y-%m-%d %H:%M %z')}.")
    return "\n".join(parts) + "\n"


def render_html(c: Comparison, out_dir: Path) -> str:
    legend = " ".join(f'<span class="cell {s} chip">{GLYPH[s]} {s}</span>'
                      for s in STATUS_ORDER)
    tables = []
    for w in c.workloads:
        nem = c.nemeses(w)
        head = "".join(f"<th>{esc(n)}</th>" for n in nem)
        rows = []
        for b, row in c.grid(w):
            tds = [_html_cell(cell, n, out_dir) for n, cell in row]
            rows.append(f'<tr><td class="rowh">{esc(b)}</td>{"".join(tds)}</tr>')
        tables.append(f'<h2>Workload: {esc(w)}</h2><table class="matrix"><thead><tr>'
                      f'<th>backend</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    ov = overview(c)
    text = (f"<p>{esc(ov.ran)}</p><p class='small muted'>{esc(ov.versions)}</p>"
            "<p><b>What the matrix shows</b></p><ul>"
            + "".join(f"<li>{esc(f)}</li>" for f in ov.findings) + "</ul>")
    body = (f'<header class="top"><h1>Which lock setups survive which faults</h1></header>'
            f'<div class="thesis"><p><b>A lock is not a correctness mechanism unless the '
            f"resource enforces the fence.</b></p>{text}</div>"
            f'<p class="small muted">{legend}</p><p class="small muted">Each cell: {esc(LEGEND)} '
            "Hover a cell for its runs' verdicts.</p>"
            + "".join(tables)
            + f'<p class="muted small">Generated by lockcheck compare on '
            # the folder's name only: a published page need not tell the machine's paths
            f'{esc(time.strftime("%Y-%m-%d %H:%M %z"))} from {esc(c.root.name)}/.</p>')
    return page("lockcheck comparison", body)


def compare(root: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write index.html and report.md into out_dir; returns their paths."""
    if not root.is_dir():
        raise BadInput(f"{root}: no such results folder")
    root = root.resolve()
    runs = collect(root)
    if not runs:
        raise BadInput(f"{root}: no runs in it (run folders have {store.TEST} and "
                       f"{store.HISTORY})")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create {out_dir}: {e.strerror or e}") from None
    c = Comparison(root, runs)
    index, md = out_dir / INDEX, out_dir / MARKDOWN
    index.write_text(render_html(c, out_dir.resolve()), encoding="utf-8")
    md.write_text(render_markdown(c, out_dir.resolve()), encoding="utf-8")
    return index, md
