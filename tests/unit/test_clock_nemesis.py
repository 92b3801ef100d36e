"""Which clock a clock fault moves: a host's own machine clock where the node is a host
of its own (HostClock), else the database's libfaketime clock; every stop and heal
sets each back. Fakes record the calls; the real clocks are proven in
tests/integration/test_nemesis_proofs.py and test_postgres.py."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from lockcheck.cluster.api import Clock, HostClock
from lockcheck.nemesis.api import RunContext
from lockcheck.nemesis.clock import clock_bump, clock_skew
from lockcheck.spec import TestSpec


@dataclass
class Machine:
    """A node on a host of its own."""

    name: str
    calls: list[tuple[str, float | None]] = field(default_factory=list)

    def set_clock(self, offset_ms: float) -> None:
        self.calls.append(("set", offset_ms))

    def reset_clock(self) -> None:
        self.calls.append(("reset", None))


@dataclass
class Plain:
    """A node without a clock of its own (a namespace, a container, this machine)."""

    name: str


@dataclass
class FakedDB:
    calls: list[tuple[str, str, float | None]] = field(default_factory=list)

    def fake_clock(self) -> None: ...

    def set_clock(self, node: str, offset_ms: float) -> None:
        self.calls.append(("set", node, offset_ms))

    def reset_clock(self, node: str) -> None:
        self.calls.append(("reset", node, None))


class NoClockDB:
    """etcd, ZooKeeper: servers that ignore libfaketime."""


def ctx(hosts: list[Any], db: Any, **spec: Any) -> RunContext:
    return RunContext(spec=TestSpec(**{"nemesis": ("clock-bump",), "nodes": len(hosts),
                                       **spec}),
                      cluster=SimpleNamespace(nodes=hosts, clients=[]),
                      db=db, workers=[], holders=list)


def test_the_fakes_are_what_they_stand_for() -> None:
    assert isinstance(Machine("n1"), HostClock) and not isinstance(Plain("n1"), HostClock)
    assert isinstance(FakedDB(), Clock) and not isinstance(NoClockDB(), Clock)


def test_hosts_of_their_own_move_their_machine_clock_not_the_servers() -> None:
    nodes = [Machine("n1"), Machine("n2"), Machine("n3")]
    db = FakedDB()
    fault = clock_bump(ctx(nodes, db, clock_offset_ms=1500))
    value = fault.start(random.Random(1))
    targets = value["targets"]
    assert targets and set(targets) <= {"n1", "n2", "n3"}
    for n in nodes:
        assert n.calls == ([("set", 1500.0)] if n.name in targets else [])
    fault.stop()
    for n in nodes:
        assert n.calls[-1:] == ([("set", 0.0)] if n.name in targets else [])
    fault.heal()
    assert all(n.calls[-1] == ("reset", None) for n in nodes)  # every one, moved or not
    assert db.calls == []  # libfaketime stays at true time on hosts with their own clock


def test_other_nodes_move_the_servers_libfaketime_clock() -> None:
    nodes: list[Any] = [Plain("n1"), Machine("n2")]
    db = FakedDB()
    fault = clock_skew(ctx(nodes, db, clock_offset_ms=1000))
    for seed in range(20):  # until n1 is among the targets
        value = fault.start(random.Random(seed))
        fault.stop()
        if "n1" in value["targets"]:
            break
    else:
        pytest.fail("n1 was never a target")
    assert [c for c in db.calls if c[0] == "set" and c[1] == "n1"]
    assert not [c for c in db.calls if c[1] == "n2"]  # n2's machine clock did it
    fault.heal()
    assert ("reset", "n1", None) in db.calls and nodes[1].calls[-1] == ("reset", None)


def test_servers_that_ignore_libfaketime_move_on_hosts_of_their_own_only() -> None:
    fault = clock_bump(ctx([Machine("n1"), Plain("n2")], NoClockDB()))
    assert fault.candidates == ["n1"]
    assert clock_bump(ctx([Plain("n1")], NoClockDB())).candidates == []
