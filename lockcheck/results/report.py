"""`report.html` of one run: what happened, what the checkers found, and why it matters.

A single self-contained file in the run's folder (styles, scripts, data and plots
inline; it opens offline). It reads only what the run left: test.json,
history.jsonl, results.json (recomputed in memory when missing) and the file list.
The page leads with the thesis: in a fenced run it shows the stale writes the
resource rejected (saves) next to the overlaps the lock allowed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lockcheck import __version__
from lockcheck.checker.analyze import analyze
from lockcheck.checker.intervals import critical_sections
from lockcheck.checker.verdict import refusals
from lockcheck.errors import BadInput
from lockcheck.history import Op, read_history_full
from lockcheck.results import plots, store
from lockcheck.results.faults import FaultWindow, fault_windows
from lockcheck.results.html import badge, esc, page, table, verdict_class
from lockcheck.results.leadership import leadership_rows
from lockcheck.results.liveness import liveness_rows
from lockcheck.results.metrics import compute_metrics, lock_frame
from lockcheck.results.progress import checker_detail, verdict_word
from lockcheck.results.timeline import timeline_data
from lockcheck.workloads.registry import on_trial

REPORT = "report.html"
LINEARIZABLE_DIR = "linearizable"
MAX_FAULT_ROWS = 300


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def _count(r: Mapping[str, Any] | None, name: str) -> int:
    v = (r or {}).get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def load_results(run_dir: Path, ops: list[Op], test: dict[str, Any]) -> dict[str, Any]:
    """results.json, or the checkers run now (in memory) when the run left none."""
    p = run_dir / store.RESULTS
    if p.exists():
        try:
            data = json.loads(p.read_text())
            if isinstance(data, dict):
                return data
        except ValueError:
            pass
    return analyze(ops, test)


def withheld_notes(checkers: Mapping[str, Any]) -> list[str]:
    """Each withheld reply (reply-loss) a failed checker tied an anomaly to, once."""
    notes: list[str] = []
    for r in checkers.values():
        for w in (r or {}).get("withheld_replies") or ():
            note = w.get("note") if isinstance(w, dict) else None
            if isinstance(note, str) and note not in notes:
                notes.append(note)
    return notes


def findings(test: Mapping[str, Any], results: Mapping[str, Any],
             metrics: Mapping[str, Any]) -> list[str]:
    """The run's story in a few plain sentences (HTML), thesis first."""
    ch = results.get("checkers") or {}
    me, fe, ls = ch.get("mutual-exclusion"), ch.get("fencing"), ch.get("lease-safety")
    overlaps = _count(me, "violation_count")
    keys = len((me or {}).get("keys") or {})
    saves, regressed = refusals(fe or {})
    stale = _count(fe, "stale_accepted_count")
    interleaved = _count(fe, "interleaved_count")
    trial = on_trial(str(test.get("workload", results.get("workload", "mutex"))))
    resource = str(test.get("resource", "fenced"))
    out = []
    if overlaps:
        where = f" on {_n(keys, 'key')}" if keys else ""
        lead = (f"<b>The lock let {_n(overlaps, 'pair')} of critical sections overlap{where}"
                "</b>: two clients believed they held the same lock at the same time.")
    elif me is not None and me.get("valid") is True:
        lead = (f"Mutual exclusion held: {_n(_count(me, 'sections'), 'critical section')}, "
                "none overlapping.")
    else:
        lead = ""
    if trial == "lock+resource":
        if stale or interleaved:
            out.append(f"{lead} <b>{_n(stale + interleaved, 'stale write')} reached the "
                       f"resource</b> ({resource} resource): the overlap corrupted the data.")
        elif saves:
            out.append(f"{lead} <b>The resource refused {_n(saves, 'write')} from a holder "
                       "that had lost the lock (saves) and accepted no stale write</b>: the "
                       "fence checked at the write path kept the data safe"
                       + (" where the lock alone did not." if overlaps else "."))
        elif lead:
            out.append(f"{lead} No stale write reached the resource.")
    if trial == "lock+resource" and regressed:
        out.append(f"<b>{_n(regressed, 'write')} of a current holder "
                   f"{'was' if regressed == 1 else 'were'} refused because the fence went "
                   "backwards</b> (fence regressions: the service's counter restarted "
                   "lower): not a save; that work was lost, an outage of the resource.")
    if trial == "lock+resource" and _count(fe, "unfenced_rejections") and not \
            _count(fe, "accepted") and not saves:
        out.append("No fence: the backend issues no fence token, so the resource cannot "
                   "refuse a stale write; it refused every write instead.")
    if trial != "lock+resource" and lead:
        tail = (" Nothing in this workload checks a fence, so each overlap is a chance of a "
                "double write; run it with <code>--workload fenced</code> to see whether a "
                "fenced resource catches it." if overlaps and trial == "lock" else "")
        out.append(lead + tail)
    withheld = withheld_notes(ch)
    if withheld:
        out.append("The anomalies followed withheld replies (reply-loss): "
                   f"{esc('; '.join(withheld))}.")
    n_lease = _count(ls, "violation_count")
    if n_lease:
        out.append(f"The lock service granted a lock {_n(n_lease, 'time')} while another "
                   "client's lease was provably still valid: the service itself lost a lease "
                   "(lease-safety).")
    n_ghost = _count(ls, "superseded_renewal_count")
    if n_ghost:
        out.append(f"<b>{_n(n_ghost, 'renewal')} of a lease succeeded after another client "
                   "had been granted the lock</b>: the service let a holder that had lost "
                   "the lock extend it, so it may believe it holds the lock beside the next "
                   "holder, or bring a freed lock back (lease-safety).")
    dups, regs = _count(fe, "duplicate_fence_count"), _count(fe, "regression_count")
    if dups or regs:
        out.append(f"The service handed out {_n(dups, 'duplicate fence token')} and its fences "
                   f"went backwards {_n(regs, 'time')}: a fence protects only while it never "
                   "repeats.")
    ew = metrics.get("expiries_while_working") or {}
    outlived = int(ew.get("outlived_lease") or 0)
    if outlived:
        mx = (ew.get("overrun_ms") or {}).get("max")
        out.append(f"<b>{_n(outlived, 'holder')} stayed inside the critical section after "
                   f"its own lease clock ran out</b> (expiries while working; longest "
                   f"{_ms(mx)} ms past): the alarm to watch in production.")
    went_on = int(ew.get("worked_after_refusal") or 0)
    if went_on:
        out.append(f"<b>{_n(went_on, 'holder')} went on working after a renewal was "
                   "refused</b>: told the lock was gone, the client carried on (a renewal "
                   "that swallows a refusal leaves its holder working without a lock).")
    return out


def _tiles(results: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    ch = results.get("checkers") or {}
    fe = ch.get("fencing")
    av = (metrics.get("availability") or {})
    faults = av.get("faults") or {}
    worst = min(faults.items(), key=lambda kv: kv[1].get("share") or 0.0) if faults else None
    tiles: list[tuple[str, str, str]] = [
        (f"{_count(ch.get('mutual-exclusion'), 'violation_count'):,}",
         "overlapping holders the lock allowed",
         "bad" if _count(ch.get("mutual-exclusion"), "violation_count") else "good"),
        (f"{_count(ch.get('lease-safety'), 'violation_count'):,}",
         "grants while a lease was valid",
         "bad" if _count(ch.get("lease-safety"), "violation_count") else "good"),
    ]
    if fe is not None and (_count(fe, "accepted") or _count(fe, "rejected")):
        stale = _count(fe, "stale_accepted_count") + _count(fe, "interleaved_count")
        saves, regressed = refusals(fe)
        tiles.append((f"{saves:,}", "saves: writes refused from a holder that had lost the lock",
                      "good" if saves else ""))
        if regressed:
            tiles.append((f"{regressed:,}", "fence regressions: current holders' writes "
                          "refused because the fence went backwards", "bad"))
        tiles.append((f"{stale:,}", "stale writes the resource accepted",
                      "bad" if stale else "good"))
    ew = metrics.get("expiries_while_working") or {}
    tiles.append((f"{int(ew.get('outlived_lease') or 0):,}",
                  "holders still inside after their lease ran out",
                  "bad" if ew.get("outlived_lease") else "good"))
    lat = metrics.get("acquire_latency_ms") or {}
    tiles.append((f"{_ms(lat.get('p50'))} / {_ms(lat.get('p99'))}",
                  "acquire latency p50 / p99 (ms)", ""))
    if worst is not None:
        tiles.append((_pct(worst[1].get("share")), f"of acquires granted under {worst[0]} "
                      f"(no fault: {_pct((av.get('no_fault') or {}).get('share'))})", ""))
    return '<div class="tiles">' + "".join(
        f'<div class="tile {cls}"><div class="n">{esc(n)}</div><div class="l">{esc(label)}'
        "</div></div>" for n, label, cls in tiles) + "</div>"


def _checkers_table(results: Mapping[str, Any]) -> str:
    rows = []
    for name, r in (results.get("checkers") or {}).items():
        why = r.get("summary") or r.get("explanation") or r.get("note") or ""
        detail = esc(checker_detail(name, r))
        if why and r.get("valid") is not True:
            detail += f'<br><span class="muted small">{esc(str(why)[:300])}</span>'
        rows.append([f"<b>{esc(name)}</b>", badge(r.get("valid"), verdict_word(r.get("valid"))),
                     f"{r.get('elapsed_s', 0):.2f} s", detail])
    return table(["checker", "verdict", "time", "details"], rows, num_cols=(2,))


def _metrics_table(m: Mapping[str, Any]) -> str:
    if "error" in m:
        return f'<p class="muted">metrics could not be computed: {esc(m["error"])}</p>'
    a, ren = m.get("acquire") or {}, m.get("renewals") or {}
    ew = m.get("expiries_while_working") or {}

    def dist_row(label: str, d: Mapping[str, Any]) -> list[Any]:
        return [esc(label), f"{d.get('count', 0):,}", _ms(d.get("p50")), _ms(d.get("p95")),
                _ms(d.get("p99")), _ms(d.get("max"))]

    dists = table(["ms", "count", "p50", "p95", "p99", "max"], [
        dist_row("acquire latency (granted)", m.get("acquire_latency_ms") or {}),
        dist_row("acquire latency (every attempt)", m.get("attempt_latency_ms") or {}),
        dist_row("hold time (enter to exit)", m.get("hold_ms") or {}),
        dist_row("time inside past the lease clock", ew.get("overrun_ms") or {}),
    ], num_cols=(1, 2, 3, 4, 5))
    kv = [
        ("acquire attempts", f"{a.get('attempts', 0):,}: {a.get('ok', 0):,} granted, "
         f"{a.get('busy', 0):,} busy, {a.get('failed', 0):,} failed, {a.get('info', 0):,} "
         f"timed out, {a.get('unfinished', 0):,} unfinished"),
        ("contention (attempts per grant)", _ms(a.get("attempts_per_grant"))),
        ("renewals", f"{ren.get('attempts', 0):,}: {ren.get('ok', 0):,} ok, "
         f"{ren.get('not_owner', 0):,} refused (not owner), {ren.get('failed', 0):,} failed, "
         f"{ren.get('info', 0):,} timed out; failure rate {_pct(ren.get('failure_rate'))}"),
        ("expiries while working", f"{ew.get('lease_expired_exits', 0):,} exits on the lease "
         f"clock, {ew.get('not_owner_exits', 0):,} on a refused renewal; "
         f"{ew.get('outlived_lease', 0):,} holds outlived the holder's lease clock; "
         f"{ew.get('worked_after_refusal', 0):,} went on after a refused renewal"),
        ("exit reasons", ", ".join(f"{k} {v:,}" for k, v in
                                   (m.get("exit_reasons") or {}).items()) or "-"),
        ("TTL", f"{m.get('ttl_ms')} ms" if m.get("ttl_ms") else "-"),
        *(liveness_rows(m["liveness"]) if m.get("liveness") else []),
        *(leadership_rows(m["leadership"]) if m.get("leadership") else []),
    ]
    av = m.get("availability") or {}
    scopes = [("overall", av.get("overall") or {}), ("no fault", av.get("no_fault") or {})]
    scopes += [(f"under {k}", v) for k, v in (av.get("faults") or {}).items()]
    avail = table(["availability", "attempts", "granted", "answered", "grants/s", "seconds"], [
        [esc(label), f"{e.get('attempts', 0):,}", _pct(e.get("share")), _pct(e.get("answered")),
         _ms(e.get("grants_per_s")), _ms(e.get("seconds"))] for label, e in scopes],
        num_cols=(1, 2, 3, 4, 5))
    return (dists + table([], [[esc(k), esc(v)] for k, v in kv], cls="kv") + avail)


def _fault_table(windows: Sequence[FaultWindow], ops_t0: np.ndarray, ok: np.ndarray) -> str:
    if not windows:
        return '<p class="muted">No faults were injected.</p>'
    rows = []
    for w in windows[:MAX_FAULT_ROWS]:
        mask = (ops_t0 >= w.start) & (ops_t0 < w.end)
        n = int(mask.sum())
        share = f"{ok[mask].sum() / n * 100:.0f}% of {n:,}" if n else "-"
        rows.append([esc(w.fault), f"{w.start / 1e9:.3f}",
                     f"{w.end / 1e9:.3f}" + ("" if w.closed else " (never healed)"),
                     f"{w.seconds:.2f}", esc(w.detail), share])
    more = (f'<p class="muted small">and {len(windows) - MAX_FAULT_ROWS:,} more</p>'
            if len(windows) > MAX_FAULT_ROWS else "")
    return table(["fault", "start (s)", "end (s)", "duration (s)", "targets",
                  "acquires granted"], rows, num_cols=(1, 2, 3)) + more


def _value(v: Any) -> str:
    return "-" if v is None else v if isinstance(v, str) else json.dumps(v, default=str)


def _options(test: Mapping[str, Any]) -> str:
    # results_dir is where the machine that ran it wrote it, which a published page
    # need not tell (the page sits in the run's own folder)
    skip = {"versions", "argv", "extra", "results_dir"}
    rows = [[esc(k), f"<code>{esc(_value(v))}</code>"] for k, v in sorted(test.items())
            if k not in skip]
    vers = [[esc(k), f"<code>{esc(v)}</code>"] for k, v in (test.get("versions") or {}).items()]
    argv = test.get("argv")
    # argv[0] is wherever the entry point lives on the machine that ran it
    cmd = (f'<p class="small">Command: <code>'
           f'{esc(" ".join(["lockcheck", *(str(a) for a in argv[1:])]))}</code></p>'
           if isinstance(argv, list) and argv else "")
    return (f'<div class="cols"><div><h3>Options</h3>{table(["option", "value"], rows, cls="kv")}'
            f'</div><div><h3>Versions</h3>{table(["component", "version"], vers, cls="kv")}'
            f"{cmd}</div></div>")


def _files(run_dir: Path, html_links: Sequence[Path]) -> str:
    items: list[tuple[str, str]] = []
    for name, what in ((store.HISTORY, "every operation"),
                       (store.RESULTS, "checker results"),
                       (store.TEST, "options and versions"),
                       (store.RESOURCE, "the protected resource's writes"),
                       (store.LOG, "the controller's log")):
        # a published run has them compressed (`lockcheck check` reads the history so)
        for packed, how in (("", ""), (".xz", " (xz)"), (".gz", " (gzip)")):
            if (run_dir / (name + packed)).exists():
                items.append((name + packed, what + how))
    for sub, what in (("nodes", "server log"), ("workers", "client worker log")):
        d = run_dir / sub
        if d.is_dir():
            for p in sorted(d.rglob("*")):
                if p.is_file():
                    items.append((p.relative_to(run_dir).as_posix(), what))
    for p in html_links:
        rel = os.path.relpath(p, run_dir)
        items.append((Path(rel).as_posix(), "linearizability visualization of a failed key"))
    lis = "".join(f'<li><a href="{esc(href)}">{esc(href)}</a> <span class="muted">{esc(w)}'
                  "</span></li>" for href, w in items)
    return f"<ul>{lis}</ul>"


def _linearizable_html(run_dir: Path, ops: list[Op], test: dict[str, Any],
                       results: Mapping[str, Any]) -> list[Path]:
    """The visualization of a failed linearizability check: the one the check wrote, or
    one written now into the run's folder (bounded search)."""
    lin = (results.get("checkers") or {}).get("linearizable") or {}
    if lin.get("valid") is not False:
        return []
    listed = [Path(p) for p in lin.get("html") or [] if Path(p).exists()]
    if listed:
        return listed
    out_dir = run_dir / LINEARIZABLE_DIR
    existing = sorted(out_dir.glob("linearizable-*.html")) if out_dir.is_dir() else []
    if existing:
        return existing
    from lockcheck.checker.api import options_for
    from lockcheck.checker.linearizable import check_linearizable

    try:
        r = check_linearizable(ops, options_for(test, timeout=10.0, html_dir=out_dir))
    except Exception:  # a missing picture must not cost the report
        return []
    return [Path(p) for p in r.get("html") or []]


def _violation_list(viols: Sequence[Mapping[str, Any]]) -> str:
    if not viols:
        return '<p class="muted">No violations: nothing to mark.</p>'
    colors = {"overlap": "#c0392b", "lease": "#d35400", "stale-write": "#8e0000",
              "interleaved": "#a93226", "duplicate-fence": "#7f3c8d"}
    lis = []
    for i, v in enumerate(viols):
        t = v["band"][0] if v.get("band") else (v["marks"] or [0])[0]
        lis.append(f'<li data-v="{i}"><span class="kind" style="background:'
                   f'{colors.get(v["kind"], "#c0392b")}">{esc(v["kind"])}</span>'
                   f'<b>{esc(v["key"])}</b> at {t / 1e6:.3f} s: {esc(v["text"])}</li>')
    return (f'<p class="small muted">Checkers list at most 100 examples of each kind; click '
            f'one to zoom to it.</p><ol class="viols">{"".join(lis)}</ol>')


def _timeline_section(tl: Mapping[str, Any]) -> str:
    kinds: dict[str, int] = {}
    for v in tl["viols"]:
        kinds[v["kind"]] = kinds.get(v["kind"], 0) + 1
    # duplicate fences come by the hundred after a restart: listed, but not drawn at first
    checks = "".join(f'<label><input type="checkbox" data-kind="{esc(k)}"'
                     f'{"" if k == "duplicate-fence" else " checked"}> {esc(k)} ({n})</label>'
                     for k, n in sorted(kinds.items()))
    reasons = "".join(f'<span><span class="sw" style="background:{c}"></span>exit: {esc(r)}'
                      "</span>" for r, c in plots.REASON_COLORS.items() if r != "other")
    faults = "".join(f'<span><span class="sw" style="background:{c};opacity:.45"></span>'
                     f"{esc(n)}</span>" for n, c in zip(tl["fault_names"], tl["fault_colors"],
                                                        strict=True))
    marks = ('<span>▮ accepted write</span><span style="color:#1f9d55">▼ write refused by the '
             'fence (a save, or a fence regression)</span><span style="color:#8e0000">✕ stale '
             "write accepted</span>")
    return f"""
<h2 id="timeline">Timeline</h2>
<p class="small muted">Each key's holders, one lane per client worker, from grant to exit.
Shaded: fault windows. Red: violations. Drag to pan; double-click to zoom in (shift:
out); ctrl + wheel zooms; click the strip above to jump.</p>
<div class="tl-controls"><button id="tl-fit">fit</button><button id="tl-in">+</button>
<button id="tl-out">&minus;</button><button id="tl-prev">◀</button><button id="tl-next">▶</button>
<button id="tl-next-viol">next violation</button><span class="range" id="tl-range"></span></div>
<div class="tl-wrap"><canvas id="tl-overview"></canvas><canvas id="tl-main"></canvas>
<div id="tl-tip"></div></div>
<div class="legend">{reasons}{marks}{faults}</div>
<div class="legend">{checks}</div>
{_violation_list(tl["viols"])}"""


def render_report(run_dir: Path, test: dict[str, Any], ops: list[Op],
                  results: Mapping[str, Any], *, with_plots: bool = True) -> str:
    """The page as a string (see write_report)."""
    metrics = results.get("metrics")
    if not isinstance(metrics, dict) or "error" in metrics:
        metrics = compute_metrics(ops, test)
    windows = fault_windows(ops)
    colors = plots.fault_colors(sorted({w.fault for w in windows}))
    lock = lock_frame(ops)
    acq = lock[lock["f"] == "acquire"]
    sections = critical_sections(ops)
    t_end = max((o.time for o in ops), default=0)
    figs = [plots.latency_over_time(acq, windows, colors), plots.latency_distribution(acq),
            plots.throughput(acq, windows, colors, t_end),
            plots.hold_times(sections, windows, colors, metrics.get("ttl_ms")),
            plots.availability_bars(metrics.get("availability") or {}, colors)] \
        if with_plots else []
    tl = timeline_data(ops, results, windows, colors, sections)
    lin_html = _linearizable_html(run_dir, ops, test, results)

    valid = results.get("valid")
    name = test.get("name") or run_dir.parent.name
    nemesis = test.get("nemesis")
    nem = "+".join(nemesis) if isinstance(nemesis, list) and nemesis else "none"
    story = "".join(f"<p>{s}</p>" for s in findings(test, results, metrics))
    lin_links = ""
    if lin_html:  # the first failed key; the others are listed under Files
        more = f" (1 of {len(lin_html)} keys)" if len(lin_html) > 1 else ""
        lin_links = (f'<a href="{esc(Path(os.path.relpath(lin_html[0], run_dir)).as_posix())}">'
                     f"linearizability visualization{more}</a>")
    figures = "".join(f'<figure id="plot-{f.id}"><h3>{esc(f.title)}</h3><img alt="{esc(f.title)}"'
                      f' src="data:image/png;base64,{f.png_base64}"><figcaption>'
                      f"{esc(f.caption)}</figcaption></figure>" for f in figs) \
        if with_plots else ("<p class=\"muted\">The plots are left out of this published copy "
                            "to keep it small: <code>lockcheck check</code> on this folder "
                            "draws them.</p>")
    problems = "".join(f'<p class="muted small">warning: {esc(e)}</p>'
                       for e in results.get("errors") or [])
    if results.get("failure"):
        problems += f'<p><b>The harness failed mid-run:</b> {esc(results["failure"])}</p>'
    client = results.get("client") or {}
    problems = "".join(f'<p class="small">client <b>{esc(client.get("name"))}</b>: {esc(n)}</p>'
                       for n in client.get("notes") or []) + problems
    acq_total = (metrics.get("acquire") or {}).get("attempts", 0)
    resource = (f" · resource <b>{esc(test.get('resource', '?'))}</b>"
                if on_trial(str(test.get("workload"))) != "lock" else "")
    body = f"""
<header class="top"><h1>{esc(name)}</h1>{badge(valid, verdict_word(valid))}</header>
<p class="muted small">backend <b>{esc(test.get("backend", "?"))}</b> · workload
<b>{esc(test.get("workload", "?"))}</b> · nemesis <b>{esc(nem)}</b>{resource} ·
{esc(test.get("time_limit", "?"))} s · started
{esc(test.get("started", "?"))} · seed {esc(test.get("seed", "?"))} · run {esc(run_dir.name)}</p>
<p class="summary verdict-{verdict_class(valid)}">{esc(results.get("summary", ""))}</p>
<nav class="toc"><a href="#timeline">timeline</a><a href="#plots">plots</a>
<a href="#checkers">checkers</a><a href="#metrics">metrics</a><a href="#faults">faults</a>
<a href="#options">options</a><a href="#files">files</a>{lin_links}</nav>
{_tiles(results, metrics)}
<div class="thesis"><p><b>A lock is not a correctness mechanism unless the resource
enforces the fence.</b></p>{story}</div>
{problems}
{_timeline_section(tl)}
<h2 id="plots">Plots</h2>{figures}
<h2 id="checkers">Checkers</h2>{_checkers_table(results)}
<h2 id="metrics">Metrics</h2>{_metrics_table(metrics)}
<h2 id="faults">Faults</h2>{_fault_table(windows, acq["t0"].to_numpy(), (acq["type"] == "ok")
                                          .to_numpy())}
<h2 id="options">Options and versions</h2>{_options(test)}
<h2 id="files">Files</h2>{_files(run_dir, lin_html)}
<p class="muted small">{len(ops):,} history records, {acq_total:,} acquire attempts. Report
by lockcheck {esc(__version__)} at {esc(time.strftime("%Y-%m-%d %H:%M:%S %z"))}.</p>
"""
    data = {"timeline": tl, "reason_colors": plots.REASON_COLORS}
    return page(f"lockcheck: {name} ({verdict_word(valid)})", body, scripts=("report.js",),
                data=data)


def write_report(run_dir: Path, *, results: Mapping[str, Any] | None = None,
                 ops: list[Op] | None = None, with_plots: bool = True) -> Path:
    """Write `run_dir/report.html` and return its path.

    `results` and `ops` save a second read when the caller has them (the end of a run,
    `lockcheck check`); otherwise they come from the run's files. Raises BadInput for a
    folder that is not a run directory.
    """
    run_dir = Path(run_dir)
    if not store.is_run_dir(run_dir):
        raise BadInput(f"{run_dir}: not a run directory (no {store.HISTORY})")
    test = store.load_test(run_dir)
    if ops is None:
        ops = read_history_full(store.history_file(run_dir), allow_truncated=True).ops
    if results is None:
        results = load_results(run_dir, ops, test)
    out = run_dir / REPORT
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(render_report(run_dir, test, ops, results, with_plots=with_plots),
                   encoding="utf-8")
    os.replace(tmp, out)
    return out
