"""The docker provider: each node is a container on a bridge network lockcheck creates.

* The network `lc-<run id>` has a /24 of its own from 10.78.0.0/16 and the bridge
  device `lcd<run id>`; containers `lc-<run id>-n1`, ... get fixed addresses (.11, ...),
  labels naming the run, NET_ADMIN (for iptables inside them) and the node image
  (`cluster/images.py`), whose PID 1 is tini. Everything is registered before it is
  created and removed at the end; `reap` also finds containers and networks by label.
* Servers are started with `docker exec` (`cluster/remote.py`: detached, PID and start
  time kept); kill, pause and signals act on that PID inside the container; partitions
  are iptables rules in the run's chain inside each container's own namespace; logs
  are read back with `docker exec cat`.
* Clients are namespaces of this machine with a veth on the network's bridge (.101,
  ...), so they can be cut off one by one: the daemon must run on this machine.
* This machine's firewall is never touched: with a daemon started with
  `--iptables=false` nothing is added to it, and the rules lockcheck adds live inside
  the containers. A daemon that manages iptables sets the FORWARD policy to DROP,
  which breaks the local provider's bridges: docs/providers.md says how to run one
  that does not.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockcheck.cluster import images
from lockcheck.cluster.clienthosts import (
    end_namespaces,
    heal_namespaces,
    host_addresses,
    link_exists,
    make_namespaces,
)
from lockcheck.cluster.netns import (
    CLIENT_HOST_OFFSET,
    NODE_HOST_OFFSET,
    LocalNode,
    destroy,
    new_run_id,
    pick_subnet,
)
from lockcheck.cluster.node import pid_start_time
from lockcheck.cluster.providers import ClusterRequest, Provider, ProviderOption
from lockcheck.cluster.remote import RemoteNode, in_parallel
from lockcheck.cluster.shell_session import PooledShell, SessionPool
from lockcheck.cluster.state import Registry, RunState, keep_running
from lockcheck.errors import BadInput

if TYPE_CHECKING:
    from lockcheck.preflight import Finding
    from lockcheck.spec import TestSpec

LABEL = "lockcheck.run"
SUBNETS = ipaddress.IPv4Network("10.78.0.0/16")
MAX_NODES = 89
MAX_CLIENTS = 150
API_TIMEOUT_S = 120
NODE_ROOT = "/var/tmp"  # inside the container: /var/tmp/lockcheck-<id>/<node>

def daemon_address() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect() -> Any:
    """A client of the Docker daemon (DOCKER_HOST, else the default socket)."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=API_TIMEOUT_S)
        client.ping()
    except docker.errors.DockerException as e:
        why = str(e).split("(", 1)[0].strip() or type(e).__name__
        raise BadInput(f"the docker provider cannot reach a Docker daemon at "
                       f"{daemon_address()} ({why}); start one or set DOCKER_HOST "
                       "(docs/providers.md)") from None
    return client


@dataclass
class DockerChannel:
    """A `docker exec` with stdin attached, as a `shell_session.Channel`: the daemon
    sends stdout and stderr as frames (an 8-byte header: stream, 3 zeros, length)."""

    sock: Any  # the hijacked connection's socket
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    ended: bool = False
    closed: bool = False

    def _exactly(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _frame(self) -> bool:
        header = self._exactly(8)
        payload = self._exactly(int.from_bytes(header[4:8], "big")) if header else None
        if header is None or payload is None:
            self.ended = True
            return False
        (self.err if header[0] == 2 else self.out).extend(payload)
        return True

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, n: int) -> bytes:
        while not self.out and not self.ended:
            self._frame()
        data = bytes(self.out[:n])
        del self.out[:n]
        return data

    def settimeout(self, seconds: float) -> None:
        self.sock.settimeout(seconds)

    def stderr(self) -> bytes:
        return bytes(self.err)

    def finish(self, timeout: float) -> None:
        self.sock.shutdown(socket.SHUT_WR)
        self.sock.settimeout(timeout)
        while not self.ended:
            self._frame()

    def close(self) -> None:
        self.closed = True
        self.sock.close()


@dataclass
class DockerShell(PooledShell):
    """Commands in one container (a `cluster.remote.Shell`), on a few long-lived
    `docker exec` shells (`shell_session.py`): about a millisecond a command instead
    of a tenth of a second for an `exec_run` each."""

    container: Any = None

    def start(self, argv: Sequence[str]) -> DockerChannel:
        api = self.container.client.api
        ex = api.exec_create(self.container.id, list(argv), stdin=True, stdout=True,
                             stderr=True, tty=False)
        sock = api.exec_start(ex["Id"], socket=True)
        return DockerChannel(getattr(sock, "_sock", sock))  # the socket under a SocketIO


def docker_shell(container: Any, scratch: str) -> DockerShell:
    shell = DockerShell(f"container {container.name}",
                        SessionPool(lambda argv: shell.start(argv), scratch),
                        container=container)
    return shell


def docker_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    """Every subnet a Docker network of this daemon has."""
    out = []
    for net in client.networks.list():
        for pool in (net.attrs.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(KeyError, ValueError):
                out.append(ipaddress.IPv4Network(pool["Subnet"], strict=False))
    return out


@dataclass
class DockerCluster:
    """A network, one container per node, one client namespace per client."""

    n_nodes: int
    n_clients: int
    registry: Registry
    kind: str = "test"
    subnet: str | None = None
    image: str = images.IMAGE
    server_root: str | None = None  # mounted read-only at the same path in every node
    run_id: str = field(default_factory=new_run_id)
    nodes: list[RemoteNode] = field(default_factory=list)
    clients: list[LocalNode] = field(default_factory=list)
    state: RunState | None = None
    client: Any = None

    provider = "docker"

    @property
    def workdir(self) -> Path:
        return Path(f"/tmp/lockcheck-{self.run_id}")

    @property
    def network(self) -> str:
        return f"lc-{self.run_id}"

    @property
    def bridge(self) -> str:
        return f"lcd{self.run_id}"

    def _save(self) -> None:
        assert self.state is not None
        self.registry.save(self.state)

    def _note_pid(self, pid: int) -> None:
        assert self.state is not None
        self.state.pids.append(pid)
        self._save()

    def up(self) -> DockerCluster:
        if not 1 <= self.n_nodes <= MAX_NODES:
            raise BadInput(f"--nodes must be between 1 and {MAX_NODES}")
        if not 0 <= self.n_clients <= MAX_CLIENTS:
            raise BadInput(f"--concurrency must be between 1 and {MAX_CLIENTS}")
        self.client = client = connect()
        require_image(client, self.image)
        from docker.types import IPAMConfig, IPAMPool

        with self.registry.locked():  # two runs starting at once: two different subnets
            net = pick_subnet(self.subnet, pool=SUBNETS, also_used=docker_subnets(client))
            me = os.getpid()
            self.state = RunState(
                run_id=self.run_id, kind=self.kind, owner_pid=me,
                owner_start=pid_start_time(me), subnet=str(net), bridge="",
                workdir=str(self.workdir), created=time.time(), provider="docker",
                remote={"daemon": daemon_address(), "network": self.network,
                        "containers": []})
            self._save()  # before anything exists: a crash stays findable
            self.workdir.mkdir(mode=0o755, parents=True, exist_ok=True)
            client.networks.create(
                self.network, driver="bridge", labels={LABEL: self.run_id},
                ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=str(net),
                                                       gateway=str(net.network_address + 1))]),
                options={"com.docker.network.bridge.name": self.bridge,
                         "com.docker.network.bridge.enable_ip_masquerade": "false"})
        if not link_exists(self.bridge):
            raise BadInput(f"the Docker network's bridge {self.bridge} is not on this machine: "
                           "the docker provider needs the daemon to run here (its clients "
                           "are namespaces of this machine on that bridge)")
        addresses = host_addresses(net, NODE_HOST_OFFSET, self.n_nodes)
        self.nodes = self._start_containers(addresses)
        self.clients = make_namespaces(
            self.state, self.registry, self.workdir, self.bridge,
            host_addresses(net, CLIENT_HOST_OFFSET, self.n_clients), 24, self._note_pid)
        return self

    def _start_containers(self, addresses: list[str]) -> list[RemoteNode]:
        assert self.state is not None
        api = self.client.api
        names = [f"n{i + 1}" for i in range(len(addresses))]
        address = dict(zip(names, addresses, strict=True))
        for name in names:
            self.state.remote["containers"].append(f"lc-{self.run_id}-{name}")
        self.state.nodes.update(address)
        self._save()

        # servers lockcheck installed itself: the same files at the same path, read-only
        binds = ({self.server_root: {"bind": self.server_root, "mode": "ro"}}
                 if self.server_root else None)

        def start(name: str) -> None:
            cname = f"lc-{self.run_id}-{name}"
            api.create_container(
                self.image, name=cname, hostname=name, labels={LABEL: self.run_id},
                host_config=api.create_host_config(network_mode=self.network,
                                                   cap_add=["NET_ADMIN"], binds=binds),
                networking_config=api.create_networking_config(
                    {self.network: api.create_endpoint_config(
                        ipv4_address=address[name])}))
            api.start(cname)

        in_parallel(names, start)  # each container is a few daemon round trips
        nodes = []
        for name, addr in zip(names, addresses, strict=True):
            c = self.client.containers.get(f"lc-{self.run_id}-{name}")
            nodes.append(RemoteNode(
                name=name, address=addr,
                workdir=Path(NODE_ROOT) / f"lockcheck-{self.run_id}" / name,
                chain=f"lc-{self.run_id}", shell=docker_shell(c, "/var/tmp/lockcheck-shell")))
        return nodes

    def describe(self) -> dict[str, Any]:
        st = self.state
        return {"provider": self.provider, "run_id": self.run_id,
                "subnet": st.subnet if st else None, "network": self.network,
                "bridge": self.bridge, "image": self.image,
                "containers": list(st.remote.get("containers", [])) if st else [],
                "hosts": dict(st.nodes) if st else {}}

    def keep(self, services: Mapping[str, Mapping[str, object]]) -> None:
        if self.state is not None:
            self.kind = "cluster"
            keep_running(self.state, self.registry, services)
            self.state = None
        self.close()

    def close(self) -> None:
        """End the nodes' shells (their scratch files go with them)."""
        in_parallel([n.shell for n in self.nodes if isinstance(n.shell, PooledShell)],
                    lambda sh: sh.close())

    def down(self) -> None:
        with contextlib.suppress(OSError):
            self.close()
        if self.state is None:
            return
        remove_run(self.state, self.registry, self.client)
        self.state = None


def remove_run(state: RunState, registry: Registry, client: Any | None = None) -> None:
    """Containers (with everything in them), the network, the client namespaces, the
    temp folder and the registry entry of one docker run."""
    import docker.errors

    client = client or connect()
    rid = state.run_id
    heal_namespaces(state)  # before the processes go (clienthosts.heal_namespaces)
    names = set(state.remote.get("containers", []))
    names |= {c.name for c in client.containers.list(all=True, filters={"label": f"{LABEL}={rid}"})}
    for name in sorted(names):
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(name, force=True)
    for net in client.networks.list(filters={"label": f"{LABEL}={rid}"}):
        with contextlib.suppress(docker.errors.NotFound):
            net.remove()
    end_namespaces(state)
    destroy(state, registry)  # client namespaces, /tmp/lockcheck-<id>, the registry entry


def require_image(client: Any, image: str) -> None:
    exists, _ = images.image_status(client, image)
    if not exists:
        raise BadInput(f"the docker provider needs the node image {image}; build it with: "
                       "lockcheck images build (or, without a registry, lockcheck images "
                       "build --base debootstrap)")


# -- the provider ----------------------------------------------------------------------


def _make(req: ClusterRequest) -> DockerCluster:
    return DockerCluster(req.nodes, req.clients, req.registry, kind=req.kind,
                         subnet=req.subnet, image=str(req.options.get("image", images.IMAGE)),
                         server_root=req.server_root)


def _runs(registry: Registry) -> list[RunState]:
    return [st for st in registry.all() if st.provider == "docker"]


def _reachable() -> Any | None:
    """A daemon client if one answers; reaping never fails a run for want of one."""
    try:
        return connect()
    except BadInput:
        return None


def reap(registry: Registry) -> list[str]:
    """Remove what dead docker runs left: by the registry, then by label (a run killed
    between creating a container and saving its name is still found)."""
    with registry.locked():
        runs = _runs(registry)
        client = _reachable() if runs or "DOCKER_HOST" in os.environ or \
            Path("/var/run/docker.sock").exists() else None
        if client is None:
            return []
        live = {st.run_id for st in runs if st.owner_alive() or st.kind == "cluster"}
        live |= {st.run_id for st in registry.all() if st.provider != "docker"}
        cleaned = []
        for st in runs:
            if st.run_id not in live:
                remove_run(st, registry, client)
                cleaned.append(st.run_id)
        labelled = {c.labels.get(LABEL) for c in
                    client.containers.list(all=True, filters={"label": LABEL})}
        labelled |= {n.attrs.get("Labels", {}).get(LABEL) for n in
                     client.networks.list(filters={"label": LABEL})}
        for rid in sorted(r for r in labelled if r and re.fullmatch(r"[0-9a-f]{6}", r)):
            if rid not in live and rid not in cleaned:
                remove_run(RunState(rid, "orphan", 0, None, "", "", f"/tmp/lockcheck-{rid}",
                                    provider="docker"), registry, client)
                cleaned.append(rid)
        return cleaned


def remove_kept(registry: Registry) -> list[str]:
    kept = [st for st in _runs(registry) if st.kind == "cluster"]
    if not kept:
        return []
    client = connect()
    for st in kept:
        remove_run(st, registry, client)
    return [st.run_id for st in kept]


def prerequisites() -> str | None:
    from lockcheck.preflight import is_root

    if not is_root():
        return "needs root (its clients are network namespaces); run it as root or with sudo"
    return None


def check(spec: TestSpec, say: Callable[[str], None]) -> None:
    """Before anything exists: a daemon answers and has the node image."""
    require_image(connect(), str(spec.provider_options.get("image", images.IMAGE)))


# -- doctor -----------------------------------------------------------------------------


def doctor(options: Mapping[str, Any], asked: bool) -> list[Finding]:
    """`lockcheck doctor`: the daemon and the node image. Not asked for, only where a
    daemon is configured, as information that does not fail the doctor."""
    from lockcheck.preflight import Finding

    if not asked and not (os.environ.get("DOCKER_HOST") or
                          os.path.exists("/var/run/docker.sock")):
        return []
    image = str(options.get("image", images.IMAGE))
    return [Finding(w, ok, d, fix, optional=not asked)
            for w, ok, d, fix in doctor_findings(image)]


def doctor_findings(image: str = images.IMAGE) -> list[tuple[str, bool, str, str]]:
    """(what, ok, detail, fix) for `lockcheck doctor`: daemon, image."""
    try:
        client = connect()
    except BadInput as e:
        return [("docker daemon", False, str(e).split(" (", 1)[0].removeprefix(
            "the docker provider cannot reach a Docker daemon at ") + " not reachable",
            "start dockerd (docs/providers.md: without --iptables) or set DOCKER_HOST")]
    version = client.version().get("Version", "?")
    out = [("docker daemon", True, f"{daemon_address()} (Docker {version})", "")]
    exists, built_from = images.image_status(client, image)
    if not exists:
        out.append(("docker image", False, f"{image} not built",
                    "lockcheck images build (--base debootstrap without a registry)"))
    elif not images.up_to_date(built_from):
        out.append(("docker image", False, f"{image} is older than the Dockerfile",
                    "lockcheck images build"))
    else:
        out.append(("docker image", True, f"{image} (up to date)", ""))
    return out


PROVIDER = Provider(
    name="docker",
    description="a container per node on a Docker network lockcheck creates; clients "
                "in namespaces of this machine on that network's bridge",
    make=_make, reap=reap, remove_kept=remove_kept, prerequisites=prerequisites,
    max_nodes=MAX_NODES, max_clients=MAX_CLIENTS, check=check, doctor=doctor,
    options=(ProviderOption(flag="--image",
                            help=f"the node image [default: {images.IMAGE}]."),),
    refused={"delay": "its proxy is a lockcheck program, and the node image has no "
                      "lockcheck in it"},
    notes={"partition": "iptables in the run's chain inside each container",
           "kill": "SIGKILL of the server's PID inside its container",
           "pause": "SIGSTOP of the server's PID inside its container",
           "clock": "libfaketime inside the container: containers share this "
                    "machine's clock, which is never moved"})
