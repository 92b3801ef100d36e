"""Cycles in a wait-for graph: which waiters are deadlocked together.

A node waits for the nodes it points at (the holders of the lock it waits for). A set
of nodes is deadlocked when each waits, through the others, for itself: a strongly
connected component with a cycle in it (two or more nodes, or one pointing at
itself). Pure; Tarjan's algorithm, iterative so that a long chain cannot overflow
the stack.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

N = TypeVar("N", bound=Hashable)


def deadlocked(edges: Mapping[N, Iterable[N]]) -> list[frozenset[N]]:
    """The node sets that wait for each other in a cycle (the strongly connected
    components that contain a cycle), in no particular order."""
    graph: dict[N, list[N]] = {u: list(vs) for u, vs in edges.items()}
    for vs in list(graph.values()):
        for v in vs:
            graph.setdefault(v, [])
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    on_stack: set[N] = set()
    stack: list[N] = []
    found: list[frozenset[N]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[N, int]] = [(root, 0)]
        while work:
            u, i = work.pop()
            if i == 0:
                index[u] = low[u] = counter
                counter += 1
                stack.append(u)
                on_stack.add(u)
            succ = graph[u]
            if i < len(succ):
                work.append((u, i + 1))
                v = succ[i]
                if v not in index:
                    work.append((v, 0))
                elif v in on_stack:
                    low[u] = min(low[u], index[v])
                continue
            if work:  # u is done: its parent learns its low link
                parent = work[-1][0]
                low[parent] = min(low[parent], low[u])
            if low[u] == index[u]:
                component: set[N] = set()
                while True:
                    v = stack.pop()
                    on_stack.discard(v)
                    component.add(v)
                    if v == u:
                        break
                if len(component) > 1 or u in graph[u]:
                    found.append(frozenset(component))
    return found
