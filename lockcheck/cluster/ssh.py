"""The ssh provider: nodes are hosts listed in a nodes file, driven over SSH (paramiko),
as Jepsen's control node drives its DB nodes.

At `up`, for each host in parallel: log in (host keys checked against known_hosts;
`--accept-new-host-keys` adds the key of a host not seen before, and says so, but a
*changed* key is always refused), check that sudo works, install the Debian packages
the servers need with apt, once (what is installed already is skipped), and make the
run's folder `/var/tmp/lockcheck-<run id>/<node>`. Everything lockcheck will touch on
a host is registered first: the host, then each daemon's PID and start time as it
starts. At `down` (and in `reap`, after a crash): those PIDs are killed (only if still
the same processes), the run's iptables chains and the jumps to them are deleted, a
host clock that was moved is set back, and the run's folder is removed. Installed
packages stay, as Jepsen's OS setup leaves them.

Commands are argument lists joined with `shlex.join`, so nothing from a nodes file or
a backend is ever parsed by the remote shell as code.

A host whose `/proc/sys/kernel/random/boot_id` is this machine's is this very machine
(the test suite's stand-in hosts are namespaces here): its node gets no host clock, so
no fault can move this machine's clock through it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockcheck.cluster.clienthosts import (
    end_namespaces,
    heal_namespaces,
    kill_plain_clients,
    link_exists,
    make_namespaces,
    plain_clients,
)
from lockcheck.cluster.netns import LocalNode, destroy, new_run_id
from lockcheck.cluster.node import pid_start_time
from lockcheck.cluster.nodes_file import HOST_KEYS, Host, NodesFile
from lockcheck.cluster.nodes_file import load as load_nodes_file
from lockcheck.cluster.providers import ClusterRequest, Provider, ProviderOption
from lockcheck.cluster.remote import (
    RemoteNode,
    in_parallel,
    kill_recorded,
    remove_faketime_files,
    remove_rules,
)
from lockcheck.cluster.shell_session import PooledShell, SessionPool
from lockcheck.cluster.state import Registry, RunState, keep_running
from lockcheck.errors import BadInput

if TYPE_CHECKING:
    from lockcheck.preflight import Finding
    from lockcheck.spec import TestSpec

log = logging.getLogger("lockcheck")

RUN_ROOT = "/var/tmp"  # a host's run folder: /var/tmp/lockcheck-<run id>
BASE_PACKAGES = ("iptables", "procps", "util-linux", "coreutils", "libfaketime")
APT_TIMEOUT_S = 900.0
# apt, with no service started by a package meanwhile (our policy-rc.d only if none)
APT = r'''made=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made=1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; rc=$?
[ $made = 1 ] && rm -f /usr/sbin/policy-rc.d
exit $rc
'''


def local_boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def fingerprint(key: Any) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass
class HostKeys:
    """known_hosts checking: reject unknown keys, or (accept_new) add them and say so."""

    known_hosts: str
    accept_new: bool
    say: Callable[[str], None]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def policy(self, host: Host) -> Any:
        import paramiko

        keys = self

        class Policy(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
                if not keys.accept_new:
                    raise BadInput(
                        f"the host key of {host.name} ({hostname}) is not in "
                        f"{keys.known_hosts}; check it and add it (ssh-keyscan -p "
                        f"{host.port} {host.address}), or accept new keys with "
                        "--accept-new-host-keys")
                client.get_host_keys().add(hostname, key.get_name(), key)
                with keys.lock:
                    p = Path(keys.known_hosts)
                    p.parent.mkdir(parents=True, exist_ok=True)
                    with p.open("a") as fh:
                        fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
                keys.say(f"accepted the new host key of {host.name} ({hostname}): "
                         f"{key.get_name()} {fingerprint(key)}, added to {keys.known_hosts} "
                         "(--accept-new-host-keys)")

        return Policy()


@dataclass
class ParamikoChannel:
    """An SSH exec channel as a `shell_session.Channel`."""

    chan: Any  # paramiko.Channel

    @property
    def closed(self) -> bool:
        return bool(self.chan.closed)

    def sendall(self, data: bytes) -> None:
        self.chan.sendall(data)

    def recv(self, n: int) -> bytes:
        data: bytes = self.chan.recv(n)
        return data

    def settimeout(self, seconds: float) -> None:
        self.chan.settimeout(seconds)

    def stderr(self) -> bytes:
        out = b""
        while self.chan.recv_stderr_ready():
            out += self.chan.recv_stderr(4096)
        return out

    def finish(self, timeout: float) -> None:
        self.chan.shutdown_write()
        self.chan.status_event.wait(timeout)

    def close(self) -> None:
        self.chan.close()


@dataclass
class SSHShell(PooledShell):
    """Commands on one host over one SSH connection, as root (through `sudo -n` for a
    user that is not root), on a few long-lived remote shells (`shell_session.py`)."""

    host: Host | None = None
    client: Any = None  # paramiko.SSHClient

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("sudo", "-n", "--") if self.host is not None and self.host.sudo else ()

    def start(self, argv: Sequence[str]) -> ParamikoChannel:
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise OSError(f"the SSH connection to {self.where} is closed")
        chan = transport.open_session(timeout=10.0)
        chan.exec_command(shlex.join([*self.prefix, *argv]))
        return ParamikoChannel(chan)

    def exec_once(self, argv: Sequence[str], timeout: float = 20.0) -> int:
        """One command on a channel of its own (no session, no scratch files)."""
        chan = self.start(argv)
        try:
            chan.settimeout(timeout)
            return int(chan.chan.recv_exit_status())
        finally:
            chan.close()

    def close(self) -> None:
        super().close()
        self.client.close()


def login(host: Host, keys: HostKeys, timeout: float, scratch: str,
          remove: str = "") -> SSHShell:
    """Connect and authenticate, or one line saying why not."""
    import paramiko

    client = paramiko.SSHClient()
    known = Path(keys.known_hosts)
    if known.is_file():
        client.load_host_keys(str(known))
    client.set_missing_host_key_policy(keys.policy(host))
    where = f"{host.name} ({host.user}@{host.address}:{host.port})"
    try:
        client.connect(host.address, port=host.port, username=host.user,
                       key_filename=host.key, look_for_keys=host.key is None,
                       allow_agent=host.key is None, timeout=timeout, banner_timeout=timeout,
                       auth_timeout=timeout)
    except BadInput:
        client.close()
        raise
    except paramiko.BadHostKeyException as e:
        client.close()
        raise BadInput(f"{where} offers the host key {e.key.get_name()} "
                       f"{fingerprint(e.key)}, which is not the one in {keys.known_hosts}: "
                       "refusing; if the host was rebuilt, remove its old key with "
                       f"ssh-keygen -f {keys.known_hosts} -R '{e.hostname}'") from None
    except paramiko.AuthenticationException as e:
        client.close()
        key = f"key {host.key}" if host.key else "the SSH agent or ~/.ssh keys"
        raise BadInput(f"cannot log in to {where} with {key}: {e}") from None
    except (OSError, paramiko.SSHException, EOFError) as e:
        client.close()
        raise BadInput(f"cannot reach {where}: {e or type(e).__name__}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    shell = SSHShell(f"{host.name} ({host.user}@{host.address}:{host.port})",
                     SessionPool(lambda argv: shell.start(argv), scratch, remove),
                     host=host, client=client)
    return shell


@dataclass
class SSHNode(RemoteNode):
    """A node on a host of its own: also a `cluster.api.HostClock`. The host's clock
    is moved with `date -s`, measured against the controller's clock first, so a reset
    puts it back where it was relative to ours (to about half a round trip)."""

    base_s: float | None = None  # host clock minus controller clock, before any move
    on_clock: Callable[[float | None, bool], None] | None = None  # into the registry

    def measure(self) -> float:
        t0 = time.time()
        r = self.run(["date", "+%s.%N"])
        t1 = time.time()
        return float(r.stdout.strip()) - (t0 + t1) / 2

    def set_clock(self, offset_ms: float) -> None:
        if self.base_s is None:
            self.base_s = self.measure()
            if self.on_clock is not None:
                self.on_clock(self.base_s, False)
        if self.on_clock is not None:
            self.on_clock(self.base_s, offset_ms != 0)  # registered before it moves
        set_host_clock(self, time.time() + self.base_s + offset_ms / 1000.0)
        if self.on_clock is not None and offset_ms == 0:
            self.on_clock(self.base_s, False)

    def reset_clock(self) -> None:
        if self.base_s is not None:
            self.set_clock(0.0)


def set_host_clock(node: RemoteNode, epoch: float) -> None:
    node.run(["date", "-u", "-s", f"@{epoch:.6f}"])


@dataclass
class Prepared:
    shell: SSHShell
    same_machine: bool


def prepare(host: Host, keys: HostKeys, timeout: float, run_dir: str,
            packages: Sequence[str], say: Callable[[str], None]) -> Prepared:
    """Log in, check root through sudo, install what is missing, make the run folder."""
    shell = login(host, keys, timeout, f"{run_dir}/.sh", run_dir)
    try:
        try:
            code, out, _ = shell.run(["cat", "/proc/sys/kernel/random/boot_id"], timeout=20.0)
        except OSError as e:  # the remote shell did not start: sudo asked for a password
            raise BadInput(f"cannot run commands as root on {shell.where}"
                           f"{' with sudo -n' if host.sudo else ''}: {e}") from None
        same = code == 0 and out.decode().strip() == local_boot_id()
        install(shell, packages, say)
        shell.run(["mkdir", "-p", f"{run_dir}/{host.name}"], timeout=20.0)
    except BaseException:
        shell.close()
        raise
    return Prepared(shell, same)


def missing_packages(shell: SSHShell, packages: Sequence[str]) -> list[str]:
    _, out, _ = shell.run(["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\\n",
                           *packages], timeout=60.0)
    installed = set()
    for line in out.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("ii"):
            installed.add(parts[0].split(":")[0])
    return [p for p in packages if p not in installed]


def install(shell: SSHShell, packages: Sequence[str], say: Callable[[str], None]) -> None:
    """apt-get install of the packages that are not installed yet (none: no apt at all)."""
    missing = missing_packages(shell, packages)
    if not missing:
        return
    say(f"{shell.where}: installing {' '.join(missing)} with apt (once: installed "
        "packages are skipped)")
    code, out, err = shell.run(["sh", "-c", APT, "sh", *missing], timeout=APT_TIMEOUT_S)
    if code != 0:
        tail = (out + err).decode(errors="replace").strip().splitlines()[-3:]
        raise BadInput(f"apt-get install on {shell.where} failed (exit {code}): "
                       f"{' | '.join(tail)}")


@dataclass
class SSHCluster:
    """The first `n_nodes` hosts of a nodes file, and client hosts on the controller."""

    n_nodes: int
    n_clients: int
    registry: Registry
    nodes_file: NodesFile
    kind: str = "test"
    accept_new: bool = False
    packages: tuple[str, ...] = ()
    say: Callable[[str], None] = lambda line: None
    run_id: str = field(default_factory=new_run_id)
    nodes: list[RemoteNode] = field(default_factory=list)
    clients: list[LocalNode] = field(default_factory=list)
    state: RunState | None = None
    shells: dict[str, SSHShell] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    provider = "ssh"

    @property
    def workdir(self) -> Path:
        return Path(f"/tmp/lockcheck-{self.run_id}")

    @property
    def run_dir(self) -> str:
        return f"{RUN_ROOT}/lockcheck-{self.run_id}"

    @property
    def hosts(self) -> list[Host]:
        return list(self.nodes_file.hosts[: self.n_nodes])

    def _save(self) -> None:
        with self._lock:
            assert self.state is not None
            self.registry.save(self.state)

    def _entry(self, name: str) -> dict[str, Any]:
        assert self.state is not None
        entry: dict[str, Any] = self.state.remote["hosts"][name]
        return entry

    def up(self) -> SSHCluster:
        hosts = self.hosts
        if len(hosts) < self.n_nodes:
            raise BadInput(f"--nodes {self.n_nodes}: the nodes file lists only "
                           f"{len(self.nodes_file.hosts)} host(s)")
        with self.registry.locked():
            busy = hosts_in_use(self.registry, [h.address for h in hosts])
            if busy:
                raise BadInput(busy)
            me = os.getpid()
            self.state = RunState(
                run_id=self.run_id, kind=self.kind, owner_pid=me,
                owner_start=pid_start_time(me), subnet="", bridge="",
                workdir=str(self.workdir), created=time.time(), provider="ssh",
                remote={"known_hosts": self.nodes_file.known_hosts, "run_dir": self.run_dir,
                        "chain": f"lc-{self.run_id}",
                        "hosts": {h.name: {**h.to_json(), "pids": []} for h in hosts}})
            self.state.nodes = {h.name: h.address for h in hosts}
            self._save()  # before anything is touched on a host
        self.workdir.mkdir(mode=0o755, parents=True, exist_ok=True)
        keys = HostKeys(self.nodes_file.known_hosts, self.accept_new, self.say)
        packages = tuple(dict.fromkeys([*BASE_PACKAGES, *self.packages]))
        prepared = in_parallel(hosts, lambda h: prepare(
            h, keys, self.nodes_file.connect_timeout, self.run_dir, packages, self.say))
        for h, p in zip(hosts, prepared, strict=True):
            self.shells[h.name] = p.shell
            self.nodes.append(self._node(h, p))
        self.clients = self._clients()
        return self

    def _node(self, h: Host, p: Prepared) -> RemoteNode:
        def note_pid(pid: int, start: str) -> None:
            self._entry(h.name)["pids"].append([pid, start])
            self._save()

        def note_clock(base: float | None, moved: bool) -> None:
            self._entry(h.name).update(clock_base=base, clock_moved=moved)
            self._save()

        common: dict[str, Any] = dict(name=h.name, address=h.address,
                                      workdir=Path(self.run_dir) / h.name,
                                      chain=f"lc-{self.run_id}", shell=p.shell,
                                      on_spawn=note_pid)
        self._entry(h.name)["same_machine"] = p.same_machine
        if p.same_machine:
            return RemoteNode(**common)  # no host clock: it would be this machine's
        return SSHNode(**common, on_clock=note_clock)

    def _clients(self) -> list[LocalNode]:
        assert self.state is not None
        c = self.nodes_file.clients
        if c is None:
            return plain_clients(self.state, self.registry, self.workdir, self.n_clients)
        if self.n_clients > len(c.addresses):
            raise BadInput(f"--concurrency {self.n_clients}: the nodes file's clients have "
                           f"only {len(c.addresses)} address(es)")

        def note(pid: int) -> None:
            assert self.state is not None
            self.state.pids.append(pid)
            self._save()

        return make_namespaces(self.state, self.registry, self.workdir, c.link,
                               c.addresses[: self.n_clients], c.prefixlen, note)

    def describe(self) -> dict[str, Any]:
        st = self.state
        return {"provider": self.provider, "run_id": self.run_id,
                "nodes_file": self.nodes_file.path, "run_dir": self.run_dir,
                "clients": "namespaces" if self.nodes_file.clients else "processes",
                "same_machine": sorted(n.name for n in self.nodes
                                       if not isinstance(n, SSHNode)),
                "hosts": dict(st.nodes) if st else {}}

    def keep(self, services: Mapping[str, Mapping[str, object]]) -> None:
        if self.state is not None:
            self.kind = "cluster"
            with self._lock:
                keep_running(self.state, self.registry, services)
            self.state = None
        self.close()

    def close(self) -> None:
        in_parallel(list(self.shells.values()), lambda s: s.close())
        self.shells.clear()

    def down(self) -> None:
        if self.state is None:
            self.close()
            return
        try:
            remove_run(self.state, self.registry, self.shells)
        finally:
            self.state = None
            self.close()


def hosts_in_use(registry: Registry, addresses: Sequence[str]) -> str | None:
    """Two live runs on one host would fight over its ports: the second is refused."""
    for st in registry.all():
        if st.provider != "ssh" or not (st.owner_alive() or st.kind == "cluster"):
            continue
        shared = sorted(set(addresses) & {str(h.get("address")) for h in
                                          st.remote.get("hosts", {}).values()})
        if shared:
            return (f"host {shared[0]} is in use by lockcheck run {st.run_id} "
                    f"({'left running' if st.kind == 'cluster' else 'running'}); "
                    "remove it with: lockcheck cluster down")
    return None


def clean_host(shell: SSHShell, entry: Mapping[str, Any], run_dir: str, chain: str) -> None:
    """Everything one run put on one host: processes (by PID and start time) and the
    files libfaketime left for them, a moved clock, the run's chains, the run's folder."""
    kill_recorded(shell, entry.get("pids", []))
    remove_faketime_files(shell, [int(str(pid)) for pid, _ in entry.get("pids", [])])
    if entry.get("clock_moved") and entry.get("clock_base") is not None \
            and not entry.get("same_machine", True):
        shell.run(["date", "-u", "-s", f"@{time.time() + float(entry['clock_base']):.6f}"],
                  timeout=20.0)
    remove_rules(shell, chain)
    # the run's folder itself goes when the shell closes, once empty (stand-in hosts
    # share one: the last to close removes it)
    shell.run(["rm", "-rf", "--one-file-system", f"{run_dir}/{entry['name']}"], timeout=60.0)


CLEANUP_LOGINS = (10.0, 15.0, 20.0)  # a try's timeout; a busy host gets a longer one


def login_for_cleanup(host: Host, keys: HostKeys, run_dir: str) -> SSHShell:
    """A login to undo a run, tried again (with a longer wait) while the host cannot
    be reached: just after a run was killed its host can be slow to answer, and a
    cleanup given up leaves servers and rules on it until the next `cluster down`."""
    for i, timeout in enumerate(CLEANUP_LOGINS):
        try:
            return login(host, keys, timeout, f"{run_dir}/.sh", run_dir)
        except BadInput as e:
            if not str(e).startswith("cannot reach") or i == len(CLEANUP_LOGINS) - 1:
                raise
            log.info("%s: %s; trying again", host.name, e)
            time.sleep(1.0)
    raise AssertionError("unreachable")


def remove_run(state: RunState, registry: Registry,
               shells: Mapping[str, SSHShell] | None = None) -> None:
    """Clean every host of one ssh run, then the controller's side (client processes
    and namespaces, temp folder) and the registry entry. A host that cannot be reached
    stays in the registry, so that the next `lockcheck cluster down` tries it again."""
    remote = state.remote
    run_dir, chain = str(remote.get("run_dir", "")), str(remote.get("chain", ""))
    if not run_dir.startswith(f"{RUN_ROOT}/lockcheck-") or not chain.startswith("lc-"):
        raise RuntimeError(f"registry entry of run {state.run_id} names no run folder")
    keys = HostKeys(str(remote.get("known_hosts", "~/.ssh/known_hosts")), False, print)
    entries = list(remote.get("hosts", {}).values())
    failed: dict[str, str] = {}

    def one(entry: dict[str, Any]) -> None:
        name = str(entry["name"])
        shell = (shells or {}).get(name)
        try:
            if shell is None:
                host = Host(**{k: entry[k] for k in HOST_KEYS})
                shell = login_for_cleanup(host, keys, run_dir)
            try:
                clean_host(shell, entry, run_dir, chain)
            finally:
                if shells is None or name not in shells:
                    shell.close()
        except Exception as e:
            failed[name] = str(e)

    heal_namespaces(state)  # first: see there
    with contextlib.suppress(Exception):
        in_parallel(entries, one)
    kill_plain_clients(state)
    end_namespaces(state)
    destroy(state, registry)
    if failed:
        state.remote["hosts"] = {n: e for n, e in remote.get("hosts", {}).items()
                                 if n in failed}
        state.namespaces, state.remote["client_pids"] = [], []
        registry.save(state)
        raise RuntimeError("could not clean " + "; ".join(f"{n}: {w}" for n, w in
                                                           failed.items())
                           + f" (lockcheck cluster down tries again; --forget {state.run_id} "
                             "drops it)")


# -- the provider ----------------------------------------------------------------------


def _nodes_file(options: Mapping[str, Any]) -> NodesFile:
    path = options.get("nodes_file")
    if not path:
        raise BadInput("--provider ssh needs --nodes-file (the hosts, and how to log in: "
                       "docs/providers.md)")
    return load_nodes_file(str(path))


def _make(req: ClusterRequest) -> SSHCluster:
    return SSHCluster(req.nodes, req.clients, req.registry, _nodes_file(req.options),
                      kind=req.kind, accept_new=bool(req.options.get("accept_new_host_keys")),
                      packages=req.packages, say=req.say)


def _runs(registry: Registry) -> list[RunState]:
    return [st for st in registry.all() if st.provider == "ssh"]


def reap(registry: Registry) -> list[str]:
    cleaned = []
    for st in _runs(registry):
        if st.owner_alive() or st.kind == "cluster":
            continue
        try:
            remove_run(st, registry)
            cleaned.append(st.run_id)
        except RuntimeError as e:  # a host out of reach: kept for the next try
            log.warning("dead run %s not cleaned: %s", st.run_id, e)
    return cleaned


def remove_kept(registry: Registry) -> list[str]:
    kept = [st for st in _runs(registry) if st.kind == "cluster"]
    for st in kept:
        remove_run(st, registry)
    return [st.run_id for st in kept]


def prerequisites() -> str | None:
    try:
        import paramiko  # noqa: F401
    except ImportError:
        return "needs paramiko; install lockcheck with scripts/install"
    return None


def check(spec: TestSpec, say: Callable[[str], None]) -> None:
    """Before anything exists: the nodes file, what the faults need of the clients,
    and a login to each host that will be used (host key, key, root)."""
    nf = _nodes_file(spec.provider_options)
    if spec.nodes > len(nf.hosts):
        raise BadInput(f"--nodes {spec.nodes}: {nf.path} lists only {len(nf.hosts)} host(s)")
    if nf.clients is None:
        if "partition" in spec.nemesis and spec.nodes < 2:
            raise BadInput("--nemesis partition with --provider ssh and client workers as "
                           "plain processes cuts between nodes only: --nodes 1 leaves "
                           "nothing to cut (give --nodes 2 or more, or `clients:` in the "
                           "nodes file)")
        for n in spec.nemesis:
            if n in NEEDS_CLIENT_NAMESPACES:
                raise BadInput(f"--nemesis {n} cuts clients off one by one: with "
                               "--provider ssh that needs client namespaces (`clients:` "
                               "in the nodes file, docs/providers.md)")
    else:
        from lockcheck.preflight import is_root

        if not is_root():
            raise BadInput("client namespaces (`clients:` in the nodes file) need root")
        if not link_exists(nf.clients.link):
            raise BadInput(f"{nf.path}: clients.link {nf.clients.link} is not an interface "
                           "of this machine")
        if spec.concurrency > len(nf.clients.addresses):
            raise BadInput(f"--concurrency {spec.concurrency}: {nf.path} gives only "
                           f"{len(nf.clients.addresses)} client address(es)")
    keys = HostKeys(nf.known_hosts, bool(spec.provider_options.get("accept_new_host_keys")),
                    say)
    in_parallel(list(nf.hosts[: spec.nodes]), lambda h: can_log_in(h, keys, nf.connect_timeout))


def can_log_in(host: Host, keys: HostKeys, timeout: float) -> None:
    """Log in and run one command as root; one line saying why not."""
    shell = login(host, keys, timeout, "")
    try:
        code = shell.exec_once(["true"], timeout=30.0)
        if code != 0:
            raise BadInput(f"cannot run commands as root on {shell.where}"
                           f"{' with sudo -n (it asks for a password?)' if host.sudo else ''}")
    finally:
        shell.client.close()  # no session was opened: nothing to remove there


def doctor(options: Mapping[str, Any], asked: bool) -> list[Finding]:
    """`lockcheck doctor`: each host of the nodes file (not asked for: only if given)."""
    from lockcheck.preflight import Finding

    if not asked and not options.get("nodes_file"):
        return []
    if not options.get("nodes_file"):
        raise BadInput("lockcheck doctor --provider ssh needs --nodes-file")
    return [Finding(w, ok, d, fix) for w, ok, d, fix in doctor_findings(
        str(options["nodes_file"]), accept_new=bool(options.get("accept_new_host_keys")))]


def doctor_findings(path: str, accept_new: bool = False) -> list[tuple[str, bool, str, str]]:
    """(what, ok, detail, fix) per host of a nodes file: login, root, packages."""
    from lockcheck.backends import BACKENDS
    from lockcheck.preflight import debian_packages

    nf = load_nodes_file(path)
    wanted = list(dict.fromkeys([*BASE_PACKAGES, *debian_packages(
        [b for be in BACKENDS.values() for b in be.binaries])]))
    keys = HostKeys(nf.known_hosts, accept_new, print)

    def one(h: Host) -> tuple[str, bool, str, str]:
        what = f"ssh {h.name}"
        try:
            shell = login(h, keys, nf.connect_timeout, f"/tmp/lockcheck-doctor-{os.getpid()}")
        except BadInput as e:
            return what, False, str(e), "docs/providers.md (Real VMs)"
        try:
            _, out, _ = shell.run(["cat", "/proc/sys/kernel/random/boot_id"], timeout=20.0)
            same = out.decode().strip() == local_boot_id()
            missing = missing_packages(shell, wanted)
        except OSError as e:
            return what, False, f"{shell.where}: no root shell: {e}", "passwordless sudo"
        finally:
            shell.close()
        detail = f"{shell.where}" + (" (this very machine: no host clock)" if same else "")
        if missing:
            return (what, True, f"{detail}; a run installs what its backend needs of: "
                    f"{' '.join(missing)}", "")
        return what, True, detail, ""

    return in_parallel(list(nf.hosts), one)


# faults that cut a client alone (partition-clients, partition-holder) or its replies
# (reply-loss): none without namespaces
NEEDS_CLIENT_NAMESPACES = ("partition-clients", "partition-holder", "reply-loss")


PROVIDER = Provider(
    name="ssh",
    description="hosts from --nodes-file over SSH (real machines or VMs, as Jepsen's "
                "DB nodes); clients on this machine",
    make=_make, reap=reap, remove_kept=remove_kept, prerequisites=prerequisites,
    max_nodes=100, max_clients=150, check=check, doctor=doctor,
    reaches_server_root=False,
    options=(
        ProviderOption(flag="--nodes-file", path=True,
                       help="the hosts and how to log in to them (YAML or JSON)."),
        ProviderOption(flag="--accept-new-host-keys", is_flag=True,
                       help="add the keys of hosts not in known_hosts yet, and say so "
                            "(a changed key is always refused)."),
    ),
    refused={"delay": "its proxy is a lockcheck program, which the hosts do not have"},
    notes={"partition": "iptables in the run's chain on each host; clients are cut "
                        "too only with client namespaces (`clients:` in the nodes "
                        "file), else partitions cut between nodes",
           "kill": "SIGKILL of the server's PID on its host",
           "pause": "SIGSTOP of the server's PID on its host",
           "clock": "the host's own clock (date -s, reset at heal) on hosts of their "
                    "own; never on a host that is this machine"})
