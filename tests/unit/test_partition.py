"""Partition shapes: the pure `split` and `grudges`, and the Partition nemesis on fake nodes."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockcheck.nemesis.partition import Partition, grudges, split


def names(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}{i + start}" for i in range(n)]


@given(st.integers(1, 9), st.integers(0, 12), st.integers(0, 2**32),
       st.sampled_from(["halves", "isolate"]))
def test_split_is_a_partition_of_all_hosts(n_nodes: int, n_clients: int, seed: int,
                                           kind: str) -> None:
    nodes, clients = names("n", n_nodes, 1), names("c", n_clients)
    a, b = split(nodes, clients, random.Random(seed), kind)
    assert sorted(a + b) == sorted(nodes + clients)
    assert not set(a) & set(b)
    a_nodes = [h for h in a if h in nodes]
    b_nodes = [h for h in b if h in nodes]
    if kind == "isolate":
        assert len(a_nodes) == 1
    elif n_nodes > 1:
        assert len(a_nodes) == n_nodes // 2 and len(b_nodes) == n_nodes - n_nodes // 2
    else:
        assert len(a_nodes) in (0, 1)  # one node: it goes to either side


def test_split_does_not_mutate_its_input_and_is_deterministic() -> None:
    nodes, clients = names("n", 5, 1), names("c", 4)
    a1 = split(nodes, clients, random.Random(42), "halves")
    a2 = split(nodes, clients, random.Random(42), "halves")
    assert a1 == a2
    assert nodes == names("n", 5, 1) and clients == names("c", 4)


def test_split_spreads_clients_over_both_sides() -> None:
    seen_a = seen_b = 0
    for seed in range(200):
        a, b = split(["n1", "n2", "n3"], ["c0"], random.Random(seed), "halves")
        seen_a += "c0" in a
        seen_b += "c0" in b
    assert seen_a > 50 and seen_b > 50


def test_split_single_node_sometimes_cuts_the_node_off_from_every_client() -> None:
    shapes = set()
    for seed in range(100):
        a, b = split(["n1"], ["c0", "c1"], random.Random(seed), "halves")
        shapes.add(("n1" in a, tuple(sorted(a)), tuple(sorted(b))))
    # the node is sometimes on side a and sometimes on side b
    assert {s[0] for s in shapes} == {True, False}


def test_grudges_each_side_drops_the_other() -> None:
    g = grudges(["n1", "c0"], ["n2", "n3", "c1"])
    assert g == {"n1": ["n2", "n3", "c1"], "c0": ["n2", "n3", "c1"],
                 "n2": ["n1", "c0"], "n3": ["n1", "c0"], "c1": ["n1", "c0"]}


def test_grudges_with_an_empty_side_cuts_nothing() -> None:
    assert grudges(["n1", "c0"], []) == {"n1": [], "c0": []}
    assert grudges([], []) == {}


@given(st.lists(st.text(min_size=1, max_size=3), unique=True, max_size=10), st.data())
def test_grudges_are_symmetric(hosts: list[str], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(hosts)))
    a, b = hosts[:cut], hosts[cut:]
    g = grudges(a, b)
    assert set(g) == set(hosts)
    for h, enemies in g.items():
        for e in enemies:
            assert h in g[e]
        assert h not in enemies


# -- the nemesis, on fake nodes ---------------------------------------------------------


@dataclass
class FakeNode:
    name: str
    address: str
    blocked: list[str] = field(default_factory=list)
    heals: int = 0

    def block(self, sources: Sequence[str]) -> None:
        self.blocked += list(sources)

    def heal(self) -> None:
        self.blocked.clear()
        self.heals += 1


def fake_cluster(n_nodes: int, n_clients: int) -> tuple[list[FakeNode], list[FakeNode]]:
    nodes = [FakeNode(f"n{i + 1}", f"10.0.0.{11 + i}") for i in range(n_nodes)]
    clients = [FakeNode(f"c{i}", f"10.0.0.{101 + i}") for i in range(n_clients)]
    return nodes, clients


@pytest.mark.parametrize("seed", range(10))
def test_partition_blocks_exactly_the_other_side(seed: int) -> None:
    nodes, clients = fake_cluster(5, 4)
    p = Partition(nodes, clients)  # type: ignore[arg-type]
    value = p.start(random.Random(seed))
    a, b = value["sides"]
    assert value["kind"] in ("halves", "isolate")
    addr = {h.name: h.address for h in nodes + clients}
    for h in nodes + clients:
        other = b if h.name in a else a
        assert sorted(h.blocked) == sorted(addr[o] for o in other)
    healed = p.stop()["healed"]
    assert healed == sorted(h for h in a + b if (b if h in a else a))
    assert all(h.blocked == [] for h in nodes + clients)
    p.heal()  # idempotent
    assert all(h.blocked == [] for h in nodes + clients)


def test_partition_kind_isolate_needs_three_nodes() -> None:
    for n in (1, 2):
        nodes, clients = fake_cluster(n, 2)
        kinds = {Partition(nodes, clients).start(random.Random(s))["kind"]  # type: ignore[arg-type]
                 for s in range(30)}
        assert kinds == {"halves"}
    nodes, clients = fake_cluster(3, 2)
    kinds = {Partition(nodes, clients).start(random.Random(s))["kind"]  # type: ignore[arg-type]
             for s in range(30)}
    assert kinds == {"halves", "isolate"}


def test_heal_without_start_touches_every_host() -> None:
    nodes, clients = fake_cluster(2, 3)
    Partition(nodes, clients).heal()  # type: ignore[arg-type]
    assert all(h.heals == 1 for h in nodes + clients)
