"""Shared test machinery: the `needs_root_netns` marker, the CLI runner, leftover checks.

Integration tests run the real `lockcheck` command as a subprocess (the way a user
does), in a temporary working directory, with `--results-dir` inside it. While the
command runs, a watcher thread learns the run id from `test.json` and the PIDs the
run registered in `/run/lockcheck/<id>.json`, so that afterwards we can check that
nothing the run started is still there, even though the registry file is gone.

The leftover checks only *look*. The only processes a test ever signals are the
controller subprocesses it started itself (by PID). Other engineers may run
lockcheck on the same machine at the same time: every check is scoped to the run
ids this test created.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from lockcheck.interrupts import interruptible
from lockcheck.syspath import add_system_dirs

# No per-example deadline: a timing target belongs in a benchmark, and on a shared,
# loaded machine a deadline only makes property tests flaky.
settings.register_profile("lockcheck", deadline=None)
settings.load_profile("lockcheck")

# root's tools (ip, iptables) live in /usr/sbin, which a cleared environment
# (env -i PATH=/usr/bin:/bin) leaves off its PATH; lockcheck's CLI adds it the same way
add_system_dirs(os.environ)

ROOT = Path(__file__).resolve().parents[1]
RUN_ID_RE = re.compile(r"^[0-9a-f]{6}$")
WORKER_MODULE = "lockcheck.workloads.worker"
KEEP_PATH_RE = re.compile(r'"keep_path": "([^"]+)"')


def state_dir() -> Path:
    return Path(os.environ.get("LOCKCHECK_STATE_DIR", "/run/lockcheck"))


# -- SIGINT in children the tests interrupt ---------------------------------------------

# A shell's `cmd &` (no job control) starts cmd with SIGINT ignored, and exec keeps an
# ignored signal ignored: a child we later interrupt would ignore the Ctrl-C it is
# tested with. lockcheck's own `interruptible` (which test-all uses for its cells)
# restores the default and execs the command, keeping its PID.
def sigint_default(argv: Sequence[str]) -> list[str]:
    """`argv` to start a child that a SIGINT stops, even if ours is ignored."""
    return interruptible(argv)


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process for the test (a background job's
    Python starts with SIGINT ignored and installs no handler)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def did_not_hang(timeout: float) -> float:
    """An upper bound on the time an operation with deadline `timeout` takes: twice it
    and a second. A loaded machine stretches any wait; a missing deadline is a hang, far
    longer. Which deadline fired is for the test to assert (its error's text)."""
    return 2 * timeout + 1.0


def wait_for(pred: Callable[[], bool], timeout: float, what: str,
             detail: Callable[[], str] = str, interval: float = 0.05) -> None:
    """Until `pred()` holds; fails naming `what` (and `detail()`) after `timeout` seconds.
    A test waits for the state it needs instead of sleeping for a time that a loaded
    machine stretches."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{detail()}")
        time.sleep(interval)


# -- the needs_root_netns marker --------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_root_netns: needs root, `ip netns`, redis-server and iptables "
        "(skipped with the reason otherwise; with CI set, failed)",
    )
    config.addinivalue_line(
        "markers",
        "detection: takes the first of several runs that shows a timing-dependent "
        "finding (tests/integration/detect.py); run last, one run at a time",
    )
    config.addinivalue_line(
        "markers",
        "alone: reads or changes what is machine-wide (runs killed on purpose, which any "
        "other run may reap first; every cluster `cluster down` removes; /dev/shm); "
        "scripts/test runs it after the parallel part, with the detection tests",
    )


_prereq_reason: list[str | None] = []


def missing_prerequisite() -> str | None:
    """Why a real cluster cannot be started here, or None if it can."""
    if not _prereq_reason:
        _prereq_reason.append(_why_no_cluster())
    return _prereq_reason[0]


def _why_no_cluster() -> str | None:
    from lockcheck.cluster.node import ForeignProc, check_proc

    try:
        check_proc()  # the leftover checks below read processes there too
    except ForeignProc as e:
        return str(e)
    if os.geteuid() != 0:
        return "needs root (lockcheck creates network namespaces); run pytest as root"
    for b in ("ip", "redis-server", "iptables"):
        if shutil.which(b) is None:
            return f"{b} not found on PATH (scripts/install installs it)"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns` does not work here: {r.stderr.strip()[:100]}"
    return None


# -- on CI a skip for a missing prerequisite is a failure ------------------------------

# the reasons a test may skip on CI too: a corpus that is not part of the repository,
# and a server this machine's distribution does not package (Valkey on Debian 12: CI's
# check of the newer release, scripts/release-check, runs it there)
SHARED_ONLY = "it ships in the project's shared/ folder only"
NOT_PACKAGED = "this distribution does not package it"
# and a server lockcheck refuses clock faults on, because it does not start under
# libfaketime on this system (Redis 8 on Debian 13: docs/releases.md)
NO_FAKE_CLOCK = "does not start under libfaketime on this system"


def on_ci() -> bool:
    """CI is set (CI=true, as CI services set it): a green run must prove something."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def ci_failure(reason: str) -> str | None:
    """What to fail with on CI instead of skipping for `reason` (None: the skip stands)."""
    if not on_ci() or any(r in reason for r in (SHARED_ONLY, NOT_PACKAGED, NO_FAKE_CLOCK)):
        return None
    return f"on CI a missing prerequisite is an error, not a skip: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    lr = report.longrepr
    reason = str(lr[2] if isinstance(lr, tuple) and len(lr) == 3 else lr)
    why = ci_failure(reason.removeprefix("Skipped: "))
    if why is not None:
        report.outcome = "failed"
        report.longrepr = why


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # detection tests last (a stable sort keeps each module's order): their runs then
    # compete with no other test's clusters, and a slow try delays nothing after it.
    # Before them, the modules with real clusters first: the parallel part (scripts/test)
    # hands out whole files in this order, and short unit files then fill the gaps at
    # its end instead of a long cluster module starting last
    def order(i: pytest.Item) -> tuple[bool, bool]:
        last = any(i.get_closest_marker(m) is not None for m in ("detection", "alone"))
        return last, i.get_closest_marker("integration") is None

    items.sort(key=order)
    marked = [i for i in items if i.get_closest_marker("needs_root_netns") is not None]
    if not marked:
        return
    reason = missing_prerequisite()
    if reason is None:
        return
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=f"needs_root_netns: {reason}"))


# -- detection runs: where they are logged, and the totals ---------------------------


@pytest.fixture(scope="session", autouse=True)
def _detections_log(tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.integration import detect

    os.environ[detect.LOG_ENV] = str(tmp_path_factory.getbasetemp() / "detections.jsonl")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.integration import detect

    path = detect.log_path()
    line = detect.summary(path) if path is not None else None
    if line is not None:
        terminalreporter.write_line(line)


# -- looking at the machine -------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def free_ports(n: int) -> list[int]:
    """`n` TCP ports free on loopback just now, for servers a test starts there."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def proc_cmdline(pid: int) -> str | None:
    raw = _read(f"/proc/{pid}/cmdline")
    return None if raw is None else raw.replace("\0", " ").strip()


def proc_cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def proc_start(pid: int) -> int | None:
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    try:
        return int(raw.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def proc_state(pid: int) -> str | None:
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    return raw.rsplit(")", 1)[1].split()[0]


def proc_alive(pid: int) -> bool:
    s = proc_state(pid)
    return s is not None and s not in ("Z", "X")


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def faketime_files(pids: Iterable[int]) -> list[Path]:
    """libfaketime's shared-memory files of these processes that are still there (not
    counting a PID that is now a live faked process's, reused: the files are its own)."""
    from lockcheck.cluster.faketime import runs_libfaketime

    return [p for pid in pids if not (proc_alive(pid) and runs_libfaketime(pid))
            for p in (Path(f"/dev/shm/faketime_shm_{pid}"),
                      Path(f"/dev/shm/sem.faketime_sem_{pid}")) if p.exists()]


def namespaces() -> list[str]:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def links() -> list[str]:
    r = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", r.stdout, re.M)]


def lockcheck_ids_on_host() -> set[str]:
    """Run ids that have anything on this machine (namespaces, bridges, dirs, registry)."""
    ids: set[str] = set()
    for ns in namespaces():
        m = re.match(r"^lc-([0-9a-f]{6})-", ns)
        if m:
            ids.add(m.group(1))
    for link in links():
        m = re.match(r"^lcb([0-9a-f]{6})$", link)
        if m:
            ids.add(m.group(1))
    for p in Path("/tmp").glob("lockcheck-*"):
        rid = p.name.removeprefix("lockcheck-")
        if RUN_ID_RE.match(rid):
            ids.add(rid)
    if state_dir().is_dir():
        for p in state_dir().glob("*.json"):
            if RUN_ID_RE.match(p.stem):
                ids.add(p.stem)
    return ids


class RunTrace:
    """What one run id touched, as far as the tests saw it."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.pids: dict[int, int | None] = {}  # pid -> start time when first seen
        self.seed: int | None = None
        self.cwd: str | None = None  # the controller's cwd (the workers inherit it)
        self.run_dir: str | None = None  # its results folder (the workers' keep_path)
        self.addresses: set[str] = set()

    def note_registry(self) -> None:
        raw = _read(str(state_dir() / f"{self.run_id}.json"))
        if raw is None:
            return
        try:
            st = json.loads(raw)
        except ValueError:
            return  # caught between writes; the next poll sees it
        for pid in st.get("pids", []):
            if isinstance(pid, int) and pid not in self.pids:
                self.pids[pid] = proc_start(pid)
        self.addresses.update(str(a) for a in st.get("nodes", {}).values())

    def process_leftovers(self) -> list[str]:
        out = []
        tmp = f"/tmp/lockcheck-{self.run_id}"
        for pid, start in self.pids.items():
            if proc_alive(pid) and (start is None or proc_start(pid) == start):
                out.append(f"registered pid {pid} still running: {proc_cmdline(pid)!r}")
        seen = set(self.pids)
        seed_text = f'"seed": {self.seed},' if self.seed is not None else None
        for pid in all_pids():
            if pid in seen or pid == os.getpid() or not proc_alive(pid):
                continue
            cmd, cwd = proc_cmdline(pid) or "", proc_cwd(pid) or ""
            mine = tmp in cmd or cwd.startswith(tmp)
            if not mine and WORKER_MODULE in cmd:
                keep = KEEP_PATH_RE.search(cmd)
                if keep is not None and self.run_dir is not None:
                    # the worker names its run's folder: the seed alone is shared by
                    # every run of a test with a fixed seed, another engineer's too
                    mine = keep.group(1).startswith(self.run_dir + os.sep)
                else:
                    mine = (self.cwd is not None and cwd == self.cwd) or (
                        seed_text is not None and seed_text in cmd
                    )
            if mine:
                out.append(f"process {pid} of run {self.run_id} still running: {cmd[:120]!r}")
        return out

    def leftovers(self) -> list[str]:
        rid = self.run_id
        out = [f"namespace {ns}" for ns in namespaces() if ns.startswith(f"lc-{rid}-")]
        out += [f"link {name}" for name in links() if name.startswith(f"lc{rid}") or
                name == f"lcb{rid}"]
        if Path(f"/tmp/lockcheck-{rid}").exists():
            out.append(f"directory /tmp/lockcheck-{rid}")
        for suffix in (".json", ".remote"):  # .remote: a docker or ssh run's whole state
            if (state_dir() / f"{rid}{suffix}").exists():
                out.append(f"registry file {state_dir() / f'{rid}{suffix}'}")
        out += self.process_leftovers()
        out += [f"libfaketime file {p}" for p in faketime_files(self.pids)]
        return out


# -- running the CLI --------------------------------------------------------------------


class CliResult(tuple[int, str, str, "Path | None"]):
    """(exit code, stdout, stderr, run dir), plus what the watcher saw."""

    traces: dict[str, RunTrace]  # run id -> what the run touched
    elapsed: float
    results_dir: Path | None
    cwd: Path
    tried: tuple[str, ...] = ()  # earlier runs of a detection (detect.first_showing)

    def __new__(cls, code: int, stdout: str, stderr: str, run_dir: Path | None,
                **extra: Any) -> CliResult:
        self = super().__new__(cls, (code, stdout, stderr, run_dir))
        self.__dict__.update(extra)
        return self

    @property
    def code(self) -> int:
        return self[0]

    @property
    def stdout(self) -> str:
        return self[1]

    @property
    def stderr(self) -> str:
        return self[2]

    @property
    def run_dir(self) -> Path | None:
        return self[3]

    def results(self) -> dict[str, Any]:
        assert self.run_dir is not None, f"no run dir; stderr:\n{self.stderr}"
        data: dict[str, Any] = json.loads((self.run_dir / "results.json").read_text())
        return data

    def test_json(self) -> dict[str, Any]:
        assert self.run_dir is not None, f"no run dir; stderr:\n{self.stderr}"
        data: dict[str, Any] = json.loads((self.run_dir / "test.json").read_text())
        return data

    def explain(self) -> str:
        before = "".join(f"earlier try: {t}\n" for t in self.tried)
        return (f"{before}exit {self[0]}\n--- stdout ---\n{self[1][-3000:]}\n"
                f"--- stderr ---\n{self[2][-5000:]}")


def _run_dirs(results_dir: Path) -> set[Path]:
    """Run folders (<backend>/<workload>/<nemesis>/<time>) and test-all records."""
    if not results_dir.is_dir():
        return set()
    return {p for pattern in ("*/*/*/*", "test-all/*") for p in results_dir.glob(pattern)
            if p.is_dir() and not p.is_symlink() and p.parent.name != "cells"
            and "test-all" not in p.parts[len(results_dir.parts):][1:]}


def partitions_open(ops: Sequence[Any]) -> int:
    """Partitions started and not healed, by the nemesis's own records."""
    nem = [o.f for o in ops if o.process == "nemesis" and o.type == "info"]
    return nem.count("start-partition") - nem.count("stop-partition")


class CliProcess:
    """A running `python -m lockcheck.cli ...`, in its own session, watched."""

    def __init__(self, cli: Cli, argv: list[str], cwd: Path, results_dir: Path | None,
                 env: dict[str, str] | None, user: Sequence[str] | None = None) -> None:
        self.cli = cli
        self.cwd = cwd
        self.results_dir = results_dir
        self.argv = [sys.executable, "-m", "lockcheck.cli", *argv]
        self.before = _run_dirs(results_dir) if results_dir else set()
        self.started = time.monotonic()
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.pop("PYTHONWARNINGS", None)
        if env is not None:
            full_env.update(env)
        self.popen = subprocess.Popen(
            sigint_default([*(user or []), *self.argv]), cwd=cwd, env=full_env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        cli.started_pids.append(self.pid)
        self.traces: dict[str, RunTrace] = {}
        self._stop = threading.Event()
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [
            threading.Thread(target=self._drain, args=(self.popen.stdout, self._out), daemon=True),
            threading.Thread(target=self._drain, args=(self.popen.stderr, self._err), daemon=True),
        ]
        for t in self._readers:
            t.start()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    @staticmethod
    def _drain(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    @property
    def stderr_so_far(self) -> str:
        return "".join(self._err)

    def _new_run_dirs(self) -> list[Path]:
        if self.results_dir is None:
            return []
        return sorted(_run_dirs(self.results_dir) - self.before, key=lambda p: p.name)

    def _poll_once(self) -> None:
        for d in self._new_run_dirs():
            raw = _read(str(d / "test.json"))
            if raw is None:
                continue
            try:
                test = json.loads(raw)
            except ValueError:
                continue
            rid = test.get("run_id")
            if isinstance(rid, str) and RUN_ID_RE.match(rid):
                tr = self.trace(rid)
                tr.seed = test.get("seed")
                tr.run_dir = str(d)
        for m in re.finditer(r"cluster ([0-9a-f]{6}) up", "".join(self._out)):
            self.trace(m.group(1))
        for tr in self.traces.values():
            tr.note_registry()

    def trace(self, rid: str) -> RunTrace:
        tr = self.traces.get(rid)
        if tr is None:
            tr = self.traces[rid] = self.cli.traces.setdefault(rid, RunTrace(rid))
            tr.cwd = str(self.cwd)
        return tr

    def _watch(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self._poll_once()
            if self.popen.poll() is not None:
                break
            self._stop.wait(0.05)

    def wait_for(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        """Until `pred()` holds while lockcheck runs (see the module's `wait_for`)."""
        def held() -> bool:
            if pred():
                return True
            if self.popen.poll() is not None:
                raise AssertionError(f"lockcheck exited before {what}:\n{self.stderr_so_far}")
            return False

        wait_for(held, timeout, what, lambda: self.stderr_so_far)

    def ops_so_far(self) -> list[Any]:
        """The ops of this run's history as far as it is written (the lines are flushed
        one by one; a line being written is left out)."""
        from lockcheck.history import HistoryError, read_history

        for d in self._new_run_dirs():
            with contextlib.suppress(OSError, HistoryError):
                return read_history(d / "history.jsonl", allow_truncated=True)
        return []

    def wait_for_ops(self, pred: Callable[[list[Any]], bool], timeout: float,
                     what: str) -> list[Any]:
        """Until `pred` holds for the history so far (a state the run reached, instead of a
        sleep that a loaded machine stretches); returns that history."""
        seen: list[list[Any]] = [[]]

        def reached() -> bool:
            seen[0] = self.ops_so_far()
            return pred(seen[0])

        self.wait_for(reached, timeout, what)
        return seen[0]

    def wait_for_partition(self, timeout: float = 60.0) -> list[Any]:
        """Until a partition is in place (started and not yet healed)."""
        return self.wait_for_ops(lambda ops: partitions_open(ops) > 0, timeout,
                                 "a partition in place")

    def wait_running(self, timeout: float = 30.0) -> RunTrace:
        """Until the run's workers are up (the registry lists the cluster's pids)."""
        def ready() -> bool:
            self._poll_once()
            return any(len(t.pids) >= 2 for t in self.traces.values())

        self.wait_for(ready, timeout, "the cluster and workers to start")
        return next(iter(self.traces.values()))

    def signal(self, sig: int) -> None:
        """Signal the controller only (by PID), never its process group."""
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float = 120.0) -> CliResult:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGINT)  # let it tear down, then make sure it is gone
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait()
            for t in self._readers:
                t.join(timeout=5)
            raise AssertionError(
                f"lockcheck {' '.join(self.argv[3:])} did not finish in {timeout}s:\n"
                + "".join(self._err)[-4000:]) from None
        self._stop.set()
        self._watcher.join(timeout=5)
        with contextlib.suppress(Exception):
            self._poll_once()
        for t in self._readers:
            t.join(timeout=10)
        out, err = "".join(self._out), "".join(self._err)
        return CliResult(self.popen.returncode, out, err, self._find_run_dir(err),
                         traces=dict(self.traces), elapsed=time.monotonic() - self.started,
                         results_dir=self.results_dir, cwd=self.cwd)

    def _find_run_dir(self, err: str) -> Path | None:
        m = re.search(r"^results: (.+)$", err, re.M) or re.search(r" -> (/.+)$", err, re.M)
        if m:
            p = Path(m.group(1).strip())
            if p.is_dir():
                return p
        new = self._new_run_dirs()
        return new[-1] if new else None


class Cli:
    """`cli("test", "--nemesis", "none")` runs lockcheck; `cli.start(...)` returns a handle."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.started_pids: list[int] = []
        self.traces: dict[str, RunTrace] = {}
        self.processes: list[CliProcess] = []

    def _argv(self, args: Sequence[str], results_dir: Path | None) -> tuple[list[str], Path | None]:
        argv = [str(a) for a in args]
        if argv and argv[0] == "test" and "--results-dir" not in argv:
            results_dir = results_dir or self.cwd / "results"
            argv += ["--results-dir", str(results_dir)]
        elif "--results-dir" in argv:
            results_dir = Path(argv[argv.index("--results-dir") + 1])
        return argv, results_dir

    def start(self, *args: Any, env: dict[str, str] | None = None,
              results_dir: Path | None = None, user: Sequence[str] | None = None,
              cwd: Path | None = None) -> CliProcess:
        argv, rdir = self._argv([str(a) for a in args], results_dir)
        p = CliProcess(self, argv, cwd or self.cwd, rdir, env, user)
        self.processes.append(p)
        return p

    def in_waves(self, waves: Sequence[Sequence[str]], argv: Callable[[str], Sequence[str]],
                 timeout: float) -> dict[str, CliResult]:
        """`lockcheck test` runs by name, a wave at a time: a wave's runs together (each
        has its own run id and subnet), the next wave once they have ended."""
        done: dict[str, CliResult] = {}
        for wave in waves:
            started = {name: self.start("test", *argv(name)) for name in wave}
            done.update({name: p.wait(timeout) for name, p in started.items()})
        return done

    def __call__(self, *args: Any, timeout: float = 120.0, env: dict[str, str] | None = None,
                 results_dir: Path | None = None, user: Sequence[str] | None = None,
                 cwd: Path | None = None) -> CliResult:
        return self.start(*args, env=env, results_dir=results_dir, user=user, cwd=cwd).wait(
            timeout)

    def leftovers(self, run_id: str | None = None) -> list[str]:
        ids = [run_id] if run_id else list(self.traces)
        out: list[str] = []
        for rid in ids:
            out += self.traces.get(rid, RunTrace(rid)).leftovers()
        return out

    def assert_no_leftovers(self, run_id: str | None = None, grace: float = 5.0) -> None:
        """Nothing of `run_id` (default: of every run this test started) is left.

        The kernel removes a deleted namespace's veth ends asynchronously, and a killed
        process takes a moment to go: what is still there after `grace` seconds is left.
        """
        if run_id is None and not self.traces:
            raise AssertionError("no lockcheck run was seen; nothing to check")
        deadline = time.monotonic() + grace
        while (problems := self.leftovers(run_id)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not problems, "left behind:\n  " + "\n  ".join(problems)

    def finish(self) -> None:
        """Test teardown: stop our controllers (by PID) and remove only our own runs."""
        for p in self.processes:
            if p.popen.poll() is None:
                p.signal(signal.SIGINT)
                try:
                    p.popen.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.signal(signal.SIGKILL)
                    p.popen.wait()
        for rid, tr in self.traces.items():
            if tr.leftovers():
                destroy_run(rid)


def destroy_run(run_id: str) -> None:
    """Remove one run's leftovers with lockcheck's own code (our run id only)."""
    from lockcheck.cluster.netns import destroy
    from lockcheck.cluster.state import Registry, RunState

    reg = Registry(state_dir())
    st = next((s for s in reg.all() if s.run_id == run_id), None)
    if st is None:
        st = RunState(run_id, "orphan", 0, None, "", f"lcb{run_id}", f"/tmp/lockcheck-{run_id}")
    st.namespaces = sorted(set(st.namespaces) |
                           {ns for ns in namespaces() if ns.startswith(f"lc-{run_id}-")})
    destroy(st, reg)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    """Runs `python -m lockcheck.cli` in tmp_path; see Cli and CliResult."""
    c = Cli(tmp_path)
    try:
        yield c
    finally:
        c.finish()


@pytest.fixture
def assert_no_leftovers(cli: Cli) -> Callable[[str | None], None]:
    """assert_no_leftovers(run_id or None): None checks every run the test's `cli` started."""
    return cli.assert_no_leftovers


@pytest.fixture(scope="module")
def module_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    """A Cli shared by a module, for runs that several tests look at."""
    c = Cli(tmp_path_factory.mktemp("runs"))
    try:
        yield c
    finally:
        c.finish()


# -- clock faults on Redis ---------------------------------------------------------------

_faked_redis: list[str | None] = []


def faked_redis_refusal() -> str | None:
    """Why redis-server cannot take clock faults here (None: it can): started as
    lockcheck starts it under libfaketime, on a socket of its own, it must answer."""
    if not _faked_redis:
        _faked_redis.append(_probe_faked_redis())
    return _faked_redis[0]


def _probe_faked_redis() -> str | None:
    import tempfile

    from lockcheck.cluster import faketime
    from lockcheck.db.redis import redis_version

    server = shutil.which("redis-server")
    if server is None or faketime.libfaketime() is None:
        return None  # the tests that need them say so themselves
    with tempfile.TemporaryDirectory(prefix="lc-faked-redis-") as d:
        clock, sock = Path(d) / "clock", Path(d) / "s.sock"
        clock.write_text(faketime.spec(0))
        env = {**os.environ, **faketime.env(clock, shim=True)}
        p = subprocess.Popen([server, "--port", "0", "--unixsocket", str(sock), "--save", "",
                              "--appendonly", "no", "--dir", d], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while p.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as c:
                    c.settimeout(0.5)
                    c.connect(str(sock))
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return None
                time.sleep(0.1)
            how = "crashed" if p.poll() is not None else "did not answer"
        finally:
            p.kill()
            p.wait()
            faketime.remove_shm([p.pid])  # libfaketime leaves them even after an exit
    return (f"redis-server {redis_version()} {NO_FAKE_CLOCK} (it {how} at start): lockcheck "
            "refuses clock faults on Redis here")


@pytest.fixture
def faked_redis() -> None:
    """Skips a test of clock faults on Redis where redis-server does not start under
    libfaketime (lockcheck refuses those runs there, tested in test_valkey/unit)."""
    why = faked_redis_refusal()
    if why is not None:
        pytest.skip(why)
