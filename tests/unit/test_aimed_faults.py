"""The aimed faults' aim: which grant they wait for, when they are done, what they hit
(`bridge-clock`, `pause-past-lease`), and the live-holder tracking they aim with."""

from __future__ import annotations

import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lockcheck.nemesis.api import Holding, WorkerRef, ends_itself
from lockcheck.nemesis.bridge_clock import BridgeClock, depends_on, one_against_the_rest
from lockcheck.nemesis.client_pause import Holders
from lockcheck.nemesis.grudge import sees
from lockcheck.nemesis.pause_past_lease import PausePastLease, pause_over
from tests.conftest import wait_for
from tests.unit.test_fault_targets import FakeDaemon

T0 = time.monotonic_ns()


def enter(process: int, key: str = "k0", granted: tuple[str, ...] = (),
          f: str = "enter") -> dict[str, Any]:
    return {"type": "event", "f": f, "key": key, "process": process, "worker": process,
            "time": time.monotonic_ns() - T0,
            "value": {"fence": None, "granted_by": list(granted)}}


def holding(granted: tuple[str, ...]) -> Holding:
    return Holding(worker=0, process=0, key="k0", fence=None, since_ns=0, granted_by=granted)


def test_a_grant_depends_on_a_master_whose_yes_made_the_quorum() -> None:
    assert depends_on(holding(("n1", "n2", "n3")), "n3", 5)
    assert not depends_on(holding(("n1", "n2", "n3", "n4")), "n3", 5)  # one to spare
    assert not depends_on(holding(("n1", "n2", "n4")), "n3", 5)  # not among its masters
    assert not depends_on(holding(()), "n3", 5)  # a client that names no masters
    assert depends_on(holding(("n1", "n3")), "n3", 3)


def test_the_pause_is_over_once_taken_over_and_the_section_has_passed() -> None:
    assert pause_over(2.5, True, 0.5)
    assert not pause_over(2.5, False, 0.5)  # the lease has not gone to a rival yet
    assert not pause_over(0.3, True, 0.5)  # it would wake inside its own section


def test_next_enter_waits_for_the_next_accepted_grant() -> None:
    h = Holders()
    h.observe(enter(1, granted=("n1", "n2", "n3")))  # before the call: not the next one
    assert h.next_enter(0.05) is None
    later = [enter(2, "k1", ("n1", "n2", "n4", "n5")), enter(3, "k2", ("n1", "n2", "n3"))]
    threading.Timer(0.05, lambda: [h.observe(op) for op in later]).start()
    t = time.monotonic()
    got = h.next_enter(10.0, lambda x: depends_on(x, "n3", 5))
    # woken by the grant, not the timeout (a margin a loaded machine cannot eat)
    assert time.monotonic() - t < 5.0
    assert got is not None and (got.process, got.key) == (3, "k2")


def test_taken_over_only_by_a_rival_while_the_holder_is_inside() -> None:
    h = Holders()
    h.observe(enter(1))
    first = h.now()[0]
    h.observe(enter(1, "k1"))  # the same process, another lock
    assert not h.taken_over(first)
    h.observe(enter(2, "k1"))  # a rival, another lock
    assert not h.taken_over(first)
    h.observe(enter(2))
    assert h.taken_over(first)
    # a rival that comes after the holder left has not taken anything over
    h.observe(enter(3, "k2"))
    third = next(x for x in h.now() if x.key == "k2")
    h.observe(enter(3, "k2", f="exit"))
    h.observe(enter(4, "k2"))
    assert not h.taken_over(third)


def test_pause_past_lease_stops_the_next_holder_until_a_rival_holds_its_lock() -> None:
    h = Holders()
    daemons = [FakeDaemon() for _ in range(3)]
    workers = [WorkerRef(i, f"c{i}", d) for i, d in enumerate(daemons)]  # type: ignore[arg-type]
    nem = PausePastLease(workers, h.next_enter, h.taken_over, hold_s=5.0, section_s=0.1,
                         wait_s=2.0, settle_s=0.0)
    assert ends_itself(nem)
    h.observe(enter(0))  # already inside: the pause waits for the next grant
    threading.Timer(0.05, h.observe, (enter(1, "k1"),)).start()
    v = nem.start(random.Random(1))
    assert (v["targets"], v["worker"], v["key"]) == (["c1"], 1, "k1")
    assert daemons[1].signals == [signal.SIGSTOP] and daemons[0].signals == []
    assert not nem.ended()
    h.observe(enter(2, "k1"))  # the rival is granted while the paused one is inside
    wait_for(nem.ended, 5, "the pause to end once a rival holds its lock")
    assert nem.stop()["taken_over"] is True
    assert daemons[1].signals == [signal.SIGSTOP, signal.SIGCONT]


def test_pause_past_lease_skips_when_nobody_is_granted() -> None:
    nem = PausePastLease([], Holders().next_enter, Holders().taken_over, hold_s=5.0,
                         section_s=0.1, wait_s=0.05)
    assert "skipped" in nem.start(random.Random(1))
    assert not nem.ended()


@dataclass
class FakeBridge:
    """partition-bridge's cut with n3 as the bridge and c0 alone, without a network."""

    nodes: list[str] = field(default_factory=lambda: ["n1", "n2", "n3", "n4", "n5"])
    healed: int = 0

    def start(self, rng: random.Random) -> dict[str, Any]:
        return {"fault": "partition", "targets": ["n1", "n2", "n4", "n5"], "kind": "bridge",
                "bridge": "n3", "lone": "c0"}

    def stop(self) -> dict[str, Any]:
        self.healed += 1
        return {"fault": "partition", "targets": ["n1", "n2", "n4", "n5"]}

    def heal(self) -> None:
        self.healed += 1


@dataclass
class FakeClocks:
    moves: list[tuple[str, float]] = field(default_factory=list)

    def set(self, host: str, offset_ms: float) -> None:
        self.moves.append((host, offset_ms))

    def reset_all(self) -> None:
        self.moves.append(("all", 0.0))


# processes 1-3 are the lone client's worker (c0), 4-5 the others'
HOSTS = {1: "c0", 2: "c0", 3: "c0", 4: "c1", 5: "c2"}


def bridge_clock(h: Holders) -> tuple[BridgeClock, FakeBridge, FakeClocks]:
    part, clocks = FakeBridge(), FakeClocks()
    nem = BridgeClock(part, clocks, 2000, h.now, h.next_enter,  # type: ignore[arg-type]
                      h.taken_over, HOSTS, hold_s=5.0, wait_s=2.0)
    return nem, part, clocks


def test_one_client_alone_with_its_half_and_the_bridge() -> None:
    nodes, clients = ["n1", "n2", "n3", "n4", "n5"], ["c0", "c1", "c2", "c3"]
    for seed in range(20):
        cut = one_against_the_rest(nodes, clients, random.Random(seed))
        bridge, lone = str(cut.extra["bridge"]), str(cut.extra["lone"])
        rivals = [c for c in clients if c != lone]
        mine = sees(cut.grudge, lone, nodes)
        assert bridge in mine and len(mine) == 3  # a bare quorum, the bridge in it
        for c in rivals:
            theirs = sees(cut.grudge, c, nodes)
            assert len(theirs) == 3 and mine & theirs == {bridge}
            assert lone not in sees(cut.grudge, c, clients)
        assert sees(cut.grudge, bridge, [*nodes, *clients]) == {*nodes, *clients}


def test_bridge_clock_jumps_the_bridge_master_after_a_grant_that_needed_it() -> None:
    h = Holders()
    nem, part, clocks = bridge_clock(h)
    assert ends_itself(nem)
    # the lone client on four masters, then without the bridge, then a rival's grant
    # that leans on the bridge: none of them is aimed at
    later = [enter(1, "k0", ("n1", "n2", "n3", "n4")), enter(2, "k1", ("n4", "n5", "n1")),
             enter(4, "k1", ("n3", "n4", "n5")), enter(3, "k2", ("n1", "n2", "n3"))]
    threading.Timer(0.05, lambda: [h.observe(op) for op in later]).start()
    v = nem.start(random.Random(1))
    assert v["targets"] == ["n3"] and v["aimed"]["process"] == 3
    assert clocks.moves == [("n3", 2000.0)]
    # the holder left before a rival came: the clock steps back and waits for the next
    h.observe(enter(3, "k2", f="exit"))
    wait_for(lambda: clocks.moves[-1] == ("n3", 0.0), 5, "the clock stepped back")
    assert not nem.ended()
    h.observe(enter(1, "k2", ("n2", "n3", "n1")))
    wait_for(lambda: clocks.moves[-1] == ("n3", 2000.0), 5, "the clock moved again")
    h.observe(enter(5, "k2", ("n3", "n4", "n5")))  # the other group's client, granted
    wait_for(nem.ended, 5, "the fault to end once a rival holds")
    assert nem.stop() == {"fault": "bridge-clock", "aims": 2, "taken_over": True,
                          "targets": ["n1", "n2", "n3", "n4", "n5"]}
    assert clocks.moves[-1] == ("n3", 0.0) and part.healed == 1


def test_bridge_clock_skips_when_no_grant_leans_on_the_bridge() -> None:
    h = Holders()
    nem, part, clocks = bridge_clock(h)
    nem.wait_s = 0.1
    h.observe(enter(1, "k0", ("n1", "n2", "n3")))  # before the fault: not aimed at
    v = nem.start(random.Random(1))
    assert "skipped" in v and clocks.moves == []
    nem.stop()
    assert part.healed == 1
