"""A primary paused until the Sentinels promote a replica, then resumed.

`pause-primary` resumes after a fixed time, so whether the old primary comes back
while the failover is still under way is chance. This fault aims at that moment: it
subscribes to every Sentinel's events, stops (SIGSTOP) the primary the service names,
and ends itself (`EndsItself`) as soon as a Sentinel announces that it has told a
replica to become primary (`+failover-state-wait-promotion`). The old primary then
resumes still a primary, with every lock key it held, while its replica is being
promoted with the keys replication had delivered: for a while two primaries answer,
and the Sentinels that have not heard of the switch still name the old one.

Resuming only at `+switch-master` (the failover's last step) comes too late: by then
most Sentinels name the new primary, and the clients that reach the old one are few.
If no promotion comes, the pause ends after its hold like `pause-primary`.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
import redis.exceptions as rex

from lockcheck.cluster.api import HasPrimary, Pausable, SentinelEvents
from lockcheck.nemesis.api import RunContext
from lockcheck.nemesis.process import _all_or_raise

# the failover's steps that come once a replica is being promoted, in their order: the
# first is the moment aimed at; the later ones end the pause if the first was missed
PROMOTING = "+failover-state-wait-promotion"
PROMOTION_EVENTS = (PROMOTING, "+promoted-slave", "+switch-master")
# with no promotion, the pause lasts at most this long unless --nemesis-duration says
# (a failover here takes 2-4 s: down after 1 s, an election, the promotion)
DEFAULT_HOLD_S = 10.0
SUBSCRIBE_TIMEOUT_S = 1.0


def master_address(channel: str, data: str) -> str | None:
    """The address of the primary a Sentinel event is about, or None if it names none.

    `+switch-master <name> <old-ip> <old-port> <new-ip> <new-port>` names it first;
    an event about a replica ends `@ <name> <primary-ip> <primary-port>`."""
    words = data.split()
    if channel == "+switch-master":
        return words[1] if len(words) == 5 else None
    if "@" in words:
        after = words[words.index("@") + 1:]
        return after[1] if len(after) == 3 else None
    return None


@dataclass
class Promotion:
    """Watches the events for the promotion of a replica of the primary at `address`."""

    address: str
    event: str | None = None  # the first promotion event about it
    at: float | None = None  # when it came (time.monotonic())
    promoted: str | None = None  # the replica's address, when the event names it

    @property
    def seen(self) -> bool:
        return self.event is not None

    def observe(self, channel: str, data: str, now: float) -> bool:
        """Take one event; True once the promotion has been seen."""
        if self.event is None and channel in PROMOTION_EVENTS \
                and master_address(channel, data) == self.address:
            self.event, self.at = channel, now
            words = data.split()
            # `slave <ip:port> <ip> <port> @ ...`, or the new address of +switch-master
            self.promoted = words[3] if channel == "+switch-master" else words[2]
        return self.seen


class Source(Protocol):
    """One subscription (redis-py's PubSub): a message, or None if none is waiting."""

    def get_message(self, ignore_subscribe_messages: bool = False,
                    timeout: float = 0.0) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


def drain(sources: Iterable[Source], promotion: Promotion, now: float) -> bool:
    """Read what every source has waiting, without blocking; True once promoted. A
    Sentinel that cannot be read is skipped: the others announce the same failover."""
    for s in sources:
        while not promotion.seen:
            try:
                m = s.get_message(ignore_subscribe_messages=True, timeout=0.0)
            except (rex.RedisError, OSError):
                break
            if m is None:
                break
            if m.get("type") == "message":
                promotion.observe(str(m["channel"]), str(m["data"]), now)
    return promotion.seen


def subscribe(address: str, port: int) -> Source | None:
    """Subscribe to one Sentinel's promotion events; None if it does not answer."""
    client = redis.Redis(host=address, port=port, socket_timeout=SUBSCRIBE_TIMEOUT_S,
                         socket_connect_timeout=SUBSCRIBE_TIMEOUT_S,
                         decode_responses=True, protocol=2)
    ps = client.pubsub()
    try:
        ps.subscribe(*PROMOTION_EVENTS)
        # wait for every confirmation: an event published before it would be missed
        confirmed = 0
        deadline = time.monotonic() + SUBSCRIBE_TIMEOUT_S
        while confirmed < len(PROMOTION_EVENTS) and time.monotonic() < deadline:
            m = ps.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if m is not None and m.get("type") == "subscribe":
                confirmed += 1
    except (rex.RedisError, OSError):
        ps.close()
        return None
    if confirmed < len(PROMOTION_EVENTS):
        ps.close()
        return None
    source: Source = ps
    return source


class PromotionDB(Pausable, HasPrimary, SentinelEvents, Protocol):
    """What this fault acts on."""


@dataclass
class PromotionPause:
    db: PromotionDB
    addresses: dict[str, str]  # node name -> address, as the Sentinels name it
    hold_s: float  # the longest pause, when no promotion comes
    name: str = "pause-primary-until-promotion"
    start_f: str = "pause"
    stop_f: str = "resume"
    listen: Callable[[str, int], Source | None] = subscribe  # one Sentinel's events
    _paused: list[str] = field(default_factory=list)
    _sources: list[Source] = field(default_factory=list)
    _promotion: Promotion | None = None
    _since: float = 0.0

    def start(self, rng: random.Random) -> dict[str, Any]:
        primary = [n for n in self.db.primaries() if n in self.addresses]
        if not primary:
            return {"fault": self.name, "targets": [], "skipped": "no primary named"}
        (node,) = primary[:1]
        self._close()
        self._sources = [s for a, p in self.db.sentinel_addresses()
                         if (s := self.listen(a, p)) is not None]
        self._promotion = Promotion(self.addresses[node])
        self._since = time.monotonic()
        self._paused = [node]
        self.db.pause(node)
        return {"fault": self.name, "targets": [node], "nodes": [node],
                "watching": len(self._sources)}

    def ended(self) -> bool:
        """The Sentinels have begun promoting a replica of the paused primary."""
        if self._promotion is None or not self._paused:
            return False
        return drain(self._sources, self._promotion, time.monotonic())

    def stop(self) -> dict[str, Any]:
        names = list(self._paused)
        p = self._promotion
        if p is not None and names:
            drain(self._sources, p, time.monotonic())  # a promotion seen only now
        self.heal()
        value: dict[str, Any] = {"fault": self.name, "targets": names, "nodes": names}
        if p is not None and p.at is not None:
            value.update(promotion=p.event, promoted=p.promoted,
                         promotion_after_s=round(p.at - self._since, 3))
        elif names:
            value["promotion"] = None  # the pause ran out its hold
        return value

    def _close(self) -> None:
        for s in self._sources:
            with contextlib.suppress(rex.RedisError, OSError):
                s.close()
        self._sources = []

    def heal(self) -> None:
        self._paused, self._promotion = [], None
        self._close()
        # resume everything, not only what we remember pausing: SIGCONT is harmless
        _all_or_raise("resume", list(self.addresses), self.db.resume)


def pause_until_promotion(ctx: RunContext) -> PromotionPause:
    db = ctx.db
    assert isinstance(db, Pausable) and isinstance(db, HasPrimary) \
        and isinstance(db, SentinelEvents)
    spec = ctx.spec
    hold = spec.nemesis_duration if spec.nemesis_duration is not None \
        else max(spec.nemesis_interval, DEFAULT_HOLD_S)
    return PromotionPause(db, {n.name: n.address for n in ctx.cluster.nodes}, hold)
