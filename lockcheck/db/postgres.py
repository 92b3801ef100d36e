"""PostgreSQL on one node: a fresh cluster per run, crashed and paused as a whole.

Whichever major the node's distribution ships (Debian 12: 15, Debian 13: 17, Ubuntu
24.04: 16), found on the node in Debian's versioned folders
(`/usr/lib/postgresql/<major>/bin`), else through `pg_config --bindir`; a major outside
`SUPPORTED` is refused with one line naming both.

The server refuses to run as root, so it runs as the `postgres` user through
`setpriv`, inside `unshare --ipc`: both exec in place, so the PID we keep is the
postmaster's. The IPC namespace is what makes a crash clean: Postgres keeps a SysV
segment that a SIGKILLed postmaster leaves behind, and a segment of a private IPC
namespace goes away with the namespace's last process, whoever killed it (the kill
nemesis, or the cleanup of a run whose controller died). In a container, which is an
IPC namespace of its own and refuses `unshare` without CAP_SYS_ADMIN, the server runs
in the container's. Dynamic shared memory is files in the data folder
(`dynamic_shared_memory_type=mmap`), not `/dev/shm`.

Killable (SIGKILL of the postmaster and every backend: a crash; the restart runs
crash recovery on the same data), Pausable (every server process), CanFailover
(terminate the sessions that hold locks, as an operator or an idle-session timeout
would), Clock (libfaketime in the postmaster, inherited by the backends it forks),
LogFiles.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import psycopg

from lockcheck.backends import POSTGRES_PROGRAM
from lockcheck.cluster import faketime
from lockcheck.cluster.api import Cluster, Node
from lockcheck.cluster.probe import tail_lines, wait_until
from lockcheck.db.server import PerNode, Server
from lockcheck.errors import BadInput
from lockcheck.preflight import INSTALL
from lockcheck.spec import TestSpec

log = logging.getLogger("lockcheck.postgres")

PG_LIB = Path("/usr/lib/postgresql")
# pg_terminate_backend's timeout (failover) needs 14; 18 is the newest major tried
SUPPORTED = range(14, 19)
DEFAULT_PORT = 5432
OS_USER = "postgres"  # the server's OS user, and the database superuser clients log in as
DBNAME = "postgres"
START_TIMEOUT_S = 30.0
INITDB_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0

# Sessions holding advisory locks; when there are none (the lease table keeps its locks
# in rows, not in sessions), every client session: each may be a lease holder's. The
# timeout waits (up to 1 s) until each backend is gone, and its locks with it.
TERMINATE_HOLDERS = """
WITH holders AS (
  SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
), targets AS (
  SELECT pid FROM holders
  UNION
  SELECT pid FROM pg_stat_activity
   WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
     AND NOT EXISTS (SELECT 1 FROM holders)
)
SELECT a.pid, a.application_name, pg_terminate_backend(a.pid, 1000)
  FROM pg_stat_activity a JOIN targets t USING (pid)
 ORDER BY a.pid
"""


@dataclass(frozen=True)
class Install:
    """The PostgreSQL server programs on one machine."""

    bindir: Path
    major: int

    @property
    def postgres(self) -> Path:
        return self.bindir / "postgres"

    @property
    def initdb(self) -> Path:
        return self.bindir / "initdb"


def _major(version: str) -> int | None:
    head = version.split(".")[0]
    return int(head) if head.isdigit() else None


def choose_install(found: Mapping[int, Path]) -> Install:
    """The newest supported major of those found (major -> bin folder), or one line
    that says what was found and what lockcheck runs."""
    supported = sorted(m for m in found if m in SUPPORTED)
    if supported:
        return Install(found[supported[-1]], supported[-1])
    runs = f"lockcheck runs PostgreSQL {SUPPORTED[0]} to {SUPPORTED[-1]}"
    if not found:
        raise BadInput(f"no PostgreSQL server found in {PG_LIB}/<major>/bin or through "
                       f"pg_config; install it with: {INSTALL[POSTGRES_PROGRAM]} ({runs})")
    have = ", ".join(f"{m} ({found[m] / 'postgres'})" for m in sorted(found))
    raise BadInput(f"found PostgreSQL {have}; {runs}")


def find_install(run: Callable[[Sequence[str]], subprocess.CompletedProcess[str]]) -> Install:
    """The server programs where `run` runs commands (the controller, or a node)."""
    found: dict[int, Path] = {}
    r = run(["find", str(PG_LIB), "-mindepth", "3", "-maxdepth", "3", "-path", "*/bin/postgres"])
    for line in r.stdout.split():
        major = _major(Path(line).parent.parent.name)
        if major is not None:
            found[major] = Path(line).parent
    if not found:  # another layout: ask pg_config, which names its own version
        bindir = run(["pg_config", "--bindir"]).stdout.strip()
        version = run(["pg_config", "--version"]).stdout.split()  # "PostgreSQL 16.4 ..."
        major = _major(version[1]) if len(version) > 1 else None
        if bindir and major is not None and run(["test", "-x", f"{bindir}/postgres"]) \
                .returncode == 0:
            found[major] = Path(bindir)
    return choose_install(found)


def run_here(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(list(argv), 127, "", str(e))


def node_runner(node: Node) -> Callable[[Sequence[str]], subprocess.CompletedProcess[str]]:
    return lambda argv: node.run(list(argv), check=False)


def postgres_version(install: Install | None = None,
                     run: Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
                     = run_here) -> str:
    i = install or find_install(run)
    out = run([str(i.postgres), "--version"]).stdout
    # "postgres (PostgreSQL) 17.6 (Debian 17.6-0+deb13u1)"
    parts = out.split()
    return parts[2] if len(parts) > 2 else out.strip()


def as_postgres(argv: Sequence[str], *, private_ipc: bool = True) -> list[str]:
    """Run `argv` as the postgres user, in a private IPC namespace unless the node is
    one already (a container), without a fork."""
    ipc = ["unshare", "--ipc"] if private_ipc else []
    return [*ipc, "setpriv", f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups",
            *argv]


def can_unshare_ipc(node: Node) -> bool:
    """Whether `unshare --ipc` works on the node: it does as root on a host or in a
    namespace; a container without CAP_SYS_ADMIN refuses it, and needs it least (its
    IPC namespace is its own and goes with it)."""
    return node.run(["unshare", "--ipc", "true"], check=False).returncode == 0


def server_settings(address: str, port: int, socket_dir: Path,
                    max_connections: int) -> dict[str, str]:
    """The server's settings (on its command line, so `ps` shows them)."""
    return {
        "listen_addresses": address,
        "port": str(port),
        "unix_socket_directories": str(socket_dir),
        "max_connections": str(max_connections),
        "shared_buffers": "32MB",
        # a throwaway server: no fault here crashes the OS, so nothing needs to reach
        # the disk. synchronous_commit stays on: a killed server must keep every commit
        # it acknowledged (off, a SIGKILL loses the WAL still in shared memory)
        "fsync": "off",
        "full_page_writes": "off",
        "dynamic_shared_memory_type": "mmap",  # files in the data folder, not /dev/shm
        "max_parallel_workers_per_gather": "0",
        "jit": "off",
        # a session whose client vanished (partitioned, killed) ends within ~3 s and
        # drops its session locks; the default (the OS's, 2 h) never heals in a run
        "tcp_keepalives_idle": "1",
        "tcp_keepalives_interval": "1",
        "tcp_keepalives_count": "2",
        "tcp_user_timeout": "2000",
        "log_line_prefix": "%m [%p] %a ",
    }


# the lease table of lockcheck's own client (lockcheck/locks/postgres.py), named here so
# that what ends its leases from outside (db/expire.py) needs no lock client
LEASE_TABLE = "lockcheck_locks"


def conninfo(address: str, port: int, *, application_name: str,
             connect_timeout_s: int = 2) -> dict[str, Any]:
    """psycopg.connect keywords for the controller (probes, failover, schema)."""
    return {"host": address, "port": port, "user": OS_USER, "dbname": DBNAME,
            "application_name": application_name, "connect_timeout": connect_timeout_s,
            "sslmode": "disable", "gssencmode": "disable"}


def serves(address: str, port: int) -> bool:
    """Active readiness probe: a session that answers a query (not just a port)."""
    try:
        with psycopg.connect(**conninfo(address, port, application_name="lockcheck-probe"),
                             autocommit=True) as c:
            row = c.execute("SELECT 1").fetchone()
    except psycopg.Error:
        return False
    return row == (1,)


@dataclass
class PostgresServer(Server):
    """One postmaster and its data folder on one node."""

    port: int = DEFAULT_PORT
    max_connections: int = 50
    tcp: bool = True  # False: a Unix socket only (a resource no partition can cut off)
    label: str = field(default="postgres", kw_only=True)
    start_timeout_s: float = field(default=START_TIMEOUT_S, kw_only=True)
    paused: list[int] = field(default_factory=list)  # backends stopped with the postmaster
    fake_clock: bool = False  # started under libfaketime (cluster/faketime.py)
    private_ipc: bool = True  # in an IPC namespace of its own (see can_unshare_ipc)
    # made once, at init: a server restarted after a kill reads the clock file as the
    # clock fault left it, as a real server on a host whose clock is off would
    clock_env: dict[str, str] = field(default_factory=dict)
    install: Install | None = None  # found on the node at init

    @property
    def host(self) -> str:
        """Where clients connect: the node's address, or the socket's folder."""
        return self.node.address if self.tcp else str(self.socket_dir)

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.dir / "sock"

    @property
    def initdb_log(self) -> Path:
        return self.dir / "initdb.log"

    def init(self) -> None:
        """A new cluster in the node's folder: initdb, trust for every address."""
        n = self.node
        t0 = time.monotonic()
        self.private_ipc = can_unshare_ipc(n)
        self.install = find_install(node_runner(n))
        if self.fake_clock:
            self.clock_env = faketime.server_env(n, shim=False)
        n.run(["mkdir", "-p", str(self.data), str(self.socket_dir)])
        self.made_dir = True
        n.run(["chown", "-R", f"{OS_USER}:{OS_USER}", str(self.dir)])
        n.run(["chmod", "700", str(self.data)])
        r = n.run(as_postgres([str(self.install.initdb), "-D", str(self.data), "-U", OS_USER,
                               "--auth=trust", "--no-sync", "--no-instructions",
                               "-E", "UTF8", "--locale=C.UTF-8"],
                              private_ipc=self.private_ipc),
                  timeout=INITDB_TIMEOUT_S, check=False)
        n.write_file(self.initdb_log, r.stdout + r.stderr)
        if r.returncode != 0:
            raise RuntimeError(f"initdb on {n.name} failed ({r.returncode}): "
                               f"{tail_lines(r.stdout + r.stderr, 10)}")
        # only the run's own namespaces can reach the server: trust them all
        n.write_file(self.data / "pg_hba.conf",
                     "local all all trust\nhost all all all trust\n")
        log.info("initdb on %s in %.2fs", n.name, time.monotonic() - t0)

    def argv(self) -> list[str]:
        settings = server_settings(self.node.address if self.tcp else "", self.port,
                                   self.socket_dir,
                                   self.max_connections)
        if self.install is None:
            raise RuntimeError("postgres: argv() before init()")
        args = [str(self.install.postgres), "-D", str(self.data)]
        for k, v in settings.items():
            args += ["-c", f"{k}={v}"]
        if self.clock_env:
            # through env(1) after setpriv, so that only the postmaster (and the
            # backends it forks) load libfaketime, not unshare and setpriv before it
            args = ["env", *(f"{k}={v}" for k, v in self.clock_env.items()), *args]
        return as_postgres(args, private_ipc=self.private_ipc)

    def launch(self) -> None:
        self.paused = []
        super().launch()

    def ready(self) -> bool:
        return serves(self.host, self.port)

    def backends(self) -> list[int]:
        """The postmaster's children: backends, checkpointer, walwriter, ..."""
        if self.daemon is None:
            return []
        r = self.node.run(["ps", "-o", "pid=", "--ppid", str(self.daemon.pid)], check=False)
        return [int(x) for x in r.stdout.split() if x.isdigit()]

    def _signal(self, pids: Sequence[int], sig: str) -> None:
        if pids:  # one may have exited meanwhile: that is fine
            self.node.run(["kill", "-s", sig, *map(str, pids)], check=False)

    def _live(self, pids: Sequence[int]) -> list[int]:
        if not pids:
            return []
        r = self.node.run(["ps", "-o", "pid=,stat=", "-p", ",".join(map(str, pids))],
                          check=False)
        rows = [line.split() for line in r.stdout.splitlines()]
        return [int(p[0]) for p in rows if len(p) == 2 and not p[1].startswith("Z")]

    def kill(self) -> None:
        """A crash: SIGKILL the postmaster and every backend at once, as a machine crash
        would: no shutdown checkpoint, no goodbye to the clients. Returns once all are
        gone (a new postmaster must never share the data folder with an old backend)."""
        d = self.daemon
        if d is None or not d.alive():
            return
        # Stopped, the postmaster forks nothing and cannot react to its children dying
        # (it would start recovery processes); they go first, or they would notice
        # the postmaster gone and say goodbye to their clients. SIGKILL, not the
        # Daemon's kill: that sends SIGCONT first.
        d.signal(signal.SIGSTOP)
        kids = self.backends()
        self._signal(kids, "KILL")
        d.signal(signal.SIGKILL)
        d.wait(STOP_GRACE_S)
        wait_until(lambda: not self._live(kids), timeout=STOP_GRACE_S,
                   what=f"the killed backends of postgres on {self.node.name} to exit")
        self.paused = []
        if self.fake_clock:  # before the PID can go to another faked process
            self.node.run(["rm", "-f", *map(str, faketime.shm_files(d.pid))], check=False)

    def pause(self) -> None:
        d = self.daemon
        if d is None or not d.alive():
            return
        d.signal(signal.SIGSTOP)  # first, so that no backend starts unpaused
        self.paused = self.backends()
        self._signal(self.paused, "STOP")

    def resume(self) -> None:
        d = self.daemon
        if d is None or not d.alive():
            return
        self._signal(sorted(set(self.paused) | set(self.backends())), "CONT")
        d.signal(signal.SIGCONT)
        self.paused = []

    def stop(self) -> None:
        """Immediate shutdown (SIGQUIT: the postmaster ends its backends and exits in
        milliseconds); a crash if it does not."""
        d = self.daemon
        if d is None or not d.alive():
            return
        self.resume()  # a stopped process cannot act on SIGQUIT
        d.signal(signal.SIGQUIT)
        if not d.wait(STOP_GRACE_S):
            self.kill()

    def terminate_holders(self) -> list[tuple[int, str, bool]]:
        with psycopg.connect(**conninfo(self.host, self.port,
                                        application_name="lockcheck-failover"),
                             autocommit=True) as c:
            return [(int(p), str(a or ""), bool(ok))
                    for p, a, ok in c.execute(TERMINATE_HOLDERS).fetchall()]

    def log_files(self) -> list[Path]:
        return [self.log_path, self.initdb_log]


class PostgresDB(PerNode):
    """One PostgreSQL server on the first node (`postgres` and its variants)."""

    name = "postgres"

    def __init__(self, spec: TestSpec, options: Mapping[str, Any] | None = None) -> None:
        # a session per worker, plus the sessions of workers that retired and whose old
        # session the server has not noticed gone yet, plus the controller's
        self.max_connections = max(50, 4 * spec.concurrency + 10)
        self.servers: dict[str, PostgresServer] = {}
        self.faking = False

    @property
    def server(self) -> PostgresServer | None:
        return next(iter(self.servers.values()), None)

    def setup(self, cluster: Cluster) -> None:
        s = PostgresServer(cluster.nodes[0], max_connections=self.max_connections,
                           fake_clock=self.faking)
        self.servers = {s.node.name: s}
        s.init()
        s.start()

    def teardown(self) -> None:
        if self.server is not None and self.server.alive():
            t0 = time.monotonic()
            self.server.stop()
            log.info("postgres stopped in %.2fs", time.monotonic() - t0)

    def expire_leases(self) -> str:
        from lockcheck.db.expire import expire_postgres

        s = self.server
        if s is None:
            return "no server"
        return expire_postgres(conninfo(s.node.address, s.port,
                                        application_name="lockcheck-expire"), LEASE_TABLE)

    def versions(self) -> dict[str, str]:
        s = self.server
        if s is not None and s.install is not None:  # the node's, which may not be ours
            return {"postgres": postgres_version(s.install, node_runner(s.node))}
        return {"postgres": postgres_version()}

    def client_config(self) -> dict[str, Any]:
        s = self.server
        if s is None:
            return {}
        return {"host": s.node.address, "port": s.port, "user": OS_USER, "dbname": DBNAME}

    def describe(self) -> dict[str, dict[str, object]]:
        s = self.server
        if s is None:
            return {}
        return {s.node.name: {"service": "postgres", "address": s.node.address,
                              "port": s.port, "pid": s.daemon.pid if s.daemon else None}}

    # -- capabilities (and kill/start/alive/pause/resume/log_files of PerNode) ------

    def failover(self, rng: Random) -> dict[str, Any]:
        """Terminate the backends of the sessions that hold locks right now: their
        clients learn it only on their next query."""
        s = self.server
        if s is None or not s.alive() or s.paused:
            return {"targets": [], "skipped": "the server is down or paused"}
        try:
            rows = s.terminate_holders()
        except psycopg.Error as e:
            return {"targets": [], "skipped": f"could not reach the server: {e}"[:120]}
        return {"targets": [s.node.name] if rows else [],
                "pids": [p for p, _, ok in rows if ok],
                "sessions": sorted({a for _, a, ok in rows if ok and a})}

    def fake_clock(self) -> None:
        """Before setup: the server's wall clock can be moved. PostgreSQL reads it
        through the C library (`clock_timestamp()`, which expires the lease table's
        rows), so libfaketime moves it; its timers and latches keep the true
        monotonic clock."""
        self.faking = True

    def set_clock(self, node: str, offset_ms: float) -> None:
        s = self.servers[node]
        if not s.fake_clock:
            raise RuntimeError("postgres was not started under a fake clock (fake_clock() "
                               "must come before setup)")
        faketime.set_server_clock(s.node, offset_ms)

    def reset_clock(self, node: str) -> None:
        self.set_clock(node, 0.0)
