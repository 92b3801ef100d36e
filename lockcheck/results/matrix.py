"""`lockcheck test-all`: a matrix of tests, one `lockcheck test` subprocess per run.

Each run is its own process, so a crash or a hang of one cannot take the matrix
down; its output goes to a log file. The matrix is recorded as it goes in
`<results>/test-all/<timestamp>/matrix.json` (with the logs in `cells/`), so a
matrix that was itself interrupted still says what ran. Every run gets an explicit
seed (recorded there and in its test.json). `--shard I/N` runs the I-th of N
deterministic slices of the cells x runs, so N machines together run the whole
matrix and `lockcheck compare` merges their folders. A run's verdict comes from
its exit code (0 safe, 1 unsafe, 2 unknown, 254 refused, anything else an error) and
from its results.json when it wrote one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from lockcheck import exitcodes
from lockcheck.errors import BadInput
from lockcheck.interrupts import interruptible, sigterm_as_interrupt
from lockcheck.results import store
from lockcheck.results.display import MatrixDisplay

# the published comparison's matrix, written once: scripts/comparison and the nightly
# workflow run it (tests/reports/test_nightly.py checks them against these), and
# test-all runs these faults and workloads when given none
PUBLISHED_BACKENDS = ("redis", "redlock", "zookeeper", "etcd", "postgres", "redis-sentinel",
                      "consul", "dynamodb", "azure-blob", "gcs")
PUBLISHED_FENCED_VARIANT = "redlock-fenced"  # run in the fenced workload only
DEFAULT_NEMESES = ("none", "partition", "kill", "pause", "client-pause")
DEFAULT_WORKLOADS = ("mutex", "fenced")

MATRIX = "matrix.json"
MATRIX_DIR = "test-all"
STATUS_FOR_CODE = {exitcodes.VALID: "safe", exitcodes.INVALID: "unsafe",
                   exitcodes.UNKNOWN: "unknown", exitcodes.BAD_INPUT: "refused",
                   exitcodes.INTERRUPTED: "interrupted"}


def split_names(values: Sequence[str]) -> list[str]:
    """`--nemeses "none kill" --nemeses pause,partition` -> [none, kill, pause, partition]."""
    out: list[str] = []
    for v in values:
        for part in v.replace(",", " ").split():
            if part not in out:
                out.append(part)
    return out


@dataclass(frozen=True)
class Cell:
    backend: str
    workload: str
    nemesis: str  # one nemesis, or several joined by "+" (run together)
    run: int = 1  # 1..runs

    @property
    def name(self) -> str:
        return f"{self.backend}-{self.workload}-{self.nemesis}"

    def label(self, count: int) -> str:
        return self.name + (f" #{self.run}" if count > 1 else "")


def plan(backends: Sequence[str], workloads: Sequence[str], nemeses: Sequence[str],
         count: int) -> list[Cell]:
    """Backend by backend (a new cluster kind once), each workload, each nemesis."""
    return [Cell(b, w, n, r) for b in backends for w in workloads for n in nemeses
            for r in range(1, count + 1)]


def parse_shard(text: str | None) -> tuple[int, int]:
    """`--shard 2/3` -> (2, 3); None -> (1, 1)."""
    if text is None:
        return 1, 1
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise BadInput(f"--shard {text!r}: expected I/N, for example 1/2") from None
    if not 1 <= i <= n:
        raise BadInput(f"--shard {text!r}: I must be between 1 and N")
    return i, n


def shard(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The index-th (1-based) of count slices: every count-th item of the plan, so each
    slice gets a share of every backend and the slices together are the plan."""
    return [c for k, c in enumerate(cells) if k % count == index - 1]


def known_names() -> tuple[set[str], set[str], set[str]]:
    """(backends, workloads, nemeses) the `test` command accepts."""
    from lockcheck.backends import BACKENDS
    from lockcheck.nemesis.registry import NEMESES
    from lockcheck.workloads.registry import WORKLOADS

    return set(BACKENDS), set(WORKLOADS), {"none", *NEMESES}


def default_backends() -> list[str]:
    """test-all's backends when none are given: every backend of a lock service, not
    lockcheck's own server (`Backend.own_server`, for a first try without root)."""
    from lockcheck.backends import BACKENDS

    return sorted(n for n, b in BACKENDS.items() if not b.own_server)


def validate(backends: Sequence[str], workloads: Sequence[str], nemeses: Sequence[str]) -> None:
    kb, kw, kn = known_names()
    for what, names, known in (("backend", backends, kb), ("workload", workloads, kw)):
        bad = [n for n in names if n not in known]
        if bad:
            raise BadInput(f"unknown {what} {', '.join(map(repr, bad))}; available: "
                           f"{', '.join(sorted(known))}")
    for n in nemeses:
        parts = n.split("+")
        bad = [p for p in parts if p not in kn]
        if bad:
            raise BadInput(f"unknown nemesis {', '.join(map(repr, bad))}; available: "
                           f"{', '.join(sorted(kn))} (join several with +)")
        if "none" in parts and len(parts) > 1:
            raise BadInput(f"nemesis {n!r}: none cannot be combined with other faults")
    if not (backends and workloads and nemeses):
        raise BadInput("the matrix is empty: give at least one backend, workload and nemesis")


@dataclass
class CellResult:
    backend: str
    workload: str
    nemesis: str
    run: int
    status: str  # safe, unsafe, unknown, refused, error, interrupted, pending
    exit_code: int | None = None
    seconds: float = 0.0
    log: str | None = None  # relative to the results folder
    run_dir: str | None = None  # relative to the results folder
    valid: Any = None
    summary: str = ""
    command: list[str] = field(default_factory=list)
    seed: int | None = None


def _run_dirs(root: Path) -> set[Path]:
    return set(store.run_dirs(root))


def _find_run_dir(root: Path, before: set[Path], cell: Cell) -> Path | None:
    """The run folder this cell's test created (new since it started, same options)."""
    new = sorted(_run_dirs(root) - before, key=lambda p: p.stat().st_mtime)
    for d in reversed(new):
        try:
            test = json.loads((d / store.TEST).read_text())
        except (OSError, ValueError):
            continue
        if test.get("backend") == cell.backend and test.get("workload") == cell.workload:
            return d
    return None


def _stop(popen: subprocess.Popen[bytes], grace: float) -> None:
    """Ask the test to stop (SIGINT: it heals and tears down), kill it if it will not."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(popen.pid, signal.SIGINT)
        try:
            popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(popen.pid, signal.SIGKILL)
            popen.wait()


@dataclass
class Matrix:
    root: Path  # the results folder
    record_dir: Path  # <root>/test-all/<timestamp>
    cells: list[Cell]
    time_limit: float
    count: int
    pass_through: list[str]
    seed: int | None = None
    cell_timeout: float | None = None
    shard: tuple[int, int] = (1, 1)
    seeds: dict[Cell, int] = field(default_factory=dict)
    results: list[CellResult] = field(default_factory=list)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    def seed_of(self, cell: Cell) -> int:
        """With --seed, that seed + run - 1 (the same for every cell); without, a random
        one per run. Either way it is passed to the run, so it is recorded."""
        if cell not in self.seeds:
            self.seeds[cell] = (self.seed + cell.run - 1 if self.seed is not None
                                else random.randrange(2**31))
        return self.seeds[cell]

    def command(self, cell: Cell) -> list[str]:
        return [sys.executable, "-m", "lockcheck.cli", "test", "--backend", cell.backend,
                "--workload", cell.workload, "--nemesis", cell.nemesis.replace("+", ","),
                "--time-limit", f"{self.time_limit:g}", "--results-dir", str(self.root),
                *self.pass_through, "--seed", str(self.seed_of(cell))]

    def save(self, exit_code: int | None = None) -> None:
        data = {"started": self.started, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                # the command as typed, without the path it was installed at
                "argv": ["lockcheck", *sys.argv[1:]], "time_limit": self.time_limit,
                "runs": self.count, "shard": f"{self.shard[0]}/{self.shard[1]}",
                "pass_through": self.pass_through, "seed": self.seed,
                "backends": sorted({c.backend for c in self.cells}, key=self._order("backend")),
                "workloads": sorted({c.workload for c in self.cells},
                                    key=self._order("workload")),
                "nemeses": sorted({c.nemesis for c in self.cells}, key=self._order("nemesis")),
                "cells": [asdict(r) for r in self.results], "exit_code": exit_code}
        store.write_json(self.record_dir / MATRIX, data)

    def _order(self, attr: str) -> Any:
        first = {getattr(c, attr): i for i, c in reversed(list(enumerate(self.cells)))}
        return lambda v: first[v]

    def run_cell(self, i: int, cell: Cell) -> CellResult:
        logs = self.record_dir / "cells"
        logs.mkdir(exist_ok=True)
        log = logs / f"{i + 1:03d}-{cell.name}-{cell.run}.log"
        argv = self.command(cell)
        result = CellResult(cell.backend, cell.workload, cell.nemesis, cell.run, "error",
                            log=os.path.relpath(log, self.root),
                            command=["lockcheck", *_relative(argv[3:], self.root)],
                            seed=self.seed_of(cell))
        before = _run_dirs(self.root)
        t0 = time.monotonic()
        timeout = self.cell_timeout or self.time_limit * 2 + 300
        with log.open("wb") as fh:
            fh.write(("$ " + " ".join(result.command) + "\n").encode())
            fh.flush()
            # its own session: a Ctrl-C at the terminal reaches test-all, which then asks
            # the running test to stop (and waits for its teardown); SIGINT at its default
            # even under `nohup`, or that request would be ignored
            popen = subprocess.Popen(interruptible(argv), stdin=subprocess.DEVNULL, stdout=fh,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            timed_out = ""
            try:
                code: int | None = popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop(popen, 60)
                code = None
                timed_out = f"timed out after {timeout:g} s, stopped"
            except KeyboardInterrupt:
                _stop(popen, 120)
                result.status, result.exit_code = "interrupted", popen.returncode
                result.seconds = round(time.monotonic() - t0, 1)
                self.results.append(result)  # recorded, then the matrix stops
                raise
            finally:
                if popen.poll() is None:
                    _stop(popen, 5)
        result.seconds = round(time.monotonic() - t0, 1)
        result.exit_code = code if code is not None else popen.returncode
        if code is not None:
            result.status = STATUS_FOR_CODE.get(code, "error")
        run_dir = _find_run_dir(self.root, before, cell)
        if run_dir is not None:
            result.run_dir = os.path.relpath(run_dir, self.root)
            with contextlib.suppress(OSError, ValueError):
                res = json.loads((run_dir / store.RESULTS).read_text())
                result.valid, result.summary = res.get("valid"), str(res.get("summary", ""))
        if not result.summary:
            result.summary = _last_line(log)
        if timed_out:
            result.summary = f"{timed_out}; {result.summary}"
        return result

    def run(self, out: IO[str]) -> int:
        labels = [c.label(self.count) for c in self.cells]
        display = MatrixDisplay.start(out, labels)
        self.save()
        interrupted = False
        try:
            with sigterm_as_interrupt():
                for i, cell in enumerate(self.cells):
                    display.set(i, "running")
                    try:
                        r = self.run_cell(i, cell)
                    except KeyboardInterrupt:
                        interrupted = True
                        display.set(i, "interrupted")
                        break
                    self.results.append(r)
                    note = "" if r.status in ("safe", "unsafe", "unknown") else r.summary[:80]
                    display.set(i, r.status, r.seconds, note)
                    self.save()
        finally:
            display.close()
        code = exit_code([r.status for r in self.results], interrupted)
        self.save(code)
        return code


def _relative(argv: Sequence[str], root: Path) -> list[str]:
    """The results folder as `.` in a recorded command: a published record names no
    path of the machine that made it."""
    return ["." if a == str(root) else a for a in argv]


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def exit_code(statuses: Sequence[str], interrupted: bool = False) -> int:
    """1 if any run was unsafe; 130 if interrupted; 254 if every run was refused (bad
    arguments); 2 if any was unknown, refused or an error; else 0."""
    if "unsafe" in statuses:
        return exitcodes.INVALID
    if interrupted:
        return exitcodes.INTERRUPTED
    if statuses and all(s == "refused" for s in statuses):
        return exitcodes.BAD_INPUT
    if any(s != "safe" for s in statuses) or not statuses:
        return exitcodes.UNKNOWN
    return exitcodes.VALID


def run_test_all(*, backends: Sequence[str], workloads: Sequence[str], nemeses: Sequence[str],
             count: int, time_limit: float, results_dir: Path, pass_through: list[str],
             seed: int | None, cell_timeout: float | None, out: IO[str],
             shard_spec: str | None = None) -> int:
    validate(backends, workloads, nemeses)
    if count < 1:
        raise BadInput("--runs must be at least 1")
    part = parse_shard(shard_spec)
    if time_limit <= 0:
        raise BadInput("--time-limit must be positive")
    root = results_dir.resolve()
    try:
        record_dir = store.new_run_dir(root, MATRIX_DIR)
    except OSError as e:
        raise BadInput(f"cannot create the results folder under {root}: "
                       f"{e.strerror or e}") from None
    cells = shard(plan(backends, workloads, nemeses, count), *part)
    m = Matrix(root, record_dir, cells, time_limit, count, pass_through, seed, cell_timeout,
               part)
    code = m.run(out)
    counts: dict[str, int] = {}
    for r in m.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    out.write(f"test-all: {', '.join(f'{n} {s}' for s, n in counts.items()) or 'nothing ran'}; "
              f"matrix: {record_dir / MATRIX}\n")
    out.write(f"compare them with: lockcheck compare {results_dir}\n")
    return code
