"""One test run: cluster up, workers and nemesis, history, teardown, check, summary.

Every step that creates something is undone in a `finally`, in order: the nemesis
heals, workers stop, the history is closed (it is complete on disk already), servers
stop, namespaces and the bridge go. Ctrl-C and SIGTERM take the same path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import platform
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lockcheck import __version__
from lockcheck.checker.analyze import analyze
from lockcheck.cluster.netns import LocalCluster, cleanup_leftovers, pick_subnet
from lockcheck.cluster.node import Daemon
from lockcheck.cluster.redis import RedisService, redis_version
from lockcheck.cluster.state import Registry
from lockcheck.errors import BadInput
from lockcheck.history import HistoryWriter, read_history_full
from lockcheck.locks.backends import BACKENDS, key_names
from lockcheck.nemesis.api import Nemesis
from lockcheck.nemesis.partition import Partition
from lockcheck.nemesis.process import Kill, Pause
from lockcheck.nemesis.schedule import NemesisSchedule
from lockcheck.preflight import require_for_test
from lockcheck.results import store
from lockcheck.results.progress import LiveStats, Progress, summary_table, verdict_word
from lockcheck.spec import TestSpec, validate
from lockcheck.workloads.lockloop import WorkerConfig
from lockcheck.workloads.resource import ResourceServer

log = logging.getLogger("lockcheck")


@dataclass
class RunOutcome:
    run_dir: Path
    valid: object
    results: dict[str, Any]
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    failure: str | None = None  # the harness itself failed mid-run (the history is kept)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM takes the Ctrl-C path, so a killed run still tears down."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """While tearing down, a second Ctrl-C must not leave half a cluster behind."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def versions(spec: TestSpec) -> dict[str, str]:
    import redis as redis_py

    v = {"lockcheck": __version__, "python": platform.python_version(),
         "kernel": platform.release()}
    if BACKENDS[spec.backend].service == "redis":
        v["redis-server"] = redis_version()
        v["redis-py"] = redis_py.__version__
    return v


class WorkerHandle:
    """A client worker process and the thread that copies its ops into the history."""

    def __init__(self, daemon: Daemon, writer: HistoryWriter, stats: LiveStats) -> None:
        self.daemon, self.writer, self.stats = daemon, writer, stats
        self.bad_lines = 0
        self.thread = threading.Thread(target=self._pump, name=f"pump-{daemon.name}",
                                       daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        popen = self.daemon.popen
        assert popen is not None and popen.stdout is not None
        for raw in popen.stdout:
            try:
                op = json.loads(raw)
            except ValueError:
                self.bad_lines += 1
                continue
            if not isinstance(op, dict):
                continue
            self.stats.observe(self.writer.append(op))

    def ask_to_stop(self) -> None:
        popen = self.daemon.popen
        if popen is not None and popen.stdin is not None:
            with contextlib.suppress(OSError):
                popen.stdin.close()


def start_services(spec: TestSpec, cluster: LocalCluster, run_dir: Path) -> list[RedisService]:
    services = []
    for node in cluster.nodes:
        svc = RedisService(node=node, workdir=cluster.workdir / node.name,
                           log_path=run_dir / "nodes" / node.name / "redis.log")
        svc.start()
        services.append(svc)
    return services


def make_nemeses(spec: TestSpec, cluster: LocalCluster,
                 services: list[RedisService]) -> list[Nemesis]:
    out: list[Nemesis] = []
    for name in spec.nemesis:
        if name == "partition":
            out.append(Partition(list(cluster.nodes), list(cluster.clients)))
        elif name == "kill":
            out.append(Kill(list(services)))
        elif name == "pause":
            out.append(Pause(list(services)))
    return out


def setup_logging(run_dir: Path) -> logging.Handler:
    h = logging.FileHandler(run_dir / store.LOG)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("lockcheck")
    root.addHandler(h)
    root.setLevel(logging.INFO)
    return h


def run_test(spec: TestSpec, *, out: IO[str] = sys.stderr,
             registry: Registry | None = None) -> RunOutcome:
    spec = validate(spec)
    backend = BACKENDS[spec.backend]
    require_for_test(backend.service)
    if spec.subnet is not None:
        pick_subnet(spec.subnet)  # a bad or busy --subnet is refused before anything exists
    registry = registry or Registry()
    cleaned = cleanup_leftovers(registry)
    if cleaned:
        out.write(f"cleaned up leftovers of earlier runs: {', '.join(cleaned)}\n")
    # absolute: servers chdir into their data dirs, and their log paths must still hold
    results_root = Path(spec.results_dir).resolve()
    try:
        run_dir = store.new_run_dir(results_root, spec.name)
    except OSError as e:
        raise BadInput(f"cannot create the results folder under {results_root}: "
                       f"{e.strerror or e}") from None
    handler = setup_logging(run_dir)
    try:
        return _run(spec, run_dir, out, registry)
    finally:
        logging.getLogger("lockcheck").removeHandler(handler)
        handler.close()


def _run(spec: TestSpec, run_dir: Path, out: IO[str], registry: Registry) -> RunOutcome:
    test = spec.to_json()
    test["versions"] = versions(spec)
    test["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    test["argv"] = sys.argv
    cluster = LocalCluster(spec.nodes, spec.concurrency, registry, subnet=spec.subnet,
                           kind="cluster" if spec.leave_running else "test")
    test["run_id"] = cluster.run_id
    store.write_json(run_dir / store.TEST, test)
    writer = HistoryWriter(run_dir / store.HISTORY)
    stats = LiveStats()
    progress = Progress(out)
    services: list[RedisService] = []
    workers: list[WorkerHandle] = []
    schedule: NemesisSchedule | None = None
    resource: ResourceServer | None = None
    interrupted = False
    failure: str | None = None
    errors: list[str] = []
    rng = random.Random(spec.seed)
    out.write(f"lockcheck {spec.name}: {spec.nodes} node(s), {spec.concurrency} clients, "
              f"{spec.keys} key(s), {spec.time_limit:g}s -> {run_dir}\n")
    try:
        with sigterm_as_interrupt():
            t_up = time.monotonic()
            cluster.up()
            services = start_services(spec, cluster, run_dir)
            log.info("cluster %s up in %.2fs: %s", cluster.run_id, time.monotonic() - t_up,
                     cluster.state.nodes if cluster.state else {})
            t0 = time.monotonic_ns()
            if spec.workload == "fenced":
                resource = ResourceServer(cluster.workdir / "resource.sock",
                                          run_dir / store.RESOURCE, spec.resource, t0).start()
            keys = key_names(spec.keys)
            for i, client in enumerate(cluster.clients):
                cfg = WorkerConfig(
                    worker=i, concurrency=spec.concurrency, backend=spec.backend,
                    workload=spec.workload, nodes=[(s.address, s.port) for s in services],
                    keys=keys, ttl_ms=spec.ttl_ms, hold_ms=spec.hold_ms, seed=spec.seed,
                    t0_ns=t0, op_timeout_s=spec.op_timeout_s, drift=spec.clock_drift,
                    resource_socket=str(resource.socket_path) if resource else None)
                d = client.spawn(f"worker-{i}",
                                 [sys.executable, "-m", "lockcheck.workloads.lockloop",
                                  cfg.to_json()],
                                 log_path=run_dir / "workers" / f"{client.name}.log",
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                workers.append(WorkerHandle(d, writer, stats))

            def record(type_: str, f: str, value: Any) -> None:
                writer.append({"time": time.monotonic_ns() - t0, "process": "nemesis",
                               "type": type_, "f": f, "key": None, "value": value})

            start = time.monotonic()
            end = start + spec.time_limit
            quiet = min(spec.quiet, spec.time_limit / 4)
            nemeses = make_nemeses(spec, cluster, services)
            schedule = NemesisSchedule(nemeses, interval=spec.nemesis_interval,
                                       restart_delay=spec.restart_delay, until=end - quiet,
                                       rng=rng, record=record)
            schedule.start()
            while (now := time.monotonic()) < end:
                active = schedule.active.name if schedule.active else "none"
                progress.update(
                    f"[{now - start:5.1f}s/{spec.time_limit:g}s] ops {stats.ops} | "
                    f"faults {schedule.faults} (active: {active}) | "
                    f"violations so far {stats.violations}")
                if now >= end - quiet and schedule.is_alive():
                    schedule.finish()  # heal before the quiet phase
                if schedule.error is not None:
                    raise RuntimeError(f"nemesis failed: {schedule.error}")
                if all(not w.daemon.alive() for w in workers):
                    errors.append("every worker exited early; see workers/*.log")
                    break
                time.sleep(0.1)
            progress.update(f"[{time.monotonic() - start:5.1f}s] ops {stats.ops} | faults "
                            f"{schedule.faults} | violations so far {stats.violations}",
                            force=True)
    except KeyboardInterrupt:
        interrupted = True
    except Exception as e:
        # the evidence so far is still checked and kept; the CLI reports the failure
        log.exception("run failed")
        failure = f"{type(e).__name__}: {e}"
    finally:
        progress.done()
        with no_interrupts():
            errors += teardown(spec, cluster, schedule, workers, services, resource, writer)
    if interrupted:
        out.write("interrupted: faults healed, cluster removed; checking what was recorded\n")
    read = read_history_full(run_dir / store.HISTORY, allow_truncated=True)
    results = analyze(read.ops, test)
    errors += worker_exit_problems(workers)
    if failure is not None:
        results["failure"] = failure
        if results["valid"] is True:
            results["valid"] = "unknown"  # a run cut short by a harness error proves nothing
    results["interrupted"] = interrupted
    results["errors"] = errors
    results["stats"] = {"ops": len(read.ops), "by_type": stats.by_type,
                        "faults": schedule.faults if schedule else 0,
                        "saves": stats.saves}
    store.write_json(run_dir / store.RESULTS, results)
    bt = stats.by_type
    out.write(f"\n{len(read.ops)} history records: {bt.get('ok', 0)} ok, {bt.get('fail', 0)} fail, "
              f"{bt.get('info', 0)} info; {results['stats']['faults']} fault(s) injected\n\n")
    out.write(summary_table(results) + "\n\n")
    out.write(f"{verdict_word(results['valid'])}: {results['summary']}\n")
    out.write(f"results: {run_dir}\n")
    if spec.leave_running and not interrupted:
        where = ", ".join(f"{s.node.name} {s.address}:{s.port}" for s in services)
        out.write(f"cluster {cluster.run_id} left running ({where}); remove it with: "
                  "lockcheck cluster down\n")
    for problem in errors:
        out.write(f"warning: {problem}\n")
    return RunOutcome(run_dir, results["valid"], results, interrupted, errors, failure)


def worker_exit_problems(workers: list[WorkerHandle]) -> list[str]:
    """Workers that crashed (not the ones teardown had to kill) are worth a warning."""
    problems = []
    for w in workers:
        code = w.daemon.popen.returncode if w.daemon.popen is not None else None
        if code not in (None, 0, -signal.SIGKILL):
            problems.append(f"worker {w.daemon.node} exited with code {code}; see "
                            f"workers/{w.daemon.node}.log")
        if w.bad_lines:
            problems.append(f"worker {w.daemon.node} wrote {w.bad_lines} unreadable lines")
    return problems


def teardown(spec: TestSpec, cluster: LocalCluster, schedule: NemesisSchedule | None,
             workers: list[WorkerHandle], services: list[RedisService],
             resource: ResourceServer | None, writer: HistoryWriter) -> list[str]:
    """Undo everything; collect errors instead of stopping at the first."""
    errors: list[str] = []

    def step(what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:
            log.exception("teardown: %s failed", what)
            errors.append(f"{what}: {e}")

    if schedule is not None:
        step("heal faults", schedule.finish)
    # workers finish their critical section and release; wait a bit longer than a hold
    for w in workers:
        w.ask_to_stop()
    deadline = time.monotonic() + spec.hold_ms[1] / 1000 + spec.ttl_ms / 1000 + 2.0
    for w in workers:
        if not w.daemon.wait(max(0.0, deadline - time.monotonic())):
            w.daemon.kill()
    for w in workers:
        w.thread.join(timeout=5)
    step("close history", writer.close)
    if resource is not None:
        step("stop resource", resource.stop)
    if not spec.leave_running:
        for s in services:
            step(f"stop {s.node.name}", s.kill)
        step("remove cluster", cluster.down)
    return errors
