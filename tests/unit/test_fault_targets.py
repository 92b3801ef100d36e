"""`--kill-targets` (Jepsen's target specs) and `client-pause --pause-at release`."""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field

import pytest

from lockcheck.errors import BadInput
from lockcheck.nemesis.api import WorkerRef
from lockcheck.nemesis.client_pause import ClientPause, Holders
from lockcheck.nemesis.process import HOLDER_TARGETS, TARGET_SPECS
from lockcheck.spec import KILL_TARGETS, TestSpec, validate

NODES = ["n1", "n2", "n3", "n4", "n5"]


def test_every_target_spec_has_a_picker() -> None:
    assert (*TARGET_SPECS, *HOLDER_TARGETS) == KILL_TARGETS


@pytest.mark.parametrize(("spec", "sizes"), [
    ("one", {1}), ("minority", {2}), ("majority", {3}), ("all", {5}),
    ("one-or-minority", {1, 2}),
])
def test_target_sizes_of_five(spec: str, sizes: set[int]) -> None:
    rng = random.Random(7)
    picks = [TARGET_SPECS[spec](NODES, rng) for _ in range(200)]
    assert {len(p) for p in picks} == sizes
    assert all(len(set(p)) == len(p) and set(p) <= set(NODES) for p in picks)
    if spec != "all":
        assert len({tuple(p) for p in picks}) > 1  # chosen at random each time


def test_three_nodes() -> None:
    rng = random.Random(1)
    assert len(TARGET_SPECS["majority"](NODES[:3], rng)) == 2
    assert len(TARGET_SPECS["minority"](NODES[:3], rng)) == 1


def entered(worker: int, key: str, granted: list[str],
            refused: list[str]) -> dict[str, object]:
    op = event("enter", worker, key=key)
    op["value"] = {"fence": None, "lease": key, "granted_by": granted, "refused_by": refused}
    return op


def test_holder_quorum_hits_a_member_of_a_bare_quorum_held_now() -> None:
    h = Holders()
    aim = HOLDER_TARGETS["holder-quorum"](h.now, 0.0)
    rng = random.Random(3)
    assert {len(aim(NODES, rng)) for _ in range(50)} == {1}  # nobody holds: one at random
    h.observe(entered(1, "k0", ["n1", "n2", "n3", "n4"], []))
    h.observe(entered(2, "k1", ["n2", "n4", "n5"], ["n3"]))  # n1 had not answered yet
    assert [x.refused_by for x in h.now()] == [(), ("n3",)]
    # no bare quorum known: a member of the smallest quorum held
    assert {tuple(aim(NODES, rng)) for _ in range(100)} == {("n2",), ("n4",), ("n5",)}
    h.observe(entered(3, "k2", ["n1", "n3", "n5"], ["n2", "n4"]))  # every other one said no
    assert {tuple(aim(NODES, rng)) for _ in range(100)} == {("n1",), ("n3",), ("n5",)}
    h.observe({**entered(3, "k2", [], []), "f": "exit"})
    h.observe({**entered(2, "k1", [], []), "f": "exit"})
    assert {tuple(aim(NODES, rng)) for _ in range(100)} == {("n1",), ("n2",), ("n3",), ("n4",)}


def test_holder_quorum_ignores_a_grant_named_by_one_member() -> None:
    """A ZooKeeper grant names the one member its session is on: no quorum to aim at,
    so the kill goes to a node at random, not always to that member."""
    h = Holders()
    h.observe(entered(1, "k0", ["n2"], []))
    aim = HOLDER_TARGETS["holder-quorum"](h.now, 0.0)
    rng = random.Random(5)
    assert len({tuple(aim(NODES[:3], rng)) for _ in range(100)}) == 3


def test_holder_quorum_waits_for_a_bare_quorum() -> None:
    h = Holders()
    h.observe(entered(1, "k0", ["n1", "n2", "n3"], ["n4"]))
    aim = HOLDER_TARGETS["holder-quorum"](h.now, 5.0)
    later = threading.Timer(0.2, h.observe, [entered(2, "k1", ["n2", "n4", "n5"], ["n1", "n3"])])
    later.start()
    t0 = time.monotonic()
    assert aim(NODES, random.Random(1))[0] in ("n2", "n4", "n5")
    assert 0.1 < time.monotonic() - t0 < 4.0


@pytest.mark.parametrize(("kw", "message"), [
    ({"kill_targets": "most"}, "unknown --kill-targets 'most'"),
    ({"pause_at": "midway"}, "unknown --pause-at 'midway'"),
])
def test_bad_options_are_refused(kw: dict[str, str], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        validate(TestSpec(nemesis=(), **kw))  # type: ignore[arg-type]


def event(f: str, worker: int, key: str = "k0", fence: int = 1) -> dict[str, object]:
    return {"type": "event", "f": f, "key": key, "process": worker, "worker": worker,
            "value": {"fence": fence, "lease": "x"}, "time": 1}


def test_next_exit_waits_for_the_next_holder_to_leave() -> None:
    h = Holders()
    h.observe(event("enter", 2))
    h.observe(event("exit", 2))  # before the call: not the next one
    assert h.next_exit(0.05) is None
    h.observe(event("enter", 3, fence=9))
    threading.Timer(0.05, h.observe, args=(event("exit", 3, fence=9),)).start()
    t = time.monotonic()
    got = h.next_exit(2.0)
    assert time.monotonic() - t < 1.0  # woken by the exit, not by the timeout
    assert got is not None and (got.worker, got.fence) == (3, 9)
    assert h.now() == []


@dataclass
class FakeDaemon:
    name: str = "worker"
    node: str = "c1"
    pid: int = 0
    signals: list[int] = field(default_factory=list)

    def alive(self) -> bool:
        return True

    def signal(self, sig: int) -> bool:
        self.signals.append(sig)
        return True


def test_pause_at_release_stops_the_worker_that_left() -> None:
    h = Holders()
    d = FakeDaemon()
    nem = ClientPause([WorkerRef(1, "c1", d)], h.now, 0.6, wait_s=2.0,  # type: ignore[arg-type]
                      next_exit=h.next_exit)
    h.observe(event("enter", 1, fence=4))
    threading.Timer(0.05, h.observe, args=(event("exit", 1, fence=4),)).start()
    t = time.monotonic()
    v = nem.start(random.Random(0))
    assert time.monotonic() - t < 1.0
    assert v["at"] == "release" and v["worker"] == 1 and v["fence"] == 4
    assert v["targets"] == ["c1"] and d.signals == [signal.SIGSTOP]
    nem.stop()
    assert d.signals[-1] == signal.SIGCONT


def test_pause_at_release_skips_when_nobody_releases() -> None:
    h = Holders()
    nem = ClientPause([WorkerRef(1, "c1", FakeDaemon())], h.now, 0.6,  # type: ignore[arg-type]
                      wait_s=0.1, next_exit=h.next_exit)
    assert nem.start(random.Random(0))["skipped"] == "no client released a lock"


def test_a_server_pause_lasts_the_nemesis_duration() -> None:
    from types import SimpleNamespace

    from lockcheck.db.memory import MemoryDB
    from lockcheck.nemesis.api import RunContext
    from lockcheck.nemesis.process import pause, pause_primary

    class WithPrimary(MemoryDB):
        def primaries(self) -> list[str]:
            return ["n1"]

    spec = TestSpec(nemesis_interval=3.0, nemesis_duration=7.5)
    cluster = SimpleNamespace(nodes=[SimpleNamespace(name=n) for n in NODES])
    ctx = RunContext(spec=spec, cluster=cluster, db=WithPrimary(spec),  # type: ignore[arg-type]
                     workers=[], holders=list)
    assert pause(ctx).hold_s == 7.5
    assert pause_primary(ctx).hold_s == 7.5
