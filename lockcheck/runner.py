"""One test run, in the order Jepsen's core uses, with every teardown guaranteed.

    plan (refuse what cannot run) -> store -> cluster -> database -> resource
    -> faults' prepare steps -> client workers -> nemesis -> run -> heal, quiet phase
    -> stop workers
    -> recovery check -> [teardown in reverse: heal, workers, resource, logs and
    servers, cluster, history] -> check -> results.json and summary

Each step that creates something pushes its undo onto a `Teardown` as soon as it
exists; the undos run in reverse order whatever happens (an exception, Ctrl-C,
SIGTERM) and collect their errors instead of stopping at the first. The history is
on disk as it goes, so what was recorded is checked even after a failure.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from lockcheck import __version__
from lockcheck.backend import Backend
from lockcheck.backends import backend
from lockcheck.checker.analyze import analyze
from lockcheck.checker.recovery import check_recovery
from lockcheck.checker.verdict import cut_short, harness_failed
from lockcheck.clients import ResolvedClient, probe_factory, resolve_client
from lockcheck.cluster.api import DB, Cluster, LogFiles, Node, capabilities
from lockcheck.cluster.node import LocalDaemon
from lockcheck.cluster.providers import ClusterRequest, Provider, check_provider, provider
from lockcheck.cluster.state import Registry
from lockcheck.distro import distribution
from lockcheck.errors import BadInput
from lockcheck.history import HistoryError, HistoryWriter, Op, read_history_full
from lockcheck.intake import GATHER_S, QUIET_GATHER_S, EventRow, Intake
from lockcheck.interrupts import sigterm_as_interrupt
from lockcheck.locks.api import ClientOptions
from lockcheck.nemesis.api import Nemesis, PrepareContext, Prepared, RunContext, WorkerRef
from lockcheck.nemesis.client_pause import Holders
from lockcheck.nemesis.registry import NEMESES, check_supported, prepare_db, prepare_steps
from lockcheck.nemesis.reply_loss import stop_before as reply_stop_before
from lockcheck.nemesis.schedule import NemesisSchedule
from lockcheck.preflight import check_server_versions, debian_packages, require_binaries
from lockcheck.registry import load
from lockcheck.results import store
from lockcheck.results.display import RunStatus, make_run_display, render_summary
from lockcheck.results.progress import LiveStats
from lockcheck.servers import ROOT, Debian
from lockcheck.spec import TestSpec, validate
from lockcheck.workloads.api import KeyPlan, Resource, ResourceContext, Workload, default_keys
from lockcheck.workloads.registry import workload
from lockcheck.workloads.worker import HURRY, WorkerConfig

log = logging.getLogger("lockcheck")

WORKER_MODULE = "lockcheck.workloads.worker"
# the longest the run waits for its clients to record their first op before its faults
# and its time start (a loaded machine may take seconds to start a few dozen Pythons)
WORKER_START_S = 30.0


@dataclass
class RunOutcome:
    run_dir: Path
    valid: object
    results: dict[str, Any]
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    failure: str | None = None  # the harness itself failed mid-run (the history is kept)


@dataclass(frozen=True)
class Plan:
    """Everything a run needs, resolved and checked before anything is created."""

    spec: TestSpec
    backend: Backend
    workload: Workload
    provider: Provider
    db: DB
    client: ResolvedClient | None = None  # `--client`: run instead of the backend's


def plan(spec: TestSpec, say: Callable[[str], None] = lambda line: None, *,
         command: str = "lockcheck test") -> Plan:
    """Resolve names and refuse, with one line, what cannot run (exit 254)."""
    spec = validate(spec)
    b, w, p = backend(spec.backend), workload(spec.workload), provider(spec.provider)
    db = b.make_db(spec)  # inert until setup: it only answers what it can do
    check_supported(spec.nemesis, db, b.name, spec)
    why = p.prerequisites()
    if why is not None:
        raise BadInput(f"{command} {why}")
    # the databases find their programs (and versions) on the controller, whatever
    # the provider: the docker image and the ssh provider's apt step put the same
    # Debian packages at the same paths on the nodes
    require_binaries(tuple(b.server_programs(spec.server)))
    check_server_root(b, spec.server, p)
    check_server_versions(server_versions_of(db, refuse=True))
    if spec.subnet is not None:
        p.check_subnet(spec.subnet)  # a bad or busy --subnet is refused before anything
    check_provider(p, spec, say)  # its options and hosts, the faults it cannot inject
    check_fault_prerequisites(spec)
    prepare_db(spec.nemesis, db, spec)
    client = resolve_client(spec.client, b.name) if spec.client is not None else None
    return Plan(spec, b, w, p, db, client)


def cluster_request(p: Plan, registry: Registry, *, kind: str = "test",
                    clients: int | None = None,
                    say: Callable[[str], None] = lambda line: None) -> ClusterRequest:
    """What the plan asks of its provider: a client host per worker unless told (one
    more would be wasted: the recovery worker shares c0's)."""
    spec = p.spec
    return ClusterRequest(
        nodes=spec.nodes, clients=spec.concurrency if clients is None else clients,
        registry=registry, subnet=spec.subnet, kind=kind, options=spec.provider_options,
        packages=debian_packages(tuple(p.backend.server_programs(spec.server))),
        server_root=server_root(p.backend, spec.server), say=say)


def servers_up(p: Plan, registry: Registry, undo: Teardown, *, kind: str, clients: int,
               say: Callable[[str], None] = lambda line: None) -> Cluster:
    """A cluster with the backend's servers serving and prepared, for `cluster up` and
    `client-check`: the undo of each step is pushed before the step is taken (a test
    run takes the same steps one at a time, recording between them)."""
    c = p.provider.make(cluster_request(p, registry, kind=kind, clients=clients, say=say))
    undo.push("remove cluster", c.down)
    c.up()
    undo.push("stop servers", p.db.teardown)
    p.db.setup(c)
    p.backend.prepare(p.db, p.spec)
    return c


def server_root(b: Backend, choice: str | None) -> str | None:
    """lockcheck's own folder of servers, when the chosen server is one installed there
    (not a package of this distribution): the nodes need it at the same path."""
    own = any(not isinstance(s, Debian) for s in b.sources(choice).values())
    return str(ROOT) if own else None


def check_server_root(b: Backend, choice: str | None, p: Provider) -> None:
    """Refuse, in one line, a server the provider's nodes cannot run: one lockcheck
    installed under its own folder on this machine, for a provider that does not
    bring that folder to its nodes."""
    if server_root(b, choice) is None or p.reaches_server_root:
        return
    own = [s.describe() for s in b.sources(choice).values() if not isinstance(s, Debian)]
    raise BadInput(f"backend {b.name} runs {', '.join(own)}, installed by lockcheck on "
                   f"this machine only: --provider {p.name} cannot bring it to its "
                   "nodes; use --provider local or docker")


def check_fault_prerequisites(spec: TestSpec) -> None:
    """What the chosen faults need on this machine (libfaketime for clock faults)."""
    if any(NEMESES[n].clock for n in spec.nemesis):
        from lockcheck.cluster.faketime import require_libfaketime

        require_libfaketime()


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


class Teardown:
    """Undo steps, run last-in first-out; each error is logged and kept, never raised."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], Any]]] = []
        self.errors: list[str] = []

    def push(self, what: str, fn: Callable[[], Any]) -> None:
        self.steps.append((what, fn))

    def run(self) -> list[str]:
        while self.steps:
            what, fn = self.steps.pop()
            try:
                more = fn()
            except Exception as e:
                log.exception("teardown: %s failed", what)
                self.errors.append(f"{what}: {e}")
            else:
                if isinstance(more, list):  # a step may report its own problems
                    self.errors += [str(m) for m in more]
        return self.errors


def history_intake(writer: HistoryWriter, stats: LiveStats, holders: Holders,
                   prompt: bool = False, writes: bool = True) -> Intake:
    """The workers' ops into the history, watched by the live counts (every op: the
    critical-section events as rows, resource writes whole, the others by type) and by
    who holds a lock now (the events). With `prompt` each op is delivered as it comes;
    otherwise a wake-up gathers `QUIET_GATHER_S` until a fault first asks who holds a
    lock, `GATHER_S` after. Without `writes` (a workload with no resource writes none)
    no block is searched for them."""
    def observe(op: dict[str, Any]) -> None:
        stats.observe(op)
        if op["type"] == "event":
            holders.observe(op)

    def events(rows: list[EventRow]) -> None:
        stats.events(rows)
        holders.events(rows)

    intake = Intake(writer, [observe], wants=(b'"f": "write"',) if writes else (),
                    count=stats.count,
                    gather_s=0.0 if prompt else QUIET_GATHER_S, events=events,
                    hurried_s=GATHER_S)
    holders.on_watch = intake.hurry
    return intake


class WorkerHandle:
    """A client worker process, and its pipe into the history (`lockcheck/intake.py`)."""

    def __init__(self, index: int, host: str, daemon: LocalDaemon, intake: Intake,
                 log_name: str, keep: Path | None = None) -> None:
        # log_name: the recovery worker runs on a client's host but logs on its own;
        # keep: the file its spool keeps unsent lines in (WorkerConfig.keep_path)
        self.index, self.host, self.daemon, self.log_name = index, host, daemon, log_name
        assert daemon.popen is not None and daemon.popen.stdout is not None
        self.source = intake.add(daemon.name, daemon.popen.stdout,
                                 None if keep is None else str(keep))

    @property
    def bad_lines(self) -> int:
        return self.source.bad_lines

    @property
    def heard(self) -> bool:
        """It has recorded something: its client is connected and working."""
        return self.source.heard.is_set()

    def drained(self, timeout: float) -> bool:
        """Until every op the worker wrote is in the history (its pipe has ended)."""
        return self.source.wait_ended(timeout)

    def hurry(self) -> None:
        """Lines sooner: a fault has started to watch who holds a lock (`Recorder.hurry`).
        Any thread; a worker that is gone or asked to stop misses nothing by it."""
        popen = self.daemon.popen
        if popen is not None and popen.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                popen.stdin.write(HURRY)
                popen.stdin.flush()

    def ask_to_stop(self) -> None:
        popen = self.daemon.popen
        if popen is not None and popen.stdin is not None:
            with contextlib.suppress(OSError):
                popen.stdin.close()

    def exit_problem(self) -> list[str]:
        """A worker that crashed (not one teardown had to kill) is worth a warning."""
        problems = []
        code = self.daemon.popen.returncode if self.daemon.popen is not None else None
        if code not in (None, 0, -signal.SIGKILL):
            problems.append(f"worker {self.log_name} exited with code {code}; see "
                            f"workers/{self.log_name}.log")
        if self.bad_lines:
            problems.append(f"worker {self.log_name} wrote {self.bad_lines} unreadable "
                            "lines")
        if self.source.unsent_lines:
            problems.append(f"worker {self.log_name} ended before it sent its last "
                            f"{self.source.unsent_lines} lines; they were read from its "
                            "spool file")
        return problems


def versions(p: Plan, servers: dict[str, str] | None = None) -> dict[str, str]:
    """Every component's version; `servers` as `server_versions` read them (asked here
    when not given)."""
    v = {"lockcheck": __version__, "python": platform.python_version(),
         "kernel": platform.release(), "distribution": distribution(),
         p.backend.library: p.backend.library_version()}
    if p.backend.library == "redis":
        v["redis-py"] = v["redis"]  # the name users know it by
    v.update(server_versions(p) if servers is None else servers)
    return v


def server_versions(p: Plan) -> dict[str, str]:
    """The servers' programs and versions alone: what `compare` keeps apart, since a
    finding is a claim about a server version."""
    return server_versions_of(p.db)


def server_versions_of(db: DB, *, refuse: bool = False) -> dict[str, str]:
    """A version that cannot be read is not worth a failure; with `refuse`, a server
    the database cannot run (BadInput: none found, a major it refuses) is."""
    try:
        return dict(db.versions())
    except BadInput:
        if refuse:
            raise
    except Exception:  # recorded as unknown
        pass
    return {}


def setup_logging(run_dir: Path) -> logging.Handler:
    h = logging.FileHandler(run_dir / store.LOG)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("lockcheck")
    root.addHandler(h)
    root.setLevel(logging.INFO)
    return h


def run_test(spec: TestSpec, *, out: IO[str] = sys.stderr,
             registry: Registry | None = None) -> RunOutcome:
    def say(line: str) -> None:
        out.write(f"{line}\n")

    p = plan(spec, say)
    registry = registry or Registry()
    cleaned = p.provider.reap(registry)
    if cleaned:
        out.write(f"cleaned up leftovers of earlier runs: {', '.join(cleaned)}\n")
    # absolute: servers chdir into their data dirs, and their log paths must still hold
    results_root = Path(p.spec.results_dir).resolve()
    try:
        run_dir = store.new_run_dir(results_root, p.spec.run_path, top_latest=True)
    except OSError as e:
        raise BadInput(f"cannot create the results folder under {results_root}: "
                       f"{e.strerror or e}") from None
    handler = setup_logging(run_dir)
    try:
        return Run(p, run_dir, out, registry).execute()
    finally:
        logging.getLogger("lockcheck").removeHandler(handler)
        handler.close()


class Run:
    """The steps of one run; `execute` is the order, the methods are the steps."""

    def __init__(self, p: Plan, run_dir: Path, out: IO[str], registry: Registry) -> None:
        self.p, self.spec, self.run_dir, self.out = p, p.spec, run_dir, out
        self.registry = registry
        self.writer = HistoryWriter(run_dir / store.HISTORY)
        self.stats = LiveStats()
        self.holders = Holders()
        # a fault that acts on ops as they arrive (client-pause) needs them at once
        self.prompt = any(NEMESES[n].prompt for n in self.spec.nemesis)
        self.intake = history_intake(self.writer, self.stats, self.holders, self.prompt,
                                     writes=p.workload.resource_client is not None)
        self.holders.on_watch = self.hurry
        self.display = make_run_display(out, p.spec.name)
        self.started = time.monotonic()
        self.phase = "setup"
        self.teardown = Teardown()
        self.errors: list[str] = []
        self.workers: list[WorkerHandle] = []
        self.recovery_worker: WorkerHandle | None = None
        self.workers_gone = False  # every client worker ended before the time limit
        self.schedule: NemesisSchedule | None = None
        self.cluster: Cluster | None = None
        self.resource: Resource | None = None
        self.prepared: dict[str, Prepared] = {}
        self.t0 = time.monotonic_ns()
        keys = p.workload.keys
        self.key_plan: KeyPlan = (load(keys)(p.spec) if keys else default_keys(p.spec.keys))
        self.keys = self.key_plan.names
        self.test: dict[str, Any] = {}

    # -- the order ---------------------------------------------------------------------

    def execute(self) -> RunOutcome:
        spec = self.spec
        self.write_test_json()
        self.teardown.push("close history", self.writer.close)
        self.intake.start()
        self.teardown.push("stop copying ops", self.intake.close)
        interrupted, failure = False, None
        self.out.write(f"lockcheck {spec.name}: {spec.nodes} node(s), {spec.concurrency} "
                       f"clients, {spec.keys} key(s), {spec.time_limit:g}s -> {self.run_dir}\n")
        try:
            with sigterm_as_interrupt():
                self.start_cluster()
                self.start_db()
                self.t0 = time.monotonic_ns()  # history times count from here
                self.start_resource()
                self.prepare_faults()
                self.start_workers()
                self.wait_for_workers()
                self.start_nemesis()
                self.run_phases()
                self.stop_workers()
                self.recover()
        except KeyboardInterrupt:
            interrupted = True
        except BadInput:
            raise  # refused once the servers were up (a client that cannot use them)
        except Exception as e:
            # the evidence so far is still checked and kept; the CLI reports the failure
            log.exception("run failed")
            failure = f"{type(e).__name__}: {e}"
        finally:
            self.show("teardown", force=True)
            with no_interrupts():
                self.errors += self.teardown.run()
        if interrupted:
            self.out.write("interrupted: faults healed, cluster removed; checking what was "
                           "recorded\n")
        return self.finish(interrupted, failure)

    # -- the steps ---------------------------------------------------------------------

    def write_test_json(self) -> None:
        p = self.p
        t = self.spec.to_json()
        t["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        t["argv"] = sys.argv
        t["checkers"] = list(p.workload.checkers)
        t["recovery_keys"] = list(self.key_plan.recovery)
        t["key_params"] = self.key_plan.params
        t["process_stride"] = self.spec.process_stride
        t["recovery_worker"] = self.spec.concurrency
        t["backend_info"] = {"family": p.backend.family, "client": p.backend.library,
                             "fence": p.backend.fence, "description": p.backend.description,
                             "capabilities": capabilities(p.db)}
        servers = server_versions(p)  # a process per server program: asked once
        t["versions"] = versions(p, servers)
        t["server_versions"] = servers
        if p.client is not None:
            info = t["client"] = p.client.info()
            t["backend_info"].update(
                client=info["library"] or info["factory"], fence=info["fence"],
                description=f"the {p.backend.name} backend's servers, with the client "
                            f"{info['name']} instead of its own")
            if info["library"]:
                t["versions"][info["library"]] = info["version"]
        self.test = t
        store.write_json(self.run_dir / store.TEST, t)

    def start_cluster(self) -> None:
        cluster = self.p.provider.make(cluster_request(self.p, self.registry, say=self.say))
        self.cluster = cluster
        self.teardown.push("remove cluster", self.remove_cluster)
        t = time.monotonic()
        cluster.up()
        self.test["run_id"] = cluster.run_id
        self.test["cluster"] = cluster.describe()
        store.write_json(self.run_dir / store.TEST, self.test)
        log.info("cluster %s up in %.2fs", cluster.run_id, time.monotonic() - t)

    def say(self, line: str) -> None:
        """A line the user must see at once (a host key accepted, packages installed)."""
        log.info("%s", line)
        self.out.write(f"{line}\n")

    def remove_cluster(self) -> None:
        assert self.cluster is not None
        if self.spec.leave_running:
            self.cluster.keep(self.p.db.describe())
        else:
            self.cluster.down()

    def start_db(self) -> None:
        assert self.cluster is not None
        self.teardown.push("stop servers", self.stop_db)
        t = time.monotonic()
        self.p.db.setup(self.cluster)
        log.info("%s serving in %.2fs", self.p.db.name, time.monotonic() - t)
        # now the servers can be asked (a node's may differ from this machine's)
        servers = server_versions(self.p)
        self.test["versions"].update(versions(self.p, servers))
        self.test["server_versions"] = servers
        self.test["db"] = self.p.db.describe()
        store.write_json(self.run_dir / store.TEST, self.test)
        self.p.backend.prepare(self.p.db, self.spec)
        if self.p.client is not None:
            spec = self.spec
            probe_factory(self.p.client, self.p.backend.name, self.p.db.client_config(),
                          self.keys, ClientOptions(
                              ttl_ms=spec.ttl_ms, op_timeout_s=spec.op_timeout_s,
                              drift=spec.clock_drift, worker=0,
                              options={**self.p.backend.options, **self.p.client.options}))

    def stop_db(self) -> list[str]:
        problems = self.fetch_logs()
        if not self.spec.leave_running:
            self.p.db.teardown()
        return problems

    def fetch_logs(self) -> list[str]:
        db, cluster = self.p.db, self.cluster
        if not isinstance(db, LogFiles) or cluster is None:
            return []
        nodes = {n.name: n for n in cluster.nodes}
        problems = []
        for name, paths in db.log_files().items():
            for path in paths:
                try:
                    nodes[name].fetch(path, self.run_dir / "nodes" / name / path.name)
                except Exception as e:
                    problems.append(f"could not copy {name}:{path}: {e}")
        return problems

    def start_resource(self) -> None:
        w = self.p.workload
        if w.resource is None:
            return
        assert self.cluster is not None
        host = self.cluster.clients[0]
        ctx = ResourceContext(mode=self.spec.resource, workdir=self.cluster.workdir,
                              run_dir=self.run_dir, t0_ns=self.t0, keys=self.keys,
                              clients=self.spec.concurrency + 1,
                              host=host if isinstance(host, Node) else None,
                              record=self.record, service=self.p.db.client_config())
        self.resource = load(w.resource)(ctx).start()
        self.teardown.push("stop resource", self.resource.stop)

    def hurry(self) -> None:
        """A fault has started to watch who holds a lock: the workers send their lines
        and the intake delivers them sooner from now on."""
        self.intake.hurry()
        for w in list(self.workers):
            w.hurry()

    def record(self, op: dict[str, Any]) -> None:
        """A record of the controller's own (a fault, a resource's final state)."""
        self.writer.append({"time": time.monotonic_ns() - self.t0, "key": None,
                            "value": None, **op})

    def worker_config(self, index: int, **kw: Any) -> WorkerConfig:
        spec = self.spec
        return WorkerConfig(
            worker=index, process_stride=spec.process_stride, backend=spec.backend,
            workload=spec.workload, client_config=self.p.db.client_config(), keys=self.keys,
            ttl_ms=spec.ttl_ms, hold_ms=spec.hold_ms, hold_dist=spec.hold_dist,
            seed=spec.seed, t0_ns=self.t0,
            op_timeout_s=spec.op_timeout_s, drift=spec.clock_drift,
            resource=self.resource.worker_config() if self.resource else None,
            prompt=self.prompt, pause_at=spec.pause_at, recovery_keys=self.key_plan.recovery,
            stop_before=reply_stop_before(spec),
            key_params=self.key_plan.params,
            client=self.p.client.factory if self.p.client else None,
            client_path=self.p.client.path if self.p.client else None,
            options=dict(self.p.client.options) if self.p.client else {}, **kw)

    def spawn_worker(self, index: int, host: Any, cfg: WorkerConfig,
                     log_name: str) -> WorkerHandle:
        env: dict[str, str] = {}
        for p in self.prepared.values():
            env.update(p.worker_env(host.name))
        keep = self.run_dir / "workers" / f"{log_name}.unsent"
        cfg = replace(cfg, keep_path=str(keep))
        d = host.spawn(f"worker-{index}",
                       # -P: the controller's working directory must not shadow the
                       # installed lockcheck (a checkout of another version, say)
                       [sys.executable, "-P", "-m", WORKER_MODULE, cfg.to_json()],
                       log_path=self.run_dir / "workers" / f"{log_name}.log",
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env or None)
        return WorkerHandle(index, host.name, d, self.intake, log_name, keep)

    def prepare_faults(self) -> None:
        """What a fault must have in place before the clients connect (a proxy in the
        path, the clients' clock files), each undone after the workers stop."""
        assert self.cluster is not None
        ctx = PrepareContext(spec=self.spec, cluster=self.cluster, db=self.p.db)
        for step in prepare_steps(self.spec.nemesis):
            prepared: Prepared = load(step)(ctx)
            self.prepared[step] = prepared
            self.teardown.push(f"undo {step}", prepared.close)

    def start_workers(self) -> None:
        assert self.cluster is not None
        self.teardown.push("stop workers", self.stop_workers)
        for i, host in enumerate(self.cluster.clients):
            self.workers.append(self.spawn_worker(i, host, self.worker_config(i), host.name))

    def wait_for_workers(self) -> None:
        """The run's time and its faults start once every client has begun: on a loaded
        machine starting the workers can take seconds, and a fault that lands before
        any client runs tests nothing."""
        deadline = time.monotonic() + WORKER_START_S
        while time.monotonic() < deadline:
            self.show("starting")
            waiting = [w for w in self.workers if not w.heard and w.daemon.alive()]
            if not waiting:
                return
            time.sleep(0.05)
        late = [w.index for w in self.workers if not w.heard]
        log.warning("clients %s had not started after %g s; the run goes on without "
                    "waiting for them", late, WORKER_START_S)

    def start_nemesis(self) -> None:
        assert self.cluster is not None
        spec = self.spec
        ctx = RunContext(spec=spec, cluster=self.cluster, db=self.p.db,
                         workers=[WorkerRef(w.index, w.host, w.daemon) for w in self.workers],
                         holders=self.holders.now, next_exit=self.holders.next_exit,
                         stopped_at_point=self.holders.stopped_at_point,
                         next_enter=self.holders.next_enter,
                         taken_over=self.holders.taken_over,
                         prepared=dict(self.prepared))
        nemeses: list[Nemesis] = [NEMESES[n].make(ctx) for n in spec.nemesis]

        def record(type_: str, f: str, value: Any) -> None:
            self.record({"process": "nemesis", "type": type_, "f": f, "value": value})

        quiet = min(spec.quiet, spec.time_limit / 4)
        self.schedule = NemesisSchedule(
            nemeses, interval=spec.nemesis_interval,
            until=time.monotonic() + spec.time_limit - quiet, rng=random.Random(spec.seed),
            record=record, mode=spec.nemesis_mode)
        self.teardown.push("heal faults", self.heal)
        self.schedule.start()

    def heal(self) -> list[str]:
        return self.schedule.finish() if self.schedule is not None else []

    def show(self, phase: str | None = None, *, force: bool = False) -> None:
        """The live status line (or panel, on a terminal)."""
        if phase is not None:
            force = force or phase != self.phase
            self.phase = phase
        s = self.schedule
        self.display.update(RunStatus(
            elapsed_s=time.monotonic() - self.started, time_limit_s=self.spec.time_limit,
            phase=self.phase, ops=self.stats.ops, by_type=dict(self.stats.by_type),
            faults=s.faults if s else 0, active=s.describe_active() if s else (),
            violations=self.stats.violations, saves=self.stats.saves), force=force)

    def run_phases(self) -> None:
        """Faults while it runs; every fault healed for the quiet phase at the end."""
        spec = self.spec
        start = time.monotonic()
        end = start + spec.time_limit
        quiet_from = end - min(spec.quiet, spec.time_limit / 4)
        self.started = start
        healed = False
        while (now := time.monotonic()) < end:
            self.show("quiet" if healed else "running")
            assert self.schedule is not None
            held = self.schedule.holds_until()
            # heal before the quiet phase, once the faults in place have had their
            # whole hold (a restart cut short would not be the fault asked for)
            if now >= quiet_from and not healed and (held is None or now >= held):
                self.errors += self.heal()
                healed = True
            if self.schedule.error is not None:
                raise RuntimeError(f"nemesis failed: {self.schedule.error}")
            if all(not w.daemon.alive() for w in self.workers):
                self.errors.append("every worker exited early; see workers/*.log")
                self.workers_gone = True
                break
            time.sleep(0.1)
        if not healed:  # a hold due after the run's end ends with it
            self.errors += self.heal()
        self.show(force=True)

    def stop_workers(self) -> None:
        """Workers finish their critical section and release; then they must be gone."""
        workers = [w for w in self.workers if w.daemon.popen is not None]
        for w in workers:
            w.ask_to_stop()
        spec = self.spec
        deadline = time.monotonic() + spec.hold_ms[1] / 1000 + spec.ttl_ms / 1000 + 2.0
        for w in workers:
            if not w.daemon.wait(max(0.0, deadline - time.monotonic())):
                w.daemon.kill()
        for w in workers:
            w.drained(timeout=5)

    def recover(self) -> None:
        """Every fault is healed: can each lock be taken again? (recorded in the history)"""
        assert self.cluster is not None and self.cluster.clients
        spec = self.spec
        host = self.cluster.clients[0]
        cfg = self.worker_config(spec.concurrency, mode="recover",
                                 recover_s=spec.recover_timeout_s)
        w = self.spawn_worker(spec.concurrency, host, cfg, "recovery")
        self.recovery_worker = w
        self.teardown.push("stop the recovery worker", w.daemon.kill)
        self.show("recovery")
        if not w.daemon.wait(spec.recover_timeout_s + spec.op_timeout_s * 2 + 5.0):
            w.daemon.kill()
        w.drained(timeout=5)

    # -- the end -----------------------------------------------------------------------

    def finish(self, interrupted: bool, failure: str | None) -> RunOutcome:
        spec, out = self.spec, self.out
        self.show("checking", force=True)
        ops: list[Op] = []
        unreadable = None
        try:
            ops = read_history_full(self.run_dir / store.HISTORY, allow_truncated=True).ops
            results = analyze(ops, self.test)
        except (HistoryError, OSError) as e:
            # nothing can be checked, but the run still ends with its results.json (the
            # error, the faults, the heal errors) and the CLI's harness-failure exit code
            unreadable = f"the history could not be read: {e}"
            results = {"valid": "unknown", "summary": f"unknown: {unreadable}",
                       "workload": spec.workload, "ops": 0, "checkers": {}, "metrics": {}}
            failure = unreadable if failure is None else f"{failure}; {unreadable}"
        finally:
            self.display.close()
        for w in [*self.workers, *([self.recovery_worker] if self.recovery_worker else [])]:
            self.errors += w.exit_problem()
        if self.recovery_worker is not None and unreadable is None:
            results["recovery"] = check_recovery(ops, self.test, started=True)
            if results["recovery"]["valid"] is not True:
                self.errors.append(f"recovery: {results['recovery']['summary']}")
        heal_errors = unique(self.schedule.heal_errors) if self.schedule is not None else []
        if heal_errors:
            # a fault left in place taints what follows: in results.json and on screen
            results["heal_errors"] = heal_errors
            self.errors = unique([*heal_errors, *self.errors])
        if self.workers_gone:
            cut_short(results, "every client worker exited before the time limit")
        if failure is not None:
            harness_failed(results, failure)
        results["interrupted"] = interrupted
        results["errors"] = self.errors
        bt = by_type(ops)
        results["stats"] = {"ops": len(ops), "by_type": bt,
                            "faults": self.schedule.faults if self.schedule else 0,
                            "saves": self.stats.saves}
        store.write_json(self.run_dir / store.RESULTS, results)
        report = None
        try:  # the evidence is on disk already: a report that fails loses nothing
            if spec.report and unreadable is None:
                from lockcheck.results.report import write_report  # matplotlib: only now

                report = write_report(self.run_dir, results=results, ops=ops)
        except Exception as e:
            log.exception("report failed")
            self.errors.append(f"report.html not written: {type(e).__name__}: {e}")
            store.write_json(self.run_dir / store.RESULTS, results)
        out.write(f"\n{len(ops)} history records: {bt.get('ok', 0)} ok, "
                  f"{bt.get('fail', 0)} fail, {bt.get('info', 0)} info; "
                  f"{results['stats']['faults']} fault(s) injected\n\n")
        if "recovery" in results:
            out.write(f"recovery: {results['recovery']['summary']}\n")
        for line in (results.get("client") or {}).get("notes", []):
            out.write(f"client: {line}\n")
        render_summary(results, out)
        out.write(f"results: {self.run_dir}\n")
        if report is not None:
            out.write(f"report: {report}\n")
        if spec.leave_running and not interrupted and self.cluster is not None:
            where = ", ".join(f"{n} {d.get('address')}:{d.get('port')}"
                              for n, d in self.p.db.describe().items())
            out.write(f"cluster {self.cluster.run_id} left running ({where}); remove it "
                      "with: lockcheck cluster down\n")
        for problem in self.errors:
            word = "error" if problem in heal_errors else "warning"
            out.write(f"{word}: {problem}\n")
        return RunOutcome(self.run_dir, results["valid"], results, interrupted, self.errors,
                          failure)


def by_type(ops: Sequence[Op]) -> dict[str, int]:
    """The clients' ops by type (invoke, ok, fail, info, event), from the history."""
    out: dict[str, int] = {}
    for o in ops:
        if o.process != "nemesis":
            out[o.type] = out.get(o.type, 0) + 1
    return out


def unique(items: Sequence[str]) -> list[str]:
    """In order, each once (a heal that fails fails again at every later heal)."""
    return list(dict.fromkeys(items))
