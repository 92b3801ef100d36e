"""The partition nemeses on fake hosts: each applies its grudge as drop rules, names it
in the history, and heals every host. (The shapes themselves: test_grudge.py; real
packets: tests/integration/test_nemesis_proofs.py.)"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from lockcheck.nemesis.loss import Loss
from lockcheck.nemesis.partition import SHAPES, Partition


@dataclass
class FakeHost:
    name: str
    address: str
    blocked: list[tuple[str, float]] = field(default_factory=list)
    heals: int = 0
    own_network: bool = True

    def block(self, sources: Sequence[str], probability: float = 1.0) -> None:
        self.blocked += [(s, probability) for s in sources]

    def heal(self) -> None:
        self.blocked.clear()
        self.heals += 1


def fake_cluster(n_nodes: int, n_clients: int) -> tuple[list[FakeHost], list[FakeHost]]:
    nodes = [FakeHost(f"n{i + 1}", f"10.0.0.{11 + i}") for i in range(n_nodes)]
    clients = [FakeHost(f"c{i}", f"10.0.0.{101 + i}") for i in range(n_clients)]
    return nodes, clients




@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("seed", range(4))
def test_each_host_blocks_exactly_its_grudge(shape: str, seed: int) -> None:
    nodes, clients = fake_cluster(5, 3)
    p = Partition(nodes, clients, shape=SHAPES[shape])  # type: ignore[arg-type]
    value = p.start(random.Random(seed))
    addr = {h.name: h.address for h in nodes + clients}
    g = value["grudge"]
    assert value["fault"] == "partition" and isinstance(value["targets"], list)
    for h in nodes + clients:
        assert sorted(s for s, _ in h.blocked) == sorted(addr[e] for e in g.get(h.name, []))
        assert all(prob == 1.0 for _, prob in h.blocked)
    assert any(g.values()), "the partition cut nothing"
    healed = p.stop()["healed"]
    assert healed == sorted(g)
    assert all(h.blocked == [] for h in nodes + clients)
    p.heal()  # idempotent
    assert all(h.blocked == [] for h in nodes + clients)


def test_two_sided_values_name_their_sides_and_kind() -> None:
    nodes, clients = fake_cluster(5, 4)
    value = Partition(nodes, clients).start(random.Random(3))  # type: ignore[arg-type]
    assert value["kind"] in ("halves", "isolate")
    a, b = value["sides"]
    assert value["targets"] == a
    assert sorted(a + b) == sorted(h.name for h in nodes + clients)


def test_ring_and_bridge_values_name_their_layout() -> None:
    nodes, clients = fake_cluster(5, 2)
    ring = Partition(nodes, clients, shape=SHAPES["partition-ring"]).start(  # type: ignore[arg-type]
        random.Random(1))
    assert ring["kind"] == "ring" and sorted(ring["ring"]) == [n.name for n in nodes]
    assert "sides" not in ring
    nodes, clients = fake_cluster(5, 2)
    br = Partition(nodes, clients, shape=SHAPES["partition-bridge"]).start(  # type: ignore[arg-type]
        random.Random(1))
    assert br["kind"] == "bridge" and br["bridge"] in [n.name for n in nodes]
    assert br["bridge"] not in br["targets"]


def test_heal_without_start_touches_every_host() -> None:
    nodes, clients = fake_cluster(2, 3)
    Partition(nodes, clients).heal()  # type: ignore[arg-type]
    assert all(h.heals == 1 for h in nodes + clients)


def test_a_failing_heal_still_heals_the_others_and_names_the_failure() -> None:
    nodes, clients = fake_cluster(3, 1)

    def broken() -> None:
        raise OSError("iptables: resource busy")

    nodes[1].heal = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="n2: iptables: resource busy"):
        Partition(nodes, clients).heal()  # type: ignore[arg-type]
    assert nodes[0].heals == 1 and nodes[2].heals == 1 and clients[0].heals == 1


@pytest.mark.parametrize("seed", range(6))
def test_loss_is_a_lossy_cut_between_its_targets_and_everyone_else(seed: int) -> None:
    nodes, clients = fake_cluster(5, 2)
    loss = Loss(nodes, clients, probability=0.25, hold_s=1.0)  # type: ignore[arg-type]
    value = loss.start(random.Random(seed))
    targets = value["targets"]
    assert value["probability"] == 0.25 and 1 <= len(targets) <= 2
    addr = {h.name: h.address for h in nodes + clients}
    for h in nodes + clients:
        peers = ([x.name for x in nodes + clients if x.name not in targets]
                 if h.name in targets else targets)
        assert sorted(h.blocked) == sorted((addr[p], 0.25) for p in peers)
    loss.stop()
    assert all(h.blocked == [] for h in nodes + clients)


def test_partition_primary_asks_the_service_at_every_start() -> None:
    from types import SimpleNamespace

    from lockcheck.nemesis.api import RunContext
    from lockcheck.nemesis.partition import partition_primary
    from lockcheck.spec import TestSpec

    class Service:
        leader = "n2"

        def primaries(self) -> list[str]:
            return [self.leader]

    nodes, clients = fake_cluster(3, 2)
    db = Service()
    ctx = RunContext(spec=TestSpec(nodes=3), cluster=SimpleNamespace(
        nodes=nodes, clients=clients), db=db, workers=[], holders=lambda: [])  # type: ignore[arg-type]
    nem = partition_primary(ctx)
    first = nem.start(random.Random(0))
    assert first["kind"] == "primary" and [h for h in first["targets"] if h[0] == "n"] == ["n2"]
    nem.stop()
    db.leader = "n3"  # a failover moved it
    second = nem.start(random.Random(0))
    assert [h for h in second["targets"] if h[0] == "n"] == ["n3"]
    assert sorted(second["grudge"]["n3"]) == sorted(
        x for x in ["n1", "n2", "c0", "c1"] if x not in second["targets"])


def test_partition_holder_cuts_the_next_holder_with_the_member_its_session_is_on() -> None:
    import threading
    import time
    from types import SimpleNamespace

    from lockcheck.nemesis.api import RunContext, WorkerRef
    from lockcheck.nemesis.client_pause import Holders
    from lockcheck.nemesis.holder_partition import partition_holder
    from lockcheck.spec import TestSpec

    def enter(worker: int, key: str, granted_by: list[str], f: str = "enter") -> None:
        holders.observe({"type": "event", "f": f, "key": key, "process": worker,
                         "worker": worker, "time": time.monotonic_ns(),
                         "value": {"fence": 1, "lease": key, "granted_by": granted_by}})

    nodes, clients = fake_cluster(3, 4)
    holders = Holders()
    workers = [WorkerRef(i, f"c{i}", None) for i in range(4)]  # type: ignore[arg-type]
    ctx = RunContext(spec=TestSpec(nodes=3, nemesis_interval=0.4, ttl_ms=100),
                     cluster=SimpleNamespace(nodes=nodes, clients=clients),
                     db=None, workers=workers, holders=holders.now)  # type: ignore[arg-type]
    nem = partition_holder(ctx)
    enter(0, "k0", ["n1"])  # held already: its hold may be nearly over
    t0 = time.monotonic()
    threading.Timer(0.1, enter, args=(2, "k1", ["n3"])).start()
    v = nem.start(random.Random(0))
    assert time.monotonic() - t0 >= 0.1  # it waited for a fresh holder
    assert v["fault"] == "partition-holder" and v["kind"] == "holder"
    assert v["holder"] == {"worker": 2, "process": 2, "key": "k1", "granted_by": ["n3"]}
    assert v["sides"] == [["n3", "c2"], ["n1", "n2", "c0", "c1", "c3"]]
    assert v["targets"] == ["n3", "c2"]
    by_name = {h.name: h for h in nodes + clients}
    assert sorted(s for s, _ in by_name["c2"].blocked) == sorted(
        by_name[x].address for x in ["n1", "n2", "c0", "c1", "c3"])
    nem.stop()
    # nobody new within the wait: the holder that entered last; a grant by a quorum
    # (Redlock's) is not taken along, only the client
    enter(1, "k2", ["n1", "n2"])
    v = nem.start(random.Random(0))
    assert v["holder"]["worker"] == 1 and v["sides"][0] == ["c1"]
    nem.stop()
    for w, k in ((0, "k0"), (1, "k2"), (2, "k1")):
        enter(w, k, [], f="exit")
    v = nem.start(random.Random(0))  # nobody holds a lock: nothing is cut
    assert v["skipped"] == "no client held a lock" and "holder" not in v
    assert v["grudge"] == {} and all(h.blocked == [] for h in nodes + clients)
    nem.stop()


def test_partition_holder_leaves_a_leader_with_the_quorum() -> None:
    """Cut off, a leader would make the others elect another first (seconds: the
    holder's hold is over before its session is); its holder's client goes alone."""
    from lockcheck.nemesis.api import Holding
    from lockcheck.nemesis.holder_partition import aimed_at

    on = {"n1": Holding(1, 1, "k0", 1, 5, granted_by=("n1",))}
    nodes, clients = ["n1", "n2", "n3"], ["c0", "c1"]
    for leader, side in (("n1", ("c1",)), ("n2", ("n1", "c1"))):
        shape = aimed_at(lambda: list(on.values()), {1: "c1"}, 0.0, [leader].copy)
        assert shape(nodes, clients, random.Random(0)).sides[0] == side
