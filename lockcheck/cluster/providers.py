"""Providers by name: who makes a run's cluster, and who cleans up after dead runs.

`local` (network namespaces on this machine), `docker` (containers on a network
lockcheck creates), `ssh` (hosts listed in a nodes file) and `inproc` (plain
processes on loopback, without root). Adding one is one module
with a `Provider` entry here; the runner and the CLI only go through this table.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcheck.cluster.api import Cluster
from lockcheck.cluster.state import Registry
from lockcheck.errors import BadInput

if TYPE_CHECKING:
    from lockcheck.spec import TestSpec


@dataclass(frozen=True, kw_only=True)
class ClusterRequest:
    """What a run asks of a provider."""

    nodes: int
    clients: int
    registry: Registry
    subnet: str | None = None
    kind: str = "test"  # "test", or "cluster" for one left running on purpose
    # the provider's own options (`--nodes-file`, `--accept-new-host-keys`, `--image`)
    options: Mapping[str, Any] = field(default_factory=dict)
    # Debian packages the servers need, for providers that install them on the nodes
    packages: tuple[str, ...] = ()
    say: Callable[[str], None] = lambda line: None  # a line for the user (a new host key)


@dataclass(frozen=True, kw_only=True)
class Provider:
    name: str
    description: str
    make: Callable[[ClusterRequest], Cluster]
    # remove what dead runs left behind (never a live run, never a cluster kept on
    # purpose); returns the run ids cleaned
    reap: Callable[[Registry], list[str]]
    # `lockcheck cluster down`: also the clusters that were left running
    remove_kept: Callable[[Registry], list[str]]
    prerequisites: Callable[[], str | None]  # why this provider cannot run here, or None
    max_nodes: int
    max_clients: int
    check_subnet: Callable[[str], None] = lambda subnet: None  # raises BadInput
    # before anything exists: the provider's options and what it can do for this spec
    # (a nodes file that does not parse, a host that cannot be logged in to, a missing
    # image, a fault it cannot inject); raises BadInput; says what the user must know
    check: Callable[[TestSpec, Callable[[str], None]], None] = lambda spec, say: None
    # nemesis -> why this provider can never inject it (refused before the run)
    refused: Mapping[str, str] = field(default_factory=dict)
    # nemesis -> how this provider does it where that differs from the local provider
    notes: Mapping[str, str] = field(default_factory=dict)


def _local_make(req: ClusterRequest) -> Cluster:
    from lockcheck.cluster.netns import LocalCluster

    return LocalCluster(req.nodes, req.clients, req.registry, kind=req.kind, subnet=req.subnet)


def _local_reap(registry: Registry) -> list[str]:
    from lockcheck.cluster.netns import cleanup_leftovers

    return cleanup_leftovers(registry)


def _local_remove_kept(registry: Registry) -> list[str]:
    from lockcheck.cluster.netns import destroy

    removed = []
    for st in registry.all():
        if st.kind == "cluster" and st.provider == "local":
            destroy(st, registry)
            removed.append(st.run_id)
    return removed


def _local_prerequisites() -> str | None:
    from lockcheck.preflight import INSTALL, is_root

    if not is_root():
        return "needs root (it creates network namespaces); run it as root or with sudo"
    for b in ("ip", "iptables"):
        if shutil.which(b) is None:
            return f"{b} not found; install it with: {INSTALL[b]}"
    return None


def _local_check_subnet(subnet: str) -> None:
    from lockcheck.cluster.netns import pick_subnet

    pick_subnet(subnet)


def _local() -> Provider:
    from lockcheck.cluster.netns import MAX_CLIENTS, MAX_NODES

    return Provider(
        name="local",
        description="network namespaces on a bridge of this machine (the default)",
        make=_local_make, reap=_local_reap, remove_kept=_local_remove_kept,
        prerequisites=_local_prerequisites, max_nodes=MAX_NODES, max_clients=MAX_CLIENTS,
        check_subnet=_local_check_subnet,
    )


def _docker() -> Provider:
    from lockcheck.cluster import containers

    return containers.provider()


def _ssh() -> Provider:
    from lockcheck.cluster import ssh

    return ssh.provider()


def _inproc() -> Provider:
    from lockcheck.cluster import inproc

    return inproc.provider()


PROVIDERS: dict[str, Provider] = {"local": _local(), "docker": _docker(), "ssh": _ssh(),
                                  "inproc": _inproc()}


def provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise BadInput(f"unknown provider {name!r}; available: {', '.join(PROVIDERS)}") from None


def check_provider(p: Provider, spec: TestSpec,
                   say: Callable[[str], None] = lambda line: None) -> None:
    """Refuse, with one line, a fault this provider cannot inject or options it cannot
    use, before anything is created (exit 254, like a backend's missing capability)."""
    for n in spec.nemesis:
        if n in p.refused:
            raise BadInput(f"--nemesis {n} is not available with --provider {p.name}: "
                           f"{p.refused[n]}")
    p.check(spec, say)
