"""`lockcheck libraries`: every lock library lockcheck has an adapter for, put through
`client-check` and a short battery of faults, k of n runs per fault.

Per library and backend (a *pair*) this runs, each as a process of its own:

- `lockcheck client-check NAME --backend B`, whose step-by-step lines are kept;
- the battery (`BATTERY`) as one `test-all` matrix (`results/matrix.py`) with
  `--client NAME`, n runs per fault, so every run is an ordinary `lockcheck test`
  with its seed, history and teardown.

A fault the backend (or the machine) refuses is recorded with `runner.plan`'s one-line
reason and never run; a fault not in the nemesis registry (yet) is recorded as not
available. Each pair's results go to `<results-dir>/<pair>/`, with its record
`library.json` (`PairRecord`); `results/libraries.py` publishes those folders and writes
the page.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from lockcheck import exitcodes
from lockcheck.errors import BadInput
from lockcheck.interrupts import interruptible, sigterm_as_interrupt
from lockcheck.results import store

# the battery, in the page's column order; "reply-loss" runs once the nemesis exists
BATTERY = ("none", "client-pause", "partition", "reply-loss", "kill")
FAULT_TITLES = {"none": "no fault", "client-pause": "client pause", "partition": "partition",
                "reply-loss": "reply loss", "kill": "server restart"}
WORKLOAD = "mutex"
RECORD = "library.json"
CLIENT_CHECK_LOG = "client-check.log"
CLIENT_CHECK_TIMEOUT_S = 600.0
STEP_LINE = re.compile(r"^\s+(ok|note|FAIL)\s+(.+?): (.*)$")


@dataclass(frozen=True)
class Step:
    """One line of client-check: its mark (ok, note, FAIL), the step, what happened."""

    mark: str
    step: str
    detail: str


@dataclass
class ClientCheck:
    status: str  # passed, failed, refused, error, interrupted, not run
    steps: list[Step] = field(default_factory=list)
    summary: str = ""  # its last line: "no problems in 12.3 s", or why it did not run
    seconds: float = 0.0
    log: str | None = None  # relative to the pair's folder


@dataclass
class RunOutcome:
    status: str  # safe, unsafe, unknown, refused, error, interrupted
    seed: int | None = None
    run_dir: str | None = None  # relative to the pair's folder
    summary: str = ""
    page: str | None = None  # report.html or run.html, relative to the pair's folder


@dataclass
class FaultCell:
    fault: str
    state: str  # ran, refused, unavailable, not run
    reason: str = ""  # why refused or unavailable
    runs: list[RunOutcome] = field(default_factory=list)


@dataclass
class PairRecord:
    client: str  # the adapter's name (clients.py:CLIENTS)
    library: str  # its PyPI distribution
    version: str
    backend: str
    description: str = ""
    expect: str = ""
    client_check: ClientCheck = field(default_factory=lambda: ClientCheck("not run"))
    cells: list[FaultCell] = field(default_factory=list)
    runs: int = 0  # n asked per fault
    time_limit: float = 0.0
    started: str = ""
    finished: str = ""
    load: list[float] = field(default_factory=list)  # 1-minute load average: start, end

    @property
    def name(self) -> str:
        return pair_name(self.client, self.backend)

    def cell(self, fault: str) -> FaultCell | None:
        return next((c for c in self.cells if c.fault == fault), None)


def pair_name(client: str, backend: str) -> str:
    """The folder of a library on a backend: `tooz--redis`."""
    return f"{client}--{backend}"


def record_to_json(r: PairRecord) -> dict[str, Any]:
    return asdict(r)


def record_from_json(d: dict[str, Any]) -> PairRecord:
    cc = d.get("client_check") or {}
    check = ClientCheck(cc.get("status", "not run"),
                        [Step(**s) for s in cc.get("steps", [])], cc.get("summary", ""),
                        cc.get("seconds", 0.0), cc.get("log"))
    cells = [FaultCell(c["fault"], c["state"], c.get("reason", ""),
                       [RunOutcome(**r) for r in c.get("runs", [])])
             for c in d.get("cells", [])]
    keep = {k: d[k] for k in ("client", "library", "version", "backend", "description",
                              "expect", "runs", "time_limit", "started", "finished", "load")
            if k in d}
    return PairRecord(**keep, client_check=check, cells=cells)


def read_record(pair_dir: Path) -> PairRecord:
    return record_from_json(json.loads((pair_dir / RECORD).read_text()))


def write_record(pair_dir: Path, r: PairRecord) -> None:
    store.write_json(pair_dir / RECORD, record_to_json(r))


# -- what to run ---------------------------------------------------------------------------


def library_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def pairs(libraries: Sequence[str]) -> list[tuple[str, str]]:
    """(adapter, backend) for each adapter named (every one when none are), each of its
    backends; raises BadInput naming an unknown one."""
    from lockcheck.clients import CLIENTS

    bad = [n for n in libraries if n not in CLIENTS and
           not any(a.library == n for a in CLIENTS.values())]
    if bad:
        raise BadInput(f"unknown library {', '.join(map(repr, bad))}; available: "
                       f"{', '.join(CLIENTS)}")
    # an adapter's name picks that adapter; a library's name, each of its adapters
    chosen = [a for a in CLIENTS.values()
              if not libraries or a.name in libraries or
              (a.library in libraries and a.library not in CLIENTS)]
    return [(a.name, b) for a in chosen for b in a.backends]


def faults(names: Sequence[str]) -> list[str]:
    """The battery's faults asked for, in the battery's order (every one when none are);
    raises BadInput for a name outside the battery."""
    bad = [n for n in names if n not in BATTERY]
    if bad:
        raise BadInput(f"--faults: {', '.join(map(repr, bad))} is not in the battery; "
                       f"choose from {', '.join(BATTERY)}")
    return [f for f in BATTERY if not names or f in names]


def available(fault: str) -> bool:
    from lockcheck.nemesis.registry import NEMESES

    return fault == "none" or fault in NEMESES


def refusal(client: str, backend_name: str, fault: str) -> str | None:
    """Why `lockcheck test --client CLIENT --backend B --nemesis FAULT` would be refused
    before anything starts (runner.plan's one line), or None."""
    from lockcheck.backends import backend
    from lockcheck.runner import plan
    from lockcheck.spec import TestSpec

    try:
        b = backend(backend_name)
        plan(TestSpec(backend=b.name, client=client, nodes=b.default_nodes,
                      nemesis=() if fault == "none" else (fault,)))
    except BadInput as e:
        return str(e)
    return None


# -- client-check --------------------------------------------------------------------------


def parse_client_check(text: str) -> tuple[list[Step], str]:
    """client-check's output -> its steps and its last line."""
    steps: list[Step] = []
    last = ""
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        if m:
            steps.append(Step(m.group(1), m.group(2), m.group(3).strip()))
        elif line.strip():
            last = line.strip()
    return steps, last


def client_check_status(code: int | None, steps: Sequence[Step]) -> str:
    if code == 0:
        return "passed"
    if code == 1 and steps:
        return "failed"
    if code == exitcodes.BAD_INPUT:
        return "refused"
    if code == exitcodes.INTERRUPTED:
        return "interrupted"
    return "error"


def _stop(popen: subprocess.Popen[bytes], grace: float) -> None:
    from lockcheck.results.matrix import _stop as stop

    stop(popen, grace)


def run_client_check(client: str, backend_name: str, pair_dir: Path,
                     timeout: float = CLIENT_CHECK_TIMEOUT_S) -> ClientCheck:
    """`lockcheck client-check` as a process of its own (its teardown is its own), its
    output in the pair's client-check.log. A Ctrl-C asks it to stop, waits, re-raises."""
    log = pair_dir / CLIENT_CHECK_LOG
    argv = [sys.executable, "-m", "lockcheck.cli", "client-check", client,
            "--backend", backend_name]
    t0 = time.monotonic()
    with log.open("wb") as fh:
        popen = subprocess.Popen(interruptible(argv), stdin=subprocess.DEVNULL, stdout=fh,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        code: int | None
        try:
            code = popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(popen, 60)
            code = None
        except KeyboardInterrupt:
            _stop(popen, 120)
            raise
        finally:
            if popen.poll() is None:
                _stop(popen, 5)
    steps, last = parse_client_check(log.read_text(errors="replace"))
    if code is None:
        last = f"timed out after {timeout:g} s, stopped; {last}"
    return ClientCheck(client_check_status(code, steps), steps, last[:300],
                       round(time.monotonic() - t0, 1), CLIENT_CHECK_LOG)


# -- the battery ---------------------------------------------------------------------------


def run_battery(record: PairRecord, pair_dir: Path, fault_names: Sequence[str], *,
                count: int, time_limit: float, seed: int | None,
                cell_timeout: float | None, out: IO[str]) -> int:
    """The faults that can run, as one test-all matrix in the pair's folder; the cells
    of record filled in. Returns the matrix's exit code (130 when interrupted)."""
    from lockcheck.results.matrix import MATRIX_DIR, Cell, Matrix

    runnable: list[str] = []
    for f in fault_names:
        if not available(f):
            record.cells.append(FaultCell(f, "unavailable",
                                          f"the {f} fault is not in this lockcheck yet"))
            continue
        why = refusal(record.client, record.backend, f)
        if why is not None:
            record.cells.append(FaultCell(f, "refused", why))
        else:
            record.cells.append(FaultCell(f, "not run"))
            runnable.append(f)
    if not runnable:
        return exitcodes.VALID
    cells = [Cell(record.backend, WORKLOAD, f, r) for f in runnable
             for r in range(1, count + 1)]
    m = Matrix(pair_dir, store.new_run_dir(pair_dir, MATRIX_DIR), cells, time_limit, count,
               ["--client", record.client, "--no-report"], seed, cell_timeout)
    code = m.run(out)
    for res in m.results:
        c = record.cell(res.nemesis)
        if c is None:
            continue
        c.state = "ran"
        c.runs.append(RunOutcome(res.status, res.seed, res.run_dir, res.summary[:300]))
    return code


def run_pair(client: str, backend_name: str, root: Path, fault_names: Sequence[str], *,
             count: int, time_limit: float, seed: int | None, cell_timeout: float | None,
             out: IO[str]) -> tuple[PairRecord, int]:
    """client-check and the battery of one library on one backend, recorded in
    <root>/<pair>/library.json (the folder made anew)."""
    import shutil

    from lockcheck.clients import CLIENTS

    a = CLIENTS[client]
    pair_dir = root / pair_name(client, backend_name)
    if pair_dir.exists():
        shutil.rmtree(pair_dir)
    pair_dir.mkdir(parents=True)
    record = PairRecord(client, a.library, library_version(a.library), backend_name,
                        a.description, a.expect, runs=count, time_limit=time_limit,
                        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        load=[round(os.getloadavg()[0], 1)])
    out.write(f"\n== {client} {record.version} on {backend_name}: client-check\n")
    out.flush()
    code = exitcodes.VALID
    try:
        record.client_check = run_client_check(client, backend_name, pair_dir)
        cc = record.client_check
        out.write(f"client-check: {cc.status} ({cc.summary})\n")
        out.write(f"== {client} on {backend_name}: {', '.join(fault_names)}, "
                  f"{count} run(s) each\n")
        out.flush()
        code = run_battery(record, pair_dir, fault_names, count=count,
                           time_limit=time_limit, seed=seed, cell_timeout=cell_timeout,
                           out=out)
    except KeyboardInterrupt:
        if record.client_check.status == "not run":
            record.client_check.status = "interrupted"
        code = exitcodes.INTERRUPTED
    finally:
        record.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        record.load.append(round(os.getloadavg()[0], 1))
        write_record(pair_dir, record)
    return record, code


def summary_rows(records: Sequence[PairRecord], fault_names: Sequence[str]) -> list[list[str]]:
    """The terminal's summary: one row per pair, k/n unsafe per fault."""
    rows = [["library", "backend", "client-check", *fault_names]]
    for r in records:
        row = [f"{r.client} {r.version}", r.backend, r.client_check.status]
        for f in fault_names:
            c = r.cell(f)
            if c is None:
                row.append("-")
            elif c.state != "ran":
                row.append(c.state)
            else:
                decided = [x for x in c.runs if x.status in ("safe", "unsafe")]
                k = sum(1 for x in decided if x.status == "unsafe")
                extra = len(c.runs) - len(decided)
                row.append(f"{k}/{len(decided)} unsafe" + (f" +{extra}?" if extra else ""))
        rows.append(row)
    return rows


def format_rows(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows) + "\n"


def run_libraries(*, libraries: Sequence[str], fault_names: Sequence[str], count: int,
                  time_limit: float, results_dir: Path, seed: int | None,
                  cell_timeout: float | None, out: IO[str],
                  done: Callable[[PairRecord], None] = lambda r: None) -> int:
    """Every pair in turn; `done` is called with each pair's record. Exit code as
    test-all's: 1 if any run was unsafe, 130 if interrupted, 2 if any undecided."""
    chosen = pairs(libraries)
    names = faults(fault_names)
    if count < 1:
        raise BadInput("--runs must be at least 1")
    if time_limit <= 0:
        raise BadInput("--time-limit must be positive")
    root = results_dir.resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create the results folder {root}: {e.strerror or e}") from None
    records: list[PairRecord] = []
    codes: list[int] = []
    t0 = time.monotonic()
    with sigterm_as_interrupt():
        for client, backend_name in chosen:
            record, code = run_pair(client, backend_name, root, names, count=count,
                                    time_limit=time_limit, seed=seed,
                                    cell_timeout=cell_timeout, out=out)
            records.append(record)
            codes.append(code)
            if code == exitcodes.INTERRUPTED:
                break
            done(record)
    out.write("\n" + format_rows(summary_rows(records, names)))
    out.write(f"libraries: {len(records)} of {len(chosen)} library/backend pairs in "
              f"{(time.monotonic() - t0) / 60:.1f} min; results: {root}\n")
    out.flush()
    if exitcodes.INTERRUPTED in codes:
        return exitcodes.INTERRUPTED
    if exitcodes.INVALID in codes:
        return exitcodes.INVALID
    return exitcodes.UNKNOWN if any(c != exitcodes.VALID for c in codes) else \
        exitcodes.VALID


def pair_dirs(root: Path) -> list[Path]:
    """The pair folders under a results folder (those with a record)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / RECORD).is_file())
