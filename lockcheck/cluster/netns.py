"""The local provider: each node and each client is a Linux network namespace on a bridge.

Names carry the run id (namespaces `lc-<id>-n1`, bridge `lcb<id>`, veths `lc<id>n1`), so
two runs never collide and lockcheck only ever touches what it created. The subnet
is a /24 chosen among 10.77.0.0/16 so that it is not in use on the host.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lockcheck.cluster.faketime import remove_shm
from lockcheck.cluster.node import LocalDaemon, pid_alive, pid_start_time, replace_file
from lockcheck.cluster.providers import ClusterRequest, Provider
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry, RunState, keep_running
from lockcheck.errors import BadInput

NS_RE = re.compile(r"^lc-([0-9a-f]{6})-[nc]\d+$")
BRIDGE_RE = re.compile(r"^lcb([0-9a-f]{6})$")
NODE_HOST_OFFSET = 11  # n1 = .11
CLIENT_HOST_OFFSET = 101  # c0 = .101
MAX_NODES = 89
MAX_CLIENTS = 150


def _ip(*argv: str, check: bool = True, timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", *argv], capture_output=True, text=True, check=check, timeout=timeout
    )


def new_run_id() -> str:
    return secrets.token_hex(3)


def used_subnets() -> set[ipaddress.IPv4Network]:
    out = _ip("-o", "-4", "addr", "show", check=False).stdout
    nets: set[ipaddress.IPv4Network] = set()
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+/\d+)", out):
        nets.add(ipaddress.IPv4Interface(m.group(1)).network)
    return nets


LOCAL_SUBNETS = ipaddress.IPv4Network("10.77.0.0/16")


def pick_subnet(requested: str | None, *, pool: ipaddress.IPv4Network = LOCAL_SUBNETS,
                also_used: Sequence[ipaddress.IPv4Network] = ()) -> ipaddress.IPv4Network:
    """A /24 of `pool` (or the one requested) that overlaps nothing on this host, nor
    `also_used` (the docker provider: every Docker network's subnet)."""
    used = used_subnets() | set(also_used)
    if requested:
        try:
            net = ipaddress.IPv4Network(requested, strict=True)
        except ValueError as e:
            raise BadInput(f"bad --subnet {requested!r}: {e}") from None
        if net.prefixlen != 24:
            raise BadInput(f"--subnet must be a /24, got {requested}")
        if any(net.overlaps(u) for u in used):
            raise BadInput(f"--subnet {requested} is already in use on this host")
        return net
    for net in pool.subnets(new_prefix=24):
        if not any(net.overlaps(u) for u in used):
            return net
    raise BadInput(f"no free /24 in {pool} for a new cluster; give --subnet")


def add_host_namespace(ns: str, veth: str, address: str, *, bridge: str | None = None,
                       parent: str | None = None, prefixlen: int = 24) -> None:
    """A namespace whose one interface `eth0` has `address`: a veth whose other end
    (`veth`) is a port of `bridge`, or else a macvlan on `parent`, an interface of this
    machine that is not a bridge (the docker and ssh providers' client namespaces)."""
    _ip("netns", "add", ns)
    if bridge is not None:
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", bridge, "up")
    else:
        assert parent is not None
        _ip("link", "add", veth, "link", parent, "type", "macvlan", "mode", "bridge")
        _ip("link", "set", veth, "netns", ns)
        _ip("-n", ns, "link", "set", veth, "name", "eth0")
    _ip("-n", ns, "addr", "add", f"{address}/{prefixlen}", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")


@dataclass
class LocalNode:
    """A network namespace with one veth on the run's bridge (a `Node` and a `ClientHost`).

    Packet-drop rules go into a chain of this run's own (`lc-<run id>`), jumped to from
    INPUT, so a heal flushes only what lockcheck put there; redirects to a proxy go
    into a chain of the same name in the nat table, jumped to from PREROUTING.
    """

    name: str
    address: str
    netns: str
    workdir: Path
    chain: str
    on_spawn: Any = None  # callback(pid) so the registry learns every PID at once
    _chain_ready: bool = False
    _nat_ready: bool = False

    own_network = True  # a ClientHost with an address of its own: partitions can cut it

    def _wrap(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(
        self, argv: Sequence[str], *, timeout: float = 10.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._wrap(argv), capture_output=True, text=True, check=check, timeout=timeout
        )

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
    ) -> LocalDaemon:
        # the node's files are this machine's: `log` (Node) and `log_path` (ClientHost)
        # are the same thing here
        log_path = log_path or log
        log_fh = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_fh = log_path.open("ab")
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        try:
            # `ip netns exec` execs in place, so the Popen PID is the daemon itself.
            # A new session keeps Ctrl-C at the terminal away from it: the controller
            # stops everything in order instead.
            popen = subprocess.Popen(
                self._wrap(argv),
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=stdout if stdout is not None else (log_fh or subprocess.DEVNULL),
                stderr=log_fh if log_fh is not None else subprocess.DEVNULL,
                env=full_env,
                start_new_session=True,
            )
        finally:
            if log_fh is not None:
                log_fh.close()
        if self.on_spawn is not None:
            self.on_spawn(popen.pid)
        return LocalDaemon(name=name, node=self.name, argv=list(argv), log_path=log_path,
                           popen=popen, pid=popen.pid)

    def write_file(self, path: Path, text: str) -> None:
        replace_file(path, text)  # in one step: a clock file is read at every clock call

    def fetch(self, path: Path, dest: Path) -> bool:
        if not path.is_file():
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        return True

    def _ensure_chain(self, table: str = "filter", hook: str = "INPUT") -> None:
        ipt = ["iptables", "-w", "-t", table]
        self.run([*ipt, "-N", self.chain], check=False)  # exists: fine
        if self.run([*ipt, "-C", hook, "-j", self.chain], check=False).returncode != 0:
            self.run([*ipt, "-I", hook, "-j", self.chain])

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        if not sources:
            return
        if not 0 < probability <= 1:
            raise ValueError(f"drop probability must be in (0, 1], got {probability}")
        if not self._chain_ready:
            self._ensure_chain()
            self._chain_ready = True
        # below 1, each packet is dropped on its own with that probability
        chance = ([] if probability >= 1 else
                  ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}"])
        self.run(["iptables", "-w", "-A", self.chain, "-s", ",".join(sources), *chance,
                  "-j", "DROP"])

    def heal(self) -> None:
        if self._chain_ready:  # no chain yet: nothing was ever blocked here
            self.run(["iptables", "-w", "-F", self.chain])

    def intercept(self, port: int, to_port: int, sources: Sequence[str]) -> None:
        if not sources:
            return
        if not self._nat_ready:
            self._ensure_chain("nat", "PREROUTING")
            self._nat_ready = True
        self.run(["iptables", "-w", "-t", "nat", "-A", self.chain, "-p", "tcp",
                  "-s", ",".join(sources), "--dport", str(port),
                  "-j", "REDIRECT", "--to-ports", str(to_port)])

    def unintercept(self) -> None:
        if self._nat_ready:
            self.run(["iptables", "-w", "-t", "nat", "-F", self.chain])


@dataclass
class LocalCluster:
    """Bridge + one namespace per node and per client, registered for cleanup."""

    n_nodes: int
    n_clients: int
    registry: Registry
    kind: str = "test"
    subnet: str | None = None
    run_id: str = field(default_factory=new_run_id)
    nodes: list[LocalNode] = field(default_factory=list)
    clients: list[LocalNode] = field(default_factory=list)
    state: RunState | None = None

    provider = "local"

    @property
    def bridge(self) -> str:
        return f"lcb{self.run_id}"

    @property
    def workdir(self) -> Path:
        return Path(f"/tmp/lockcheck-{self.run_id}")

    @property
    def hosts(self) -> list[LocalNode]:
        return self.nodes + self.clients

    def _note_pid(self, pid: int) -> None:
        assert self.state is not None
        self.state.pids.append(pid)
        self.registry.save(self.state)

    def up(self) -> LocalCluster:
        if not 1 <= self.n_nodes <= MAX_NODES:
            raise BadInput(f"--nodes must be between 1 and {MAX_NODES}")
        if not 0 <= self.n_clients <= MAX_CLIENTS:
            raise BadInput(f"--concurrency must be between 1 and {MAX_CLIENTS}")
        # two runs starting at once must not pick the same free subnet
        with self.registry.locked():
            net = pick_subnet(self.subnet)
            base = net.network_address
            me = os.getpid()
            self.state = RunState(
                run_id=self.run_id, kind=self.kind, owner_pid=me,
                owner_start=pid_start_time(me), subnet=str(net), bridge=self.bridge,
                workdir=str(self.workdir), created=time.time(),
            )
            self.registry.save(self.state)  # before creating anything: a crash stays findable
            self.workdir.mkdir(mode=0o755, parents=True, exist_ok=True)
            write_owner(self.workdir, self.registry)
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{base + 1}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        specs = [(f"n{i + 1}", base + NODE_HOST_OFFSET + i) for i in range(self.n_nodes)]
        specs += [(f"c{i}", base + CLIENT_HOST_OFFSET + i) for i in range(self.n_clients)]
        for name, addr in specs:
            ns = f"lc-{self.run_id}-{name}"
            veth = f"lc{self.run_id}{name}"
            self.state.namespaces.append(ns)
            self.registry.save(self.state)
            add_host_namespace(ns, veth, str(addr), bridge=self.bridge)
            node = LocalNode(name=name, address=str(addr), netns=ns,
                             workdir=self.workdir / name, chain=f"lc-{self.run_id}",
                             on_spawn=self._note_pid)
            (self.nodes if name.startswith("n") else self.clients).append(node)
            self.state.nodes[name] = str(addr)
        self.registry.save(self.state)
        return self

    def describe(self) -> dict[str, Any]:
        st = self.state
        return {"provider": self.provider, "run_id": self.run_id,
                "subnet": st.subnet if st else None, "bridge": self.bridge,
                "hosts": dict(st.nodes) if st else {}}

    def keep(self, services: Mapping[str, Mapping[str, object]]) -> None:
        """Leave it running: `lockcheck cluster down` (or status) finds it by its kind."""
        if self.state is None:
            return
        self.kind = "cluster"
        keep_running(self.state, self.registry, services)
        self.state = None  # down() must not remove it now

    def down(self) -> None:
        if self.state is None:
            return
        destroy(self.state, self.registry)
        self.state = None

    def __enter__(self) -> LocalCluster:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()


def _kill_pids(pids: Sequence[int]) -> None:
    live = [p for p in set(pids) if pid_alive(p)]
    for p in live:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(pid_alive(p) for p in live):
        for p in live:  # reap our own children so they don't linger as zombies
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p, os.WNOHANG)
        time.sleep(0.02)


def netns_pids(ns: str) -> list[int]:
    r = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def destroy(state: RunState, registry: Registry) -> None:
    """Remove everything a run created: processes, namespaces, bridge, temp dir, the
    shared-memory files libfaketime left for its processes, state."""
    # Only processes inside our own namespaces are killed: a PID remembered in the
    # registry may have been reused by an unrelated process since the run died.
    # A few passes: a fault being put in place or healed as the run is interrupted may
    # start a process in a namespace after the first listing, and a namespace with a
    # process left in it outlives `ip netns del`, and its veth with it.
    pids: list[int] = []
    for _ in range(3):
        found = [p for ns in state.namespaces for p in netns_pids(ns)]
        if not found:
            break
        _kill_pids(found)
        pids += found
    remove_shm([*state.pids, *pids])  # only for processes that are gone
    for ns in state.namespaces:
        _ip("netns", "del", ns, check=False)
        # the host end of the namespace's veth, in case the namespace lingers
        if ns.startswith(f"lc-{state.run_id}-"):
            veth = f"lc{state.run_id}{ns.removeprefix(f'lc-{state.run_id}-')}"
            if Path(f"/sys/class/net/{veth}").exists():
                _ip("link", "del", veth, check=False)
    if state.bridge:  # the docker and ssh providers' client namespaces need none
        _ip("link", "del", state.bridge, check=False)
    if state.workdir.startswith("/tmp/lockcheck-"):
        shutil.rmtree(state.workdir, ignore_errors=True)
    registry.remove(state.run_id)


def list_namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_bridges() -> list[str]:
    out = _ip("-o", "link", "show", "type", "bridge", check=False).stdout
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", out, re.M)]


OWNER_FILE = "owner.json"


def write_owner(workdir: Path, registry: Registry) -> None:
    """Who made this run, and in which registry: a reap through another registry
    (LOCKCHECK_STATE_DIR) must not take the run's namespaces for an orphan's."""
    me = os.getpid()
    replace_file(workdir / OWNER_FILE, json.dumps(
        {"pid": me, "start": pid_start_time(me), "registry": str(registry.dir)}))


def claimed_elsewhere(run_id: str, registry: Registry, *, tmp: Path = Path("/tmp"),
                      default: Path = DEFAULT_STATE_DIR) -> bool:
    """A run not in `registry` that is still someone's: its owner is alive, or another
    registry (the default one, or the one its owner file names) has its entry, and
    that registry's own reap will clean it."""
    dirs = {default}
    try:
        owner = json.loads((tmp / f"lockcheck-{run_id}" / OWNER_FILE).read_text())
        pid, start, where = int(owner["pid"]), owner["start"], str(owner["registry"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # made by a lockcheck that wrote no owner file, or half gone
    else:
        if pid_alive(pid) and pid_start_time(pid) == start:
            return True
        dirs.add(Path(where))
    dirs.discard(registry.dir)
    return any((d / f"{run_id}{ext}").exists() for d in dirs for ext in (".json", ".remote"))


def cleanup_leftovers(registry: Registry, *, include_live: bool = False) -> list[str]:
    """Destroy what dead runs left behind; with include_live, every lockcheck cluster.

    Returns the run ids cleaned. Resources are found through the registry and, for a
    run killed before it could write its registry entry, by lockcheck's own names;
    what another registry knows, or a live lockcheck owns, is left alone.
    Under the registry lock: a run starting meanwhile registers itself (under the same
    lock) before it creates anything, so its new bridge is never taken for an orphan.
    """
    with registry.locked():
        return _cleanup_leftovers(registry, include_live)


def _cleanup_leftovers(registry: Registry, include_live: bool) -> list[str]:
    cleaned: list[str] = []
    live_ids: set[str] = set()
    for st in registry.all():
        if st.provider != "local":  # that provider's own reap cleans it
            live_ids.add(st.run_id)
            continue
        if not include_live and (st.owner_alive() or st.kind == "cluster"):
            live_ids.add(st.run_id)
            continue
        destroy(st, registry)
        cleaned.append(st.run_id)
    by_id: dict[str, RunState] = {}
    for ns in list_namespaces():
        m = NS_RE.match(ns)
        if m and m.group(1) not in live_ids:
            rid = m.group(1)
            by_id.setdefault(rid, RunState(rid, "orphan", 0, None, "", f"lcb{rid}",
                                           f"/tmp/lockcheck-{rid}")).namespaces.append(ns)
    for br in list_bridges():
        m = BRIDGE_RE.match(br)
        if m and m.group(1) not in live_ids:
            rid = m.group(1)
            by_id.setdefault(rid, RunState(rid, "orphan", 0, None, "", br, f"/tmp/lockcheck-{rid}"))
    for p in Path("/tmp").glob("lockcheck-*"):
        rid = p.name.removeprefix("lockcheck-")
        if re.fullmatch(r"[0-9a-f]{6}", rid) and rid not in live_ids:
            by_id.setdefault(rid, RunState(rid, "orphan", 0, None, "", f"lcb{rid}", str(p)))
    for rid, st in by_id.items():
        if not include_live and claimed_elsewhere(rid, registry):
            continue
        destroy(st, registry)
        if rid not in cleaned:
            cleaned.append(rid)
    return cleaned


# -- the local provider -------------------------------------------------------------------


def _make(req: ClusterRequest) -> LocalCluster:
    return LocalCluster(req.nodes, req.clients, req.registry, kind=req.kind, subnet=req.subnet)


def remove_kept(registry: Registry) -> list[str]:
    removed = []
    for st in registry.all():
        if st.kind == "cluster" and st.provider == "local":
            destroy(st, registry)
            removed.append(st.run_id)
    return removed


def prerequisites() -> str | None:
    from lockcheck.preflight import INSTALL, is_root

    if not is_root():
        return "needs root (it creates network namespaces); run it as root or with sudo"
    for b in ("ip", "iptables"):
        if shutil.which(b) is None:
            return f"{b} not found; install it with: {INSTALL[b]}"
    return None


def check_subnet(subnet: str) -> None:
    pick_subnet(subnet)


PROVIDER = Provider(
    name="local",
    description="network namespaces on a bridge of this machine (the default)",
    make=_make, reap=cleanup_leftovers, remove_kept=remove_kept,
    prerequisites=prerequisites, max_nodes=MAX_NODES, max_clients=MAX_CLIENTS,
    check_subnet=check_subnet, place="netns lc-{run_id}-{node}", pids_here=True,
)
