"""Grudges: who drops whom. Every partition shape is a grudge map, pure and tested alone.

A grudge maps a host to the hosts whose packets it drops (Jepsen's `grudge`). Drop
rules sit on the receiving side (`Node.block`), and a TCP connection needs packets in
both directions, so the maps built here are symmetric: if a drops b, b drops a.

Node shapes (`Cut`), as in Jepsen's partition nemeses:

* `halves`: random halves; `isolate`: one node from the rest; `majority`: a random
  minority (1 to (n-1)/2 nodes) from the rest. Two sides, a clean split.
* `ring`: every node sees a majority (itself included) and no two nodes see the same
  one: a ring of the shuffled nodes in which each node keeps its `d` nearest
  neighbours on either side. Not bipartite, so it needs the map, not two sides;
  impossible with fewer than 4 nodes (with 3, "a majority" is 2 and the three pairs
  would each need a link the others cut).
* `bridge`: two halves, and one node in the middle that sees both.
* `holder`: a lock holder's client and the member its session is on, from the rest
  (`holder_side`: the nodes and clients are placed together, aimed at one holder).

Clients then join the shape: with two sides, each client goes with one side at
random, and with two clients or more each side has at least one; in a ring, each
client takes a random node's view; with a bridge, it goes with one half (and keeps
the bridge). `clients_cut` is the shape for services whose
servers never talk to each other (Redlock): nodes keep their links, each client loses
a random subset of the nodes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Grudge = dict[str, frozenset[str]]  # host -> the hosts whose packets it drops


def complete(components: Sequence[Iterable[str]]) -> Grudge:
    """Every host drops every host of every other component (a clean split)."""
    comps = [list(c) for c in components]
    everyone = {h for c in comps for h in c}
    return {h: frozenset(everyone - set(c)) for c in comps for h in c}


def symmetric(g: Mapping[str, Iterable[str]]) -> Grudge:
    """Close a grudge under symmetry: if a drops b, b drops a too."""
    out: dict[str, set[str]] = {h: set(e) for h, e in g.items()}
    for h, enemies in g.items():
        for e in enemies:
            out.setdefault(e, set()).add(h)
    return {h: frozenset(e - {h}) for h, e in out.items()}


def merge(*grudges: Mapping[str, Iterable[str]]) -> Grudge:
    """The union of several grudges."""
    out: dict[str, set[str]] = {}
    for g in grudges:
        for h, e in g.items():
            out.setdefault(h, set()).update(e)
    return {h: frozenset(e) for h, e in out.items()}


def sees(g: Mapping[str, Iterable[str]], host: str, hosts: Iterable[str]) -> set[str]:
    """The hosts of `hosts` that `host` can exchange packets with (itself included)."""
    mine = set(g.get(host, ()))
    return {h for h in hosts if h == host or (h not in mine and host not in g.get(h, ()))}


def plain(g: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """JSON-ready: only hosts with a grudge, each with its sorted list."""
    return {h: sorted(e) for h, e in sorted(g.items()) if e}


@dataclass(frozen=True)
class Cut:
    """A partition of the nodes: its kind, its grudge, and (for clean splits) sides."""

    kind: str
    grudge: Grudge
    sides: tuple[tuple[str, ...], ...] = ()  # two sides, or the bridge's two halves
    targets: tuple[str, ...] = ()  # what the fault is aimed at (see history-format.md)
    extra: Mapping[str, object] = field(default_factory=dict)


# (node names, rng) -> a cut of the nodes, before the clients join
NodeShape = Callable[[Sequence[str], random.Random], Cut]


def _shuffled(nodes: Sequence[str], rng: random.Random) -> list[str]:
    names = list(nodes)
    rng.shuffle(names)
    return names


def _two_sides(kind: str, a: list[str], b: list[str]) -> Cut:
    return Cut(kind, complete([a, b]), sides=(tuple(a), tuple(b)), targets=tuple(a))


def halves(nodes: Sequence[str], rng: random.Random) -> Cut:
    """Random halves (the smaller first). A single node goes to either side, so that
    the clients on the other side lose it."""
    names = _shuffled(nodes, rng)
    cut = len(names) // 2 if len(names) > 1 else rng.randint(0, 1)
    return _two_sides("halves", names[:cut], names[cut:])


def isolate(nodes: Sequence[str], rng: random.Random) -> Cut:
    """One node cut off from the other nodes."""
    names = _shuffled(nodes, rng)
    return _two_sides("isolate", names[:1], names[1:])


def majority(nodes: Sequence[str], rng: random.Random) -> Cut:
    """A random minority (1 to (n-1)/2 nodes, at least one) from the rest."""
    names = _shuffled(nodes, rng)
    size = rng.randint(1, max(1, (len(names) - 1) // 2))
    return _two_sides("majority", names[:size], names[size:])


def ring_reach(n: int) -> int:
    """How many neighbours on each side a ring node keeps: enough that it sees a
    majority of the n nodes (2d + 1 >= n // 2 + 1)."""
    m = n // 2 + 1
    return (m - 1 + 1) // 2  # ceil((m - 1) / 2)


RING_MIN_NODES = 4


def ring(nodes: Sequence[str], rng: random.Random) -> Cut:
    """Every node sees a majority, no two see the same one (needs 4 or more nodes)."""
    n = len(nodes)
    if n < RING_MIN_NODES:
        raise ValueError(f"a majorities ring needs {RING_MIN_NODES} or more nodes, got {n}")
    order = _shuffled(nodes, rng)
    d = ring_reach(n)
    g: Grudge = {}
    for i, h in enumerate(order):
        near = {order[(i + k) % n] for k in range(-d, d + 1)}
        g[h] = frozenset(set(order) - near)
    return Cut("ring", g, targets=tuple(sorted(nodes)), extra={"ring": order})


BRIDGE_MIN_NODES = 3


def bridge(nodes: Sequence[str], rng: random.Random) -> Cut:
    """Two halves that cannot talk, and one node in the middle that sees both."""
    if len(nodes) < BRIDGE_MIN_NODES:
        raise ValueError(f"a bridge needs {BRIDGE_MIN_NODES} or more nodes, got {len(nodes)}")
    names = _shuffled(nodes, rng)
    middle, rest = names[0], names[1:]
    cut = len(rest) // 2
    a, b = rest[:cut], rest[cut:]
    g = complete([a, b])
    g[middle] = frozenset()
    return Cut("bridge", g, sides=(tuple(a), tuple(b)), targets=tuple(sorted(rest)),
               extra={"bridge": middle})


def primaries(leaders: Sequence[str]) -> NodeShape:
    """The given nodes (the service's primaries right now) from the others."""
    def shape(nodes: Sequence[str], rng: random.Random) -> Cut:
        a = [n for n in leaders if n in nodes]
        return _two_sides("primary", a, [n for n in nodes if n not in a])

    return shape


def holder_side(nodes: Sequence[str], clients: Sequence[str], client: str | None,
                members: Sequence[str]) -> Cut:
    """A lock holder's side: its client and the members its session relies on, cut from
    every other node and client (`partition-holder`). The other side keeps the rest of
    the nodes, a quorum when the members are a minority, and every rival client, so the
    holder's session can expire there and its lock go to a rival while the holder,
    cut off, has not been told."""
    a = [m for m in members if m in nodes]
    if client is not None and client in clients:
        a.append(client)
    b = [*(n for n in nodes if n not in a), *(c for c in clients if c not in a)]
    return Cut("holder", complete([a, b]), sides=(tuple(a), tuple(b)), targets=tuple(a))


def halves_or_isolate(nodes: Sequence[str], rng: random.Random) -> Cut:
    """`partition`: random halves, or (with 3 or more nodes) one node isolated."""
    if len(nodes) > 2 and rng.random() < 0.5:
        return isolate(nodes, rng)
    return halves(nodes, rng)


# -- clients ------------------------------------------------------------------------------


def with_clients(cut: Cut, clients: Sequence[str], rng: random.Random) -> Cut:
    """Place the clients in a node shape; returns the cut over nodes and clients."""
    if not clients:
        return cut
    if len(cut.sides) == 2:
        a, b = list(cut.sides[0]), list(cut.sides[1])
        chose_a = [c for c in clients if rng.random() < 0.5]
        chose_b = [c for c in clients if c not in chose_a]
        # a side without clients cannot show a split brain: with two or more clients,
        # each side gets at least one
        if len(clients) >= 2 and not chose_a:
            chose_a.append(chose_b.pop(rng.randrange(len(chose_b))))
        elif len(clients) >= 2 and not chose_b:
            chose_b.append(chose_a.pop(rng.randrange(len(chose_a))))
        extra = dict(cut.extra)
        if cut.kind == "bridge":  # the middle node stays with everyone
            g = merge(cut.grudge, complete([a + chose_a, b + chose_b]))
            g.setdefault(str(extra["bridge"]), frozenset())
        else:
            g = complete([a + chose_a, b + chose_b])
        targets = cut.targets if cut.kind == "bridge" else (*cut.targets, *chose_a)
        return Cut(cut.kind, g, sides=(tuple(a + chose_a), tuple(b + chose_b)),
                   targets=tuple(targets), extra=extra)
    # no sides (a ring): each client sees what a node of its choosing sees
    nodes = sorted(cut.grudge)
    views: dict[str, set[str]] = {h: set(e) for h, e in cut.grudge.items()}
    homes = {}
    for c in clients:
        home = rng.choice(nodes)
        homes[c] = home
        views[c] = set(cut.grudge[home])
    return Cut(cut.kind, symmetric(views), targets=cut.targets,
               extra={**cut.extra, "homes": homes})


def clients_cut(nodes: Sequence[str], clients: Sequence[str], rng: random.Random) -> Cut:
    """Each client loses a random subset of the nodes (1 to n-1 of them; with one
    node, each client loses it or not); the nodes keep their links to each other."""
    g: dict[str, set[str]] = {}
    n = len(nodes)
    for c in clients:
        size = rng.randint(1, n - 1) if n > 1 else rng.randint(0, 1)
        lost = set(rng.sample(list(nodes), size))
        if lost:
            g[c] = lost
    cut_clients = tuple(c for c in clients if c in g)
    return Cut("clients", symmetric(g), targets=cut_clients)
