"""Grudge maps: the properties of every partition shape, checked against brute force."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockcheck.nemesis import grudge
from lockcheck.nemesis.grudge import Cut


def names(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}{i + start}" for i in range(n)]


def links(g: dict[str, frozenset[str]], hosts: list[str]) -> set[frozenset[str]]:
    """The pairs that can still exchange packets (neither side drops the other)."""
    return {frozenset((a, b)) for a, b in itertools.combinations(hosts, 2)
            if b not in g.get(a, ()) and a not in g.get(b, ())}


def assert_well_formed(cut: Cut, hosts: list[str]) -> None:
    g = cut.grudge
    assert set(g) <= set(hosts)
    for h, enemies in g.items():
        assert h not in enemies, f"{h} drops itself"
        assert enemies <= set(hosts)
        for e in enemies:
            assert h in g.get(e, frozenset()), f"{h} drops {e} but not the other way"


seeds = st.integers(0, 2**32)


@given(st.integers(1, 11), st.integers(0, 6), seeds,
       st.sampled_from(["halves", "isolate", "majority"]))
def test_two_sided_shapes_split_cleanly(n: int, n_clients: int, seed: int, kind: str) -> None:
    nodes, clients = names("n", n, 1), names("c", n_clients)
    rng = random.Random(seed)
    cut = grudge.with_clients(getattr(grudge, kind)(nodes, rng), clients, rng)
    assert_well_formed(cut, nodes + clients)
    a, b = cut.sides
    assert sorted(a + b) == sorted(nodes + clients) and not set(a) & set(b)
    # a clean split: exactly the pairs across the sides are cut
    everyone = nodes + clients
    expected = {frozenset(p) for p in itertools.combinations(everyone, 2)
                if (p[0] in a) == (p[1] in a)}
    assert links(cut.grudge, everyone) == expected
    if n_clients >= 2:  # a split brain needs a client on each side
        assert set(a) & set(clients) and set(b) & set(clients)
    a_nodes = [h for h in a if h in nodes]
    if kind == "isolate":
        assert len(a_nodes) == 1
    elif kind == "majority":
        assert 1 <= len(a_nodes) <= max(1, (n - 1) // 2)
        assert n <= 2 or len(a_nodes) < n - len(a_nodes), "the first side is a minority"
    elif n > 1:
        assert len(a_nodes) == n // 2
    assert set(cut.targets) == set(a)


@given(st.integers(4, 15), st.integers(0, 6), seeds)
def test_ring_every_node_sees_a_distinct_majority(n: int, n_clients: int, seed: int) -> None:
    nodes, clients = names("n", n, 1), names("c", n_clients)
    rng = random.Random(seed)
    cut = grudge.with_clients(grudge.ring(nodes, rng), clients, rng)
    assert_well_formed(cut, nodes + clients)
    views = {h: frozenset(grudge.sees(cut.grudge, h, nodes)) for h in nodes}
    for h, view in views.items():
        assert len(view) >= n // 2 + 1, f"{h} sees only {sorted(view)}"
        assert len(view) < n, f"{h} sees everyone: not a partition"
    assert len(set(views.values())) == n, "two nodes see the same majority"
    # a ring is not bipartite: no two sides explain it
    assert cut.sides == ()
    # every client sees exactly what its home node sees
    homes = cut.extra.get("homes", {})
    assert isinstance(homes, dict)
    for c in clients:
        assert grudge.sees(cut.grudge, c, nodes) == views[homes[c]] - {c}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ring_refuses_too_few_nodes(n: int) -> None:
    with pytest.raises(ValueError, match="4 or more"):
        grudge.ring(names("n", n, 1), random.Random(0))


def test_no_three_node_ring_exists_brute_force() -> None:
    """Why the ring needs 4 nodes: over every symmetric grudge of 3 nodes, none gives
    each node a majority of its own."""
    nodes = ["a", "b", "c"]
    pairs = list(itertools.combinations(nodes, 2))
    for cut_mask in range(2 ** len(pairs)):
        cut = [p for i, p in enumerate(pairs) if cut_mask >> i & 1]
        g = grudge.symmetric({a: {b} for a, b in cut})
        views = [frozenset(grudge.sees(g, h, nodes)) for h in nodes]
        ok = all(len(v) >= 2 for v in views) and len(set(views)) == 3 and all(
            len(v) < 3 for v in views)
        assert not ok, cut


@given(st.integers(3, 12), st.integers(0, 6), seeds)
def test_bridge_keeps_one_node_linked_to_both_halves(n: int, n_clients: int,
                                                     seed: int) -> None:
    nodes, clients = names("n", n, 1), names("c", n_clients)
    rng = random.Random(seed)
    cut = grudge.with_clients(grudge.bridge(nodes, rng), clients, rng)
    assert_well_formed(cut, nodes + clients)
    middle = cut.extra["bridge"]
    assert isinstance(middle, str) and middle in nodes
    assert grudge.sees(cut.grudge, middle, nodes + clients) == set(nodes + clients)
    a, b = cut.sides
    assert middle not in a and middle not in b
    for x in a:
        for y in b:
            assert y in cut.grudge[x], f"{x} still reaches {y} across the bridge"
    assert sorted([*a, *b, middle]) == sorted(nodes + clients)


@given(st.integers(1, 9), st.integers(0, 8), seeds)
def test_clients_cut_leaves_the_nodes_whole(n: int, n_clients: int, seed: int) -> None:
    nodes, clients = names("n", n, 1), names("c", n_clients)
    cut = grudge.clients_cut(nodes, clients, random.Random(seed))
    assert_well_formed(cut, nodes + clients)
    for x in nodes:
        assert set(grudge.sees(cut.grudge, x, nodes)) == set(nodes), "nodes must keep links"
    for c in clients:
        lost = set(nodes) - grudge.sees(cut.grudge, c, nodes)
        if n > 1:
            assert 1 <= len(lost) <= n - 1, (c, lost)
        assert (c in cut.targets) == bool(lost)
    for a, b in itertools.combinations(clients, 2):
        assert b not in cut.grudge.get(a, ())


def test_primaries_isolates_the_named_nodes() -> None:
    cut = grudge.primaries(["n2", "n9"])(["n1", "n2", "n3"], random.Random(1))
    assert cut.sides == (("n2",), ("n1", "n3")) and cut.targets == ("n2",)


def test_shapes_are_deterministic_per_seed_and_do_not_mutate() -> None:
    nodes = names("n", 5, 1)
    for shape in (grudge.halves, grudge.isolate, grudge.majority, grudge.ring,
                  grudge.bridge, grudge.halves_or_isolate):
        assert shape(nodes, random.Random(7)) == shape(nodes, random.Random(7))
    assert nodes == names("n", 5, 1)


def test_shapes_vary_with_the_seed() -> None:
    nodes = names("n", 5, 1)
    for shape in (grudge.halves, grudge.isolate, grudge.majority, grudge.ring, grudge.bridge):
        assert len({str(sorted(shape(nodes, random.Random(s)).grudge.items()))
                    for s in range(30)}) > 3, shape


def test_majority_uses_every_minority_size() -> None:
    sizes = {len(grudge.majority(names("n", 7, 1), random.Random(s)).sides[0])
             for s in range(100)}
    assert sizes == {1, 2, 3}


def test_mix_gives_both_kinds_with_three_nodes_and_only_halves_below() -> None:
    for n, kinds in ((2, {"halves"}), (3, {"halves", "isolate"})):
        seen = {grudge.halves_or_isolate(names("n", n, 1), random.Random(s)).kind
                for s in range(40)}
        assert seen == kinds


def test_clients_join_both_sides() -> None:
    seen_a = seen_b = 0
    for seed in range(200):
        rng = random.Random(seed)
        cut = grudge.with_clients(grudge.halves(["n1", "n2", "n3"], rng), ["c0"], rng)
        seen_a += "c0" in cut.sides[0]
        seen_b += "c0" in cut.sides[1]
    assert seen_a > 50 and seen_b > 50


def test_complete_and_plain() -> None:
    g = grudge.complete([["n1", "c0"], ["n2", "n3", "c1"]])
    assert grudge.plain(g) == {"c0": ["c1", "n2", "n3"], "c1": ["c0", "n1"],
                               "n1": ["c1", "n2", "n3"], "n2": ["c0", "n1"],
                               "n3": ["c0", "n1"]}
    assert grudge.plain(grudge.complete([["n1", "c0"], []])) == {}
    assert grudge.complete([]) == {}


@given(st.dictionaries(st.sampled_from(names("h", 6)),
                       st.sets(st.sampled_from(names("h", 6))), max_size=6))
def test_symmetric_is_the_smallest_symmetric_superset(g: dict[str, set[str]]) -> None:
    s = grudge.symmetric(g)
    for h, enemies in g.items():
        assert enemies - {h} <= s[h]
    for h, enemies in s.items():
        for e in enemies:
            assert h in s[e]
            assert e in g.get(h, set()) or h in g.get(e, set()), "nothing added beyond symmetry"


def test_holder_side_cuts_the_holder_and_its_member_from_everyone_else() -> None:
    nodes, clients = names("n", 3, 1), names("c", 4)
    cut = grudge.holder_side(nodes, clients, "c2", ["n3"])
    assert_well_formed(cut, nodes + clients)
    assert cut.kind == "holder" and cut.targets == ("n3", "c2")
    assert cut.sides == (("n3", "c2"), ("n1", "n2", "c0", "c1", "c3"))
    # the holder reaches only its member; the quorum side and every rival stay whole
    assert links(cut.grudge, nodes + clients) == (
        links({}, ["n3", "c2"]) | links({}, ["n1", "n2", "c0", "c1", "c3"]))


def test_holder_side_without_a_member_or_a_cuttable_client() -> None:
    nodes, clients = names("n", 5, 1), names("c", 2)
    only_client = grudge.holder_side(nodes, clients, "c1", [])
    assert only_client.sides == (("c1",), (*nodes, "c0"))
    # a client that shares the controller's address is not in `clients`: the member goes
    # alone; a member that is not a node of this run is ignored
    only_member = grudge.holder_side(nodes, clients, "c9", ["n2", "n8"])
    assert only_member.sides == (("n2",), ("n1", "n3", "n4", "n5", "c0", "c1"))
    assert grudge.holder_side(nodes, clients, None, []).grudge == {
        h: frozenset() for h in (*nodes, *clients)}
