"""The cluster layer's interfaces: providers give nodes, databases run on them.

Three levels, as in Jepsen:

* a **provider** (local network namespaces, Docker containers, SSH hosts) makes a
  `Cluster`: server `Node`s and `ClientHost`s, cut off from each other on demand;
* a **database** (`DB`) is written once against `Node` and sets up a whole ensemble
  (a ZooKeeper quorum is configured and started as one), tears it down, reports
  versions and tells client workers how to reach it (`client_config`);
* optional **capabilities** of a database (`Killable`, `Pausable`, `HasPrimary`,
  `CanFailover`, `Clock`, `LogFiles`) are separate protocols, checked with
  `isinstance` where they are used: a nemesis that needs one the backend lacks is
  refused before the run starts.

Nothing outside `cluster/` needs to know which provider it is talking to.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from typing import IO, Any, Protocol, runtime_checkable


@runtime_checkable
class Daemon(Protocol):
    """A long-running process lockcheck started on a node; we hold its PID."""

    name: str
    node: str
    pid: int

    def alive(self) -> bool: ...

    def signal(self, sig: int) -> bool:
        """Send `sig`; False if the process was already gone."""
        ...

    def wait(self, timeout: float) -> bool:
        """Until the process has exited; True if it did within `timeout` seconds."""
        ...

    def kill(self) -> None:
        """SIGKILL (after SIGCONT) and wait until it is gone."""
        ...

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        ...


@runtime_checkable
class Node(Protocol):
    """A server host: run commands and daemons on it, cut it off from other hosts."""

    name: str
    address: str
    workdir: Path  # this run's folder on the node (data, configs, logs)

    def run(self, argv: Sequence[str], *, timeout: float = 10.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command to completion on the node and return its output."""
        ...

    def spawn(self, name: str, argv: Sequence[str], *, log: Path | None = None,
              env: Mapping[str, str] | None = None) -> Daemon:
        """Start a daemon; the PID kept is the process itself (no wrapper in between).

        `log` (a path on the node) receives its stdout and stderr.
        """
        ...

    def write_file(self, path: Path, text: str) -> None:
        """Create or replace a file on the node."""
        ...

    def fetch(self, path: Path, dest: Path) -> bool:
        """Copy a file from the node to `dest` on the controller; False if it is missing."""
        ...

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        """Drop packets arriving from these addresses: every one (one side of a
        partition), or each independently with `probability` (a lossy link).

        Local provider: iptables DROP rules (`-m statistic --mode random` below 1) in a
        chain of the run's own inside the node's namespace. Docker and SSH providers
        do the same in the container's namespace or in a chain of lockcheck's own on
        the host, never in the host's own rules.
        """
        ...

    def heal(self) -> None:
        """Remove every drop rule lockcheck put on this node. Idempotent."""
        ...

    def intercept(self, port: int, to_port: int, sources: Sequence[str]) -> None:
        """From now on, new TCP connections from `sources` to this node's `port` reach
        `to_port` on the node instead (where a proxy listens and forwards to `port`).

        Local provider: an iptables REDIRECT in the namespace's nat table; Docker and
        SSH providers: the same in the container or in a chain of lockcheck's own.
        Connections the node makes itself are not redirected, so the proxy reaches
        the service directly. Goes with the node; `unintercept` removes it earlier.
        """
        ...

    def unintercept(self) -> None:
        """Remove every redirect `intercept` added. Idempotent."""
        ...


@runtime_checkable
class ClientHost(Protocol):
    """Where a client worker runs. Always on the controller's machine, so every
    process of a run reads the same monotonic clock; it can still be cut off from
    some nodes (a partition can split clients too)."""

    name: str
    address: str
    # True: it has an address of its own that the nodes see (a namespace), so a
    # partition can cut it from some nodes alone. False: a plain process of the
    # controller (the ssh provider without client namespaces): partitions leave it out
    own_network: bool

    def spawn(self, name: str, argv: Sequence[str], *, log_path: Path | None = None,
              env: Mapping[str, str] | None = None, stdin: int | IO[Any] | None = None,
              stdout: int | IO[Any] | None = None) -> Any:
        """Start a local process (a `cluster.node.LocalDaemon` with its Popen)."""
        ...

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        """As `Node.block`."""
        ...

    def heal(self) -> None: ...


@runtime_checkable
class Cluster(Protocol):
    """The nodes and client hosts of one run, created by a provider."""

    @property
    def run_id(self) -> str: ...

    @property
    def nodes(self) -> Sequence[Node]: ...

    @property
    def clients(self) -> Sequence[ClientHost]: ...

    @property
    def workdir(self) -> Path:
        """A temp folder of this run on the controller (sockets, worker files)."""
        ...

    def up(self) -> Cluster: ...

    def down(self) -> None:
        """Remove everything the cluster created. Idempotent."""
        ...

    def describe(self) -> dict[str, Any]:
        """Plain data for test.json: provider, addresses, subnet, ..."""
        ...

    def keep(self, services: Mapping[str, Mapping[str, object]]) -> None:
        """Leave the cluster running after this process ends (`--leave-running`,
        `lockcheck cluster up`); `services` describes what runs on each node."""
        ...


@runtime_checkable
class HostClock(Protocol):
    """A node whose machine clock lockcheck may move: a host of its own (the ssh
    provider's real hosts and VMs), never one that is the controller's machine and
    never a container (containers share their machine's clock). A clock fault uses
    it instead of libfaketime where a node has it, and always resets it at heal."""

    def set_clock(self, offset_ms: float) -> None:
        """From now on the host's wall clock reads the controller's plus `offset_ms`
        (0: back to where it was before the first move)."""
        ...

    def reset_clock(self) -> None:
        """Back to where it was before lockcheck moved it. Idempotent."""
        ...


# -- databases ---------------------------------------------------------------------------


@runtime_checkable
class DB(Protocol):
    """A lock service on a cluster's nodes (Jepsen's `db/DB`), set up as a whole."""

    name: str

    def setup(self, cluster: Cluster) -> None:
        """Start the ensemble on the cluster's nodes and wait until it serves."""
        ...

    def teardown(self) -> None:
        """Stop every server. Idempotent; safe after a failed setup."""
        ...

    def versions(self) -> dict[str, str]:
        """Server versions, e.g. {"redis-server": "7.0.15"}; no running server needed."""
        ...

    def client_config(self) -> dict[str, Any]:
        """What a client worker needs to reach the service (plain JSON data)."""
        ...

    def describe(self) -> dict[str, dict[str, object]]:
        """Per node: which server runs there and on which port (for `cluster status`)."""
        ...


@runtime_checkable
class Killable(Protocol):
    """Servers can be killed (SIGKILL) and started again (Jepsen's `db/Kill`)."""

    def kill(self, node: str) -> None: ...

    def start(self, node: str) -> None:
        """Start the server of `node` again and wait until it serves."""
        ...

    def alive(self, node: str) -> bool: ...


@runtime_checkable
class StartsTogether(Protocol):
    """Several killed servers can be started at once and waited for together (an
    ensemble with every member down forms only once a quorum is up)."""

    def start_together(self, nodes: Sequence[str]) -> None: ...


@runtime_checkable
class Pausable(Protocol):
    """Servers can be paused (SIGSTOP) and resumed (Jepsen's `db/Pause`)."""

    def pause(self, node: str) -> None: ...

    def resume(self, node: str) -> None: ...


@runtime_checkable
class HasPrimary(Protocol):
    """The service can say which nodes lead right now (Jepsen's `db/Primary`)."""

    def primaries(self) -> list[str]: ...


@runtime_checkable
class CanFailover(Protocol):
    """The service can be made to change its primary, or drop its clients' sessions,
    on demand (Sentinel's `SENTINEL FAILOVER`; terminating Postgres backends)."""

    def failover(self, rng: Random) -> dict[str, Any]:
        """Do it now; return what was done (with `targets`: the nodes involved)."""
        ...


@runtime_checkable
class SentinelEvents(Protocol):
    """Sentinels watch the service and publish each step of a failover (pub/sub)."""

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """(address, port) of every Sentinel."""
        ...


@runtime_checkable
class Clock(Protocol):
    """The servers' wall clocks can be moved, per node and at run time, without
    touching the machine's clock (libfaketime, one process at a time).

    A database offers it when its servers read the time through the C library
    (redis-server does; Go's etcd and the JVM's ZooKeeper read it themselves and
    ignore libfaketime, so they do not offer it). `fake_clock` is called before
    `setup` when a run will move clocks: only then do the servers start under the
    fake clock, and `set_clock` works.
    """

    def fake_clock(self) -> None:
        """Before setup: start every server under a clock lockcheck can move."""
        ...

    def set_clock(self, node: str, offset_ms: float) -> None:
        """From now on the server on `node` reads the real wall clock plus `offset_ms`
        (the monotonic clock stays true); takes effect at its next reading."""
        ...

    def reset_clock(self, node: str) -> None:
        """Back to the real wall clock."""
        ...


@runtime_checkable
class ExpiresLeases(Protocol):
    """Every lease the service holds can be ended now, as if its TTL had passed (keys
    with a TTL deleted, leases revoked, sessions destroyed): how `client-check` takes a
    lock away under a holder that renews. Returns what it did, in a few words."""

    def expire_leases(self) -> str: ...


@runtime_checkable
class LogFiles(Protocol):
    """Server logs to copy into the results folder (Jepsen's `db/LogFiles`)."""

    def log_files(self) -> Mapping[str, Sequence[Path]]:
        """Node name -> paths on that node."""
        ...


CAPABILITIES: dict[str, type] = {
    "kill": Killable,
    "pause": Pausable,
    "primary": HasPrimary,
    "failover": CanFailover,
    "sentinel-events": SentinelEvents,
    "clock": Clock,
    "logs": LogFiles,
}


def capabilities(db: object) -> list[str]:
    """The names of the optional capabilities `db` has."""
    return [name for name, proto in CAPABILITIES.items() if isinstance(db, proto)]
