"""Backends by name: which service they need and how a worker builds its lock client."""

from __future__ import annotations

from dataclasses import dataclass

from lockcheck.locks.api import LockClient


@dataclass(frozen=True)
class Backend:
    name: str
    service: str  # the cluster service it runs on
    default_nodes: int
    fences: bool  # does it issue fencing tokens
    description: str


BACKENDS: dict[str, Backend] = {
    "redis": Backend(
        name="redis", service="redis", default_nodes=1, fences=True,
        description="single-instance Redis per lock name, redis-py Lock + Lua fence counter",
    ),
}


def key_names(n: int) -> list[str]:
    return [f"k{i}" for i in range(n)]


def node_for_key(key_index: int, n_nodes: int) -> int:
    """Each lock name lives on one master; names are spread over the nodes."""
    return key_index % n_nodes


def make_clients(backend: str, nodes: list[tuple[str, int]], keys: list[str], *, ttl_ms: int,
                 op_timeout_s: float, drift: float) -> dict[str, LockClient]:
    """One client per key (shared per node), as a worker needs them."""
    if backend == "redis":
        from lockcheck.locks.redis import RedisLockClient

        per_node = [RedisLockClient(a, p, ttl_ms=ttl_ms, op_timeout_s=op_timeout_s, drift=drift)
                    for a, p in nodes]
        return {k: per_node[node_for_key(i, len(nodes))] for i, k in enumerate(keys)}
    raise ValueError(f"unknown backend {backend!r}")
