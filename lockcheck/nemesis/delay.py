"""Latency: a TCP proxy in front of each node's service, whose delay the nemesis sets.

No netem here (infra.md §4a), so latency comes from a userspace proxy
(`cluster/delay_proxy.py`). A connection made while the delay is off would bypass a
proxy put in later, and one made through it would stay with it after: so when a run
has the `delay` fault, a proxy sits in front of every node's service from before the
first client connects to the end (`prepare`: the clients' connections to the service
port are redirected to it with `Node.intercept`), and the fault only changes its
delay: 0 between faults, `--delay-ms` per round trip while it lasts. The service's
port comes from `DB.describe()`; traffic between the nodes is not delayed.

The proxies are daemons of their nodes: they stop at teardown and go with the
namespaces, and the next run's reap removes those of a run that was killed.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lockcheck.cluster.api import Daemon, Node
from lockcheck.cluster.probe import NotReady, tail_lines, tcp_exchange, wait_until
from lockcheck.nemesis.api import PrepareContext, RunContext
from lockcheck.nemesis.process import pick_targets

# below the kernel's ephemeral range (32768-60999): there an outgoing connection of the
# node (a replica's to its master) may hold the port, and the proxy cannot bind it
PROXY_PORT = 29001  # on each node, beside the service: where redirected clients land
CONTROL_PORT = 29002  # where the controller sets the delay
PREPARE = "lockcheck.nemesis.delay:prepare"


@dataclass
class Proxy:
    node: Node
    service_port: int
    daemon: Daemon

    def set_delay(self, ms: float, timeout: float = 2.0) -> None:
        """Set the delay and wait until the proxy says it is in force."""
        want = f"delay {round(ms)}"
        reply = tcp_exchange(self.node.address, CONTROL_PORT, f"{ms}\n".encode(),
                             timeout=timeout, until=b"\n").decode(errors="replace").strip()
        if reply != want:
            raise RuntimeError(f"delay proxy on {self.node.name} answered {reply!r}, "
                               f"not {want!r}")


def _answers(p: Proxy) -> bool:
    p.set_delay(0, timeout=0.5)
    return True


@dataclass
class Proxies:
    """The proxies of a run (a `Prepared`), one per node that has a service port."""

    proxies: dict[str, Proxy] = field(default_factory=dict)

    def worker_env(self, host: str) -> Mapping[str, str]:
        return {}

    def set_delay(self, nodes: list[str], ms: float) -> None:
        failed = []
        for n in nodes:
            try:
                self.proxies[n].set_delay(ms)
            except Exception as e:
                failed.append(f"{n}: {e}")
        if failed:
            raise RuntimeError(f"setting a delay of {ms:g} ms failed on " + "; ".join(failed))

    def close(self) -> None:
        for p in self.proxies.values():
            p.node.unintercept()
            p.daemon.stop(grace=1.0)


def _spawn(node: Node, port: int) -> Daemon:
    argv = [sys.executable, "-P", "-m", "lockcheck.cluster.delay_proxy", node.address,
            str(PROXY_PORT), node.address, str(port), str(CONTROL_PORT)]
    return node.spawn(f"delay-proxy-{node.name}", argv, log=node.workdir / "delay-proxy.log")


def _ready(p: Proxy) -> None:
    def log() -> str:
        out = p.node.run(["tail", "-n", "8", str(p.node.workdir / "delay-proxy.log")],
                         check=False).stdout
        return tail_lines(out, 8) or "(no log)"

    wait_until(partial(_answers, p), timeout=10.0, what=f"delay proxy on {p.node.name}",
               alive=p.daemon.alive, tail=log)


def prepare(ctx: PrepareContext) -> Proxies:
    proxies = Proxies()
    ports = {name: d.get("port") for name, d in ctx.db.describe().items()}
    clients = [c.address for c in ctx.cluster.clients]
    try:
        for node in ctx.cluster.nodes:
            port = ports.get(node.name)
            if not isinstance(port, int):
                continue
            proxies.proxies[node.name] = Proxy(node, port, _spawn(node, port))
        if not proxies.proxies:
            raise RuntimeError(f"{ctx.db.name} names no service port to put a delay on")
        for name, p in proxies.proxies.items():
            try:
                _ready(p)
            except NotReady:
                if p.daemon.alive():
                    raise
                # it exited while starting (its ports were once in the ephemeral range,
                # held by a connection): one more start, its log in the error if it fails
                p = proxies.proxies[name] = Proxy(p.node, p.service_port,
                                                  _spawn(p.node, p.service_port))
                _ready(p)
            p.node.intercept(p.service_port, PROXY_PORT, clients)
    except BaseException:
        proxies.close()
        raise
    return proxies


@dataclass
class Delay:
    proxies: Proxies
    delay_ms: int
    hold_s: float
    name: str = "delay"
    start_f: str = "start-delay"
    stop_f: str = "stop-delay"
    _slow: list[str] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        self._slow = pick_targets(sorted(self.proxies.proxies), rng)
        self.proxies.set_delay(self._slow, self.delay_ms)
        return {"fault": self.name, "targets": list(self._slow), "delay_ms": self.delay_ms}

    def stop(self) -> dict[str, Any]:
        names, self._slow = self._slow, []
        self.proxies.set_delay(names, 0)
        return {"fault": self.name, "targets": names}

    def heal(self) -> None:
        self._slow = []
        self.proxies.set_delay(sorted(self.proxies.proxies), 0)


def delay(ctx: RunContext) -> Delay:
    proxies = ctx.prepared[PREPARE]
    assert isinstance(proxies, Proxies)
    return Delay(proxies, ctx.spec.delay_ms, ctx.spec.fault_duration)
