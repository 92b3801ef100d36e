"""A partition drops the packets between the named hosts, and only those: measured with
real TCP connections between namespaces, not by reading the rules back."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator

import pytest

from lockcheck.cluster.netns import LocalCluster, LocalNode
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry
from lockcheck.nemesis.partition import Partition
from tests.conftest import lockcheck_ids_on_host

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

PORT = 7411
# one connect attempt from inside a namespace: prints "ok" or the error
CONNECT = ("import socket,sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.3).close()\n"
           "    print('ok')\n"
           "except OSError as e:\n"
           "    print(type(e).__name__)\n")
SERVE = ("import socket\n"
         "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         f"s.bind(('0.0.0.0', {PORT})); s.listen(64)\n"
         "while True:\n"
         "    s.accept()[0].close()\n")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(3, 2, Registry(DEFAULT_STATE_DIR))
    with c:
        for n in [*c.nodes, *c.clients]:
            n.spawn("listener", [sys.executable, "-c", SERVE])
        time.sleep(0.5)
        yield c
    assert c.run_id not in lockcheck_ids_on_host()


def reaches(src: LocalNode, dst: LocalNode) -> bool:
    out = src.run([sys.executable, "-c", CONNECT, dst.address, str(PORT)], timeout=10).stdout
    return out.strip() == "ok"


def matrix(c: LocalCluster) -> dict[tuple[str, str], bool]:
    hosts = [*c.nodes, *c.clients]
    return {(a.name, b.name): reaches(a, b) for a in hosts for b in hosts if a is not b}


def test_everyone_reaches_everyone_before(cluster: LocalCluster) -> None:
    m = matrix(cluster)
    assert all(m.values()), [k for k, v in m.items() if not v]


def test_block_drops_only_the_named_sources(cluster: LocalCluster) -> None:
    n1, n2, n3 = cluster.nodes
    try:
        n1.block([n2.address])
        assert not reaches(n2, n1)  # n1 drops what n2 sends (the SYN): no connection
        assert not reaches(n1, n2)  # and n2's answers to n1 (the SYN-ACK) too
        assert reaches(n3, n1) and reaches(n1, n3) and reaches(n2, n3)
    finally:
        n1.heal()
    assert reaches(n2, n1) and reaches(n1, n2)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_partition_nemesis_cuts_between_sides_and_heals(cluster: LocalCluster,
                                                        seed: int) -> None:
    nem = Partition(list(cluster.nodes), list(cluster.clients))
    value = nem.start(random.Random(seed))
    a, b = value["sides"]
    try:
        m = matrix(cluster)
        for (x, y), ok in m.items():
            same_side = (x in a) == (y in a)
            assert ok == same_side, f"{x}->{y} {'passes' if ok else 'dropped'}; sides {a} {b}"
    finally:
        nem.stop()
    assert all(matrix(cluster).values()), "the heal left something cut"
