"""Client hosts for the docker and ssh providers: always on the controller's machine.

Every worker of a run reads this machine's monotonic clock, so the history has one
clock whatever the nodes are. Two kinds:

* a **namespace** with an address of its own on the nodes' network: a veth on a bridge
  of this machine (the Docker network's, or the bridge a VM network hangs off), or a
  macvlan on the interface that faces the hosts. Nodes see each client's own address,
  so a partition can cut one client from some nodes, as with the local provider;
* a **plain process** of the controller, for hosts reached over a routed network.
  Clients then share the controller's address: a partition cannot cut them one by one,
  so partitions leave them out and cut between nodes only (`own_network` is False).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.cluster.netns import LocalNode, _kill_pids, add_host_namespace, netns_pids
from lockcheck.cluster.node import pid_alive, pid_start_time
from lockcheck.cluster.state import Registry, RunState


@dataclass
class PlainClient(LocalNode):
    """A client worker as a plain process of the controller (no namespace)."""

    own_network = False

    def _wrap(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        raise RuntimeError(f"{self.name} is a plain process of the controller: it shares "
                           "the controller's address and cannot be cut off alone")

    def heal(self) -> None:
        """Nothing was ever blocked here."""


def is_bridge(link: str) -> bool:
    return Path(f"/sys/class/net/{link}/bridge").is_dir()


def link_exists(link: str) -> bool:
    return Path(f"/sys/class/net/{link}").exists()


def make_namespaces(state: RunState, registry: Registry, workdir: Path, link: str,
                    addresses: Sequence[str], prefixlen: int,
                    on_spawn: Any) -> list[LocalNode]:
    """One namespace per address, on `link` (a bridge: veth ports; else macvlans),
    each registered before it exists. Named as the local provider's (`lc-<id>-c0`), so
    a reap by name finds them too."""
    out = []
    for i, addr in enumerate(addresses):
        name = f"c{i}"
        ns, veth = f"lc-{state.run_id}-{name}", f"lc{state.run_id}{name}"
        state.namespaces.append(ns)
        registry.save(state)
        if is_bridge(link):
            add_host_namespace(ns, veth, addr, bridge=link, prefixlen=prefixlen)
        else:
            add_host_namespace(ns, veth, addr, parent=link, prefixlen=prefixlen)
        state.nodes[name] = addr
        out.append(LocalNode(name=name, address=addr, netns=ns, workdir=workdir / name,
                             chain=f"lc-{state.run_id}", on_spawn=on_spawn))
    registry.save(state)
    return out


def plain_clients(state: RunState, registry: Registry, workdir: Path,
                  n: int) -> list[LocalNode]:
    """`n` plain-process client hosts; their workers' PIDs (with start times) go into
    the registry so that a reap can stop them after a crash."""
    def note(pid: int) -> None:
        state.remote.setdefault("client_pids", []).append([pid, pid_start_time(pid)])
        registry.save(state)

    hosts: list[LocalNode] = [PlainClient(name=f"c{i}", address="controller", netns="",
                                          workdir=workdir / f"c{i}", chain="", on_spawn=note)
                              for i in range(n)]
    for h in hosts:
        state.nodes[h.name] = "controller"
    registry.save(state)
    return hosts


def kill_plain_clients(state: RunState) -> None:
    """SIGKILL the plain client processes a run registered, if each is still the same
    process (same start time): a PID may have been reused since."""
    for pid, start in state.remote.get("client_pids", []):
        if pid_alive(pid) and pid_start_time(pid) == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def heal_namespaces(state: RunState) -> None:
    """Flush the run's drop rules in its client namespaces, before anything is killed
    (see `end_namespaces`)."""
    chain = f"lc-{state.run_id}"
    for ns in state.namespaces:
        subprocess.run(["ip", "netns", "exec", ns, "iptables", "-w", "-F", chain],
                       capture_output=True, timeout=15)


def end_namespaces(state: RunState) -> None:
    """Kill the client namespaces' processes, then destroy the TCP sockets they leave:
    a socket closed while a peer's packets were dropped retransmits its FIN for
    minutes and keeps its namespace, and its veth, alive after `ip netns del`."""
    _kill_pids([p for ns in state.namespaces for p in netns_pids(ns)])
    for ns in state.namespaces:
        subprocess.run(["ip", "netns", "exec", ns, "ss", "-K", "-t", "-a"],
                       capture_output=True, timeout=15)


def host_addresses(subnet: ipaddress.IPv4Network, offset: int, n: int) -> list[str]:
    base = subnet.network_address
    return [str(base + offset + i) for i in range(n)]
