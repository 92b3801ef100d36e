"""pause-primary-until-promotion without servers: which Sentinel events end the pause
(the promotion of a replica of the paused primary, not of another), and the pause's
life with scripted event streams: paused at start, `ended` false until the promotion
is announced, resumed at stop with the event and how long it took on record."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions as rex

from lockcheck.nemesis.promotion_pause import (
    PROMOTING,
    Promotion,
    PromotionPause,
    Source,
    drain,
    master_address,
)

OLD, NEW, OTHER = "10.0.0.1", "10.0.0.3", "10.0.0.2"
WAIT_PROMOTION = f"slave {NEW}:6379 {NEW} 6379 @ lockcheck {OLD} 6379"
SWITCH = f"lockcheck {OLD} 6379 {NEW} 6379"


def test_the_primary_an_event_is_about() -> None:
    assert master_address(PROMOTING, WAIT_PROMOTION) == OLD
    assert master_address("+switch-master", SWITCH) == OLD
    assert master_address("+promoted-slave",
                          f"slave {NEW}:6379 {NEW} 6379 @ lockcheck {OLD} 6379") == OLD
    # a master's own events name no primary beyond themselves; garbage names none
    assert master_address("+sdown", f"master lockcheck {OLD} 6379") is None
    assert master_address("+switch-master", "lockcheck") is None
    assert master_address(PROMOTING, "slave x @ lockcheck") is None


def test_only_a_promotion_of_a_replica_of_the_paused_primary_counts() -> None:
    p = Promotion(OLD)
    assert not p.observe("+sdown", f"master lockcheck {OLD} 6379", 1.0)
    assert not p.observe("+failover-state-select-slave", f"master lockcheck {OLD} 6379", 1.1)
    # the same step of a failover of another primary (after an earlier switch)
    assert not p.observe(PROMOTING, f"slave {NEW}:6379 {NEW} 6379 @ lockcheck {OTHER} 6379",
                         1.2)
    assert p.observe(PROMOTING, WAIT_PROMOTION, 2.5)
    assert (p.event, p.at, p.promoted) == (PROMOTING, 2.5, NEW)
    # later steps keep the first
    assert p.observe("+switch-master", SWITCH, 3.0) and p.at == 2.5


def test_a_switch_ends_it_when_the_promotion_step_was_missed() -> None:
    p = Promotion(OLD)
    assert p.observe("+switch-master", SWITCH, 4.0)
    assert (p.event, p.promoted) == ("+switch-master", NEW)


@dataclass
class Stream:
    """One Sentinel's subscription, its messages scripted."""

    messages: list[dict[str, Any] | Exception] = field(default_factory=list)
    closed: bool = False

    def get_message(self, ignore_subscribe_messages: bool = False,
                    timeout: float = 0.0) -> dict[str, Any] | None:
        while self.messages:
            m = self.messages.pop(0)
            if isinstance(m, Exception):
                raise m
            if ignore_subscribe_messages and m["type"] == "subscribe":
                continue
            return m
        return None

    def close(self) -> None:
        self.closed = True


def event(channel: str, data: str) -> dict[str, Any]:
    return {"type": "message", "channel": channel, "data": data}


def test_drain_skips_a_sentinel_that_cannot_be_read() -> None:
    broken = Stream([rex.ConnectionError("reset")])
    leader = Stream([{"type": "subscribe", "channel": PROMOTING, "data": 1},
                     event("+odown", f"master lockcheck {OLD} 6379 #quorum 2/2"),
                     event(PROMOTING, WAIT_PROMOTION)])
    p = Promotion(OLD)
    assert drain([broken, leader], p, 7.0)
    assert p.at == 7.0


@dataclass
class FakeDB:
    calls: list[tuple[str, str]] = field(default_factory=list)
    primary: str = "n1"

    def pause(self, node: str) -> None:
        self.calls.append(("pause", node))

    def resume(self, node: str) -> None:
        self.calls.append(("resume", node))

    def primaries(self) -> list[str]:
        return [self.primary]

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(OLD, 26379), (OTHER, 26379), (NEW, 26379)]


def test_paused_until_the_promotion_then_resumed_with_it_on_record() -> None:
    streams = {a: Stream() for a in (OLD, OTHER, NEW)}
    db = FakeDB()

    def listen(address: str, port: int) -> Source | None:
        return None if address == OLD else streams[address]  # the paused node's is down

    nem = PromotionPause(db, {"n1": OLD, "n2": OTHER, "n3": NEW}, hold_s=10.0,
                         listen=listen)
    started = nem.start(random.Random(0))
    assert started == {"fault": "pause-primary-until-promotion", "targets": ["n1"],
                       "nodes": ["n1"], "watching": 2}
    assert db.calls == [("pause", "n1")]
    assert not nem.ended()
    streams[OTHER].messages.append(event("+sdown", f"master lockcheck {OLD} 6379"))
    assert not nem.ended()
    streams[NEW].messages.append(event(PROMOTING, WAIT_PROMOTION))
    assert nem.ended()
    stopped = nem.stop()
    assert stopped["promotion"] == PROMOTING and stopped["promoted"] == NEW
    assert 0 <= stopped["promotion_after_s"] < 5
    assert ("resume", "n1") in db.calls and all(s.closed for s in (streams[OTHER],
                                                                   streams[NEW]))
    assert not nem.ended()  # nothing paused any more


def test_no_promotion_the_pause_runs_its_hold_and_says_so() -> None:
    db = FakeDB()
    nem = PromotionPause(db, {"n1": OLD, "n2": OTHER}, hold_s=10.0,
                         listen=lambda a, p: Stream())
    nem.start(random.Random(0))
    assert not nem.ended()
    stopped = nem.stop()
    assert stopped["targets"] == ["n1"] and stopped["promotion"] is None
    assert {("resume", "n1"), ("resume", "n2")} <= set(db.calls)


def test_no_primary_named_nothing_is_paused() -> None:
    db = FakeDB(primary="")
    nem = PromotionPause(db, {"n1": OLD}, hold_s=10.0, listen=lambda a, p: Stream())
    assert nem.start(random.Random(0))["skipped"]
    assert db.calls == [] and not nem.ended()
