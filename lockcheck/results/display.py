"""What a person watching the terminal sees: the live status of a run and of a
`test-all` matrix, and the end-of-run summary, drawn with rich.

On a terminal the status is redrawn in place; anywhere else (a CI log, a file) it is
a plain line every few seconds and at every change of phase, so logs stay readable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from lockcheck.results.progress import checker_detail, verdict_word

PHASES = ("setup", "starting", "running", "quiet", "recovery", "teardown", "checking")
VERDICT_STYLE = {"valid": "bold green", "INVALID": "bold red", "unknown": "bold yellow",
                 "safe": "bold green", "unsafe": "bold red", "error": "bold magenta",
                 "refused": "magenta", "interrupted": "yellow"}
PLAIN_EVERY_S = 5.0


@dataclass(frozen=True)
class RunStatus:
    elapsed_s: float
    time_limit_s: float
    phase: str  # one of PHASES
    ops: int
    by_type: Mapping[str, int]
    faults: int
    active: tuple[str, ...]  # descriptions of the faults active now
    violations: int  # an estimate while running (LiveStats); the checkers decide
    saves: int = 0  # writes the fenced resource refused so far (saves or fence regressions:
    # only the checker at the end tells them apart)


class RunDisplay(Protocol):
    def update(self, status: RunStatus, *, force: bool = False) -> None: ...
    def close(self) -> None: ...


def redraws(out: IO[str]) -> bool:
    """A terminal that can be drawn on in place: a tty, unless TERM says it is dumb (an
    editor's shell, say: it cannot move the cursor, so it gets the plain lines)."""
    return out.isatty() and os.environ.get("TERM", "").strip().lower() not in ("dumb",
                                                                              "unknown")


def _console(out: IO[str]) -> Console:
    live = redraws(out)
    # colour only where redrawn, and there as NO_COLOR says (rich reads it when None)
    return Console(file=out, force_terminal=live, no_color=None if live else True,
                   highlight=False, width=None if live else 120, soft_wrap=not live)


def status_line(title: str, s: RunStatus) -> str:
    bt = s.by_type
    active = ", ".join(s.active) if s.active else "none"
    saves = f" | writes refused {s.saves}" if s.saves else ""
    return (f"{title} [{s.elapsed_s:5.1f}s/{s.time_limit_s:g}s] {s.phase} | ops {s.ops} "
            f"(ok {bt.get('ok', 0)}, fail {bt.get('fail', 0)}, info {bt.get('info', 0)}) | "
            f"faults {s.faults} (active: {active}) | violations so far {s.violations}{saves}")


class PlainRunDisplay:
    """A line every PLAIN_EVERY_S seconds, at each new phase, and when forced."""

    def __init__(self, out: IO[str], title: str, every: float = PLAIN_EVERY_S) -> None:
        self.out, self.title, self.every = out, title, every
        self.last = -1e9
        self.phase: str | None = None

    def update(self, status: RunStatus, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and status.phase == self.phase and now - self.last < self.every:
            return
        self.last, self.phase = now, status.phase
        self.out.write(status_line(self.title, status) + "\n")
        self.out.flush()

    def close(self) -> None:
        self.out.flush()


class LiveRunDisplay:
    """A small panel redrawn in place (rich Live), four times a second at most."""

    def __init__(self, out: IO[str], title: str) -> None:
        self.title = title
        self.live = Live(Text(title), console=_console(out), refresh_per_second=4,
                         transient=False)
        self.live.start()

    def _render(self, s: RunStatus) -> Panel:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim", justify="right")
        grid.add_column()
        bar = ProgressBar(total=max(s.time_limit_s, 1e-9),
                          completed=min(s.elapsed_s, s.time_limit_s), width=40)
        grid.add_row("time", bar)
        grid.add_row("", Text.assemble(f"{s.elapsed_s:.1f}s of {s.time_limit_s:g}s, ",
                                       (s.phase, "bold")))
        bt = s.by_type
        grid.add_row("ops", f"{s.ops:,}  ok {bt.get('ok', 0):,}  fail {bt.get('fail', 0):,}  "
                            f"info {bt.get('info', 0):,}")
        active = Text(", ".join(s.active), style="bold yellow") if s.active else Text("none")
        grid.add_row("faults", Text.assemble(f"{s.faults} injected, active: ", active))
        vs = Text(str(s.violations), style="bold red" if s.violations else "green")
        tail = f"   writes refused so far {s.saves}" if s.saves else ""
        grid.add_row("violations", Text.assemble(vs, " so far (estimate)", tail))
        return Panel(grid, title=self.title, title_align="left", border_style="blue")

    def update(self, status: RunStatus, *, force: bool = False) -> None:
        self.live.update(self._render(status), refresh=force)

    def close(self) -> None:
        self.live.stop()


def make_run_display(out: IO[str], title: str) -> RunDisplay:
    """Live on a terminal, plain lines elsewhere (a dumb terminal too)."""
    return LiveRunDisplay(out, title) if redraws(out) else PlainRunDisplay(out, title)


# -- the end-of-run summary -----------------------------------------------------------------


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}{unit}"
    return f"{v:,}{unit}" if isinstance(v, int) else f"{v}{unit}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _table(title: str, *cols: tuple[str, str], header: bool = True) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
              title_style="bold", show_edge=False, show_header=header)
    for name, justify in cols:
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    return t


def checkers_table(results: Mapping[str, Any]) -> Table:
    t = _table("checkers", ("checker", "left"), ("verdict", "left"), ("time", "right"),
               ("details", "left"))
    for name, r in (results.get("checkers") or {}).items():
        word = verdict_word(r.get("valid"))
        t.add_row(name, Text(word, style=VERDICT_STYLE.get(word, "")),
                  f"{r.get('elapsed_s', 0):.2f}s", checker_detail(name, r))
    return t


def distributions_table(m: Mapping[str, Any]) -> Table:
    t = _table("latency and hold times (ms)", ("", "left"), ("count", "right"),
               ("p50", "right"), ("p95", "right"), ("p99", "right"), ("max", "right"))
    for label, d in (("acquire latency, granted", m.get("acquire_latency_ms") or {}),
                     ("acquire latency, every attempt", m.get("attempt_latency_ms") or {}),
                     ("hold time", m.get("hold_ms") or {}),
                     ("inside past the lease clock",
                      (m.get("expiries_while_working") or {}).get("overrun_ms") or {})):
        t.add_row(label, _fmt(d.get("count")), _fmt(d.get("p50")), _fmt(d.get("p95")),
                  _fmt(d.get("p99")), _fmt(d.get("max")))
    return t


def counts_table(m: Mapping[str, Any]) -> Table:
    t = _table("the lock at work", ("", "left"), ("", "left"), header=False)
    a, r = m.get("acquire") or {}, m.get("renewals") or {}
    ew = m.get("expiries_while_working") or {}
    t.add_row("acquire attempts", f"{_fmt(a.get('attempts'))}: {_fmt(a.get('ok'))} granted, "
              f"{_fmt(a.get('busy'))} busy, {_fmt(a.get('failed'))} failed, "
              f"{_fmt(a.get('info'))} timed out")
    t.add_row("contention", f"{_fmt(a.get('attempts_per_grant'))} attempts per grant")
    t.add_row("renewal failures", f"{_fmt(r.get('not_owner'))} refused, "
              f"{_fmt(r.get('failed'))} failed, {_fmt(r.get('info'))} timed out, of "
              f"{_fmt(r.get('attempts'))} ({_pct(r.get('failure_rate'))})")
    outlived = ew.get("outlived_lease", 0)
    t.add_row(Text("expiries while working", style="bold red" if outlived else ""),
              f"{_fmt(outlived)} holds outlived the holder's lease clock; "
              f"{_fmt(ew.get('lease_expired_exits'))} exits on the lease clock, "
              f"{_fmt(ew.get('not_owner_exits'))} on a refused renewal")
    av = m.get("availability") or {}
    scopes = [("overall", av.get("overall") or {}), ("no fault", av.get("no_fault") or {})]
    scopes += [(f"under {k}", v) for k, v in (av.get("faults") or {}).items()]
    for label, e in scopes:
        t.add_row(f"availability {label}", f"{_pct(e.get('share'))} granted, "
                  f"{_pct(e.get('answered'))} answered, of {_fmt(e.get('attempts'))} attempts")
    return t


def render_summary(results: Mapping[str, Any], out: IO[str]) -> None:
    """The end of a run: each checker's verdict, the metrics, the overall verdict line."""
    con = _console(out)
    con.print(checkers_table(results))
    con.print()
    m = results.get("metrics")
    if isinstance(m, dict) and "error" not in m:
        con.print(distributions_table(m))
        con.print()
        con.print(counts_table(m))
    elif isinstance(m, dict):
        con.print(f"metrics: {m['error']}")
    word = verdict_word(results.get("valid"))
    con.print()
    con.print(Text.assemble((word, VERDICT_STYLE.get(word, "")), f": {results.get('summary', '')}"))


# -- the matrix of test-all ------------------------------------------------------------------


@dataclass
class CellState:
    name: str
    verdict: str = "pending"  # pending, running, safe, unsafe, unknown, error, refused, ...
    seconds: float = 0.0
    note: str = ""
    since: float = 0.0  # when it started running


@dataclass
class MatrixDisplay:
    """Cells done and left, with their verdicts; live on a terminal, lines elsewhere."""

    out: IO[str]
    cells: list[CellState] = field(default_factory=list)
    live: Live | None = None
    started: float = field(default_factory=time.monotonic)

    @staticmethod
    def start(out: IO[str], names: Sequence[str]) -> MatrixDisplay:
        d = MatrixDisplay(out, [CellState(n) for n in names])
        if redraws(out):  # redrawn twice a second, so the running cell's time ticks
            d.live = Live(console=_console(out), refresh_per_second=2,
                          get_renderable=d._render)
            d.live.start()
        else:
            out.write(f"test-all: {len(names)} runs\n")
            out.flush()
        return d

    def _render(self) -> Panel:
        done = [c for c in self.cells if c.verdict not in ("pending", "running")]
        bar = ProgressBar(total=max(1, len(self.cells)), completed=len(done), width=40)
        t = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for c in self.cells:
            if c.verdict == "pending":
                continue
            style = VERDICT_STYLE.get(c.verdict, "cyan" if c.verdict == "running" else "")
            secs = now - c.since if c.verdict == "running" else c.seconds
            t.add_row(c.name, Text(c.verdict, style=style), f"{secs:.0f}s" if secs else "",
                      c.note)
        left = len(self.cells) - len(done)
        head = Text(f"{len(done)} done, {left} left, "
                    f"{time.monotonic() - self.started:.0f}s elapsed")
        top = Table.grid(padding=(0, 2))
        top.add_row(bar, head)
        return Panel(Group(top, t), title="lockcheck test-all", title_align="left",
                     border_style="blue")

    def set(self, i: int, verdict: str, seconds: float = 0.0, note: str = "") -> None:
        c = self.cells[i]
        c.verdict, c.seconds, c.note = verdict, seconds, note
        if verdict == "running":
            c.since = time.monotonic()
        if self.live is not None:
            self.live.refresh()
            return
        done = sum(1 for x in self.cells if x.verdict not in ("pending", "running"))
        if verdict == "running":
            self.out.write(f"[{done + 1}/{len(self.cells)}] {c.name} ...\n")
        else:
            self.out.write(f"[{done}/{len(self.cells)}] {c.name}: {verdict} ({seconds:.0f}s)"
                           + (f" {note}" if note else "") + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
