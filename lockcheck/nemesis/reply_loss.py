"""`reply-loss`: the request of one chosen op reaches the server and is applied; only its
reply is withheld from the client, for `--reply-hold-ms`.

A reply lost after the server acted is what a client that retries, or that reads a
timeout as "nothing happened", gets wrong: it releases twice, takes a slot it thinks it
does not have, or gives up a grant it holds. `loss` drops packets at random in both
directions, so it hits that case only by luck. This fault aims:

1. the workers (all of them, or the one on `--reply-client`) are armed (SIGUSR1);
2. the first armed worker about to send a `--reply-op` (acquire, renew or release)
   records a `stop-before-<op>` event, flushes it and SIGSTOPs itself
   (`workloads/stop_point.py`, through `Worker.before_send`), before anything is sent;
3. the nemesis makes that worker's client host drop every packet from the nodes (the
   return path only: what the client sends still arrives), then resumes the worker;
4. the request is sent and applied; its reply, and the TCP acknowledgements, are
   dropped until the rule is lifted `hold_s` later. A hold longer than the client's op
   timeout loses the reply (the client gives up); a shorter one delays it (TCP
   retransmits it once the rule is gone).

Each worker runs on a client host of its own, so the rule touches only the aimed
worker's traffic. It needs clients with an address of their own (the local provider's
namespaces, docker, ssh with `clients:`); plain client processes share the
controller's address and are refused.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcheck.cluster.api import ClientHost
from lockcheck.errors import BadInput
from lockcheck.nemesis.api import Holding, RunContext, WorkerRef
from lockcheck.nemesis.client_pause import stop_one_at_point
from lockcheck.nemesis.partition import heal_hosts
from lockcheck.workloads.stop_point import POINTS, SENDS

if TYPE_CHECKING:
    from lockcheck.spec import TestSpec

NAME = "reply-loss"
START_F, STOP_F = "start-reply-loss", "stop-reply-loss"
CLIENT_RE = re.compile(r"^c(\d+)$")


def hold_ms(spec: TestSpec) -> int:
    """How long replies are withheld: `--reply-hold-ms`, by default 3x the op timeout
    (the client gives up on the reply first, and on a retry or two after it)."""
    if spec.reply_hold_ms is not None:
        return spec.reply_hold_ms
    return max(1, round(3 * spec.op_timeout_s * 1000))


def stop_before(spec: TestSpec) -> str | None:
    """The op the workers stop before when armed, or None without this fault."""
    return spec.reply_op if NAME in spec.nemesis else None


def validate(spec: TestSpec) -> None:
    """Refuse `--reply-*` options that cannot be met, in one line."""
    if spec.reply_op not in SENDS:
        raise BadInput(f"unknown --reply-op {spec.reply_op!r}; choose from {', '.join(SENDS)}")
    if spec.reply_client != "all":
        m = CLIENT_RE.match(spec.reply_client)
        if m is None or int(m.group(1)) >= spec.concurrency:
            raise BadInput(f"--reply-client must be all or a client c0..c{spec.concurrency - 1}, "
                           f"got {spec.reply_client!r}")
    if spec.reply_hold_ms is not None and spec.reply_hold_ms < 1:
        raise BadInput("--reply-hold-ms must be at least 1")
    # the drop rules of a client host are one chain, flushed whole by each fault's heal:
    # faults held at once would lift each other's rules
    sharing = [n for n in spec.nemesis if n.startswith("partition")
               or n in ("loss", "bridge-clock")]
    if NAME in spec.nemesis and sharing and spec.nemesis_mode == "all":
        raise BadInput(f"--nemesis reply-loss with {sharing[0]} in --nemesis-mode all: both "
                       "drop packets at the clients and each one's heal would lift the "
                       "other's rules; use --nemesis-mode one")
    if NAME in spec.nemesis and "client-pause" in spec.nemesis and spec.pause_at in POINTS:
        raise BadInput(f"--nemesis reply-loss and client-pause --pause-at {spec.pause_at} "
                       "both stop a worker at a point of its own; run them apart")


@dataclass
class ReplyLoss:
    workers: Sequence[WorkerRef]
    clients: Mapping[str, ClientHost]  # by name, those the fault may aim at
    sources: list[str]  # the nodes' addresses: what the aimed host stops hearing
    stopped_at_point: Callable[[Callable[[Collection[int]], object], Collection[int],
                                float], Holding | None]
    op: str  # acquire, renew or release
    aim: str  # "all" or a client name
    hold_s: float
    wait_s: float  # how long to wait for an aimed worker to reach its op
    name: str = NAME
    start_f: str = START_F
    stop_f: str = STOP_F
    _aimed: WorkerRef | None = None
    _since: float = 0.0
    _blocked: list[ClientHost] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        live = [w for w in self.workers if w.daemon.alive() and w.host in self.clients
                and self.aim in ("all", w.host)]
        if not live:
            return {"fault": self.name, "targets": [], "op": self.op,
                    "skipped": "no live client to aim at"}
        h, armed = stop_one_at_point(live, self.stopped_at_point, self.wait_s)
        if h is None:
            return {"fault": self.name, "targets": [], "op": self.op,
                    "skipped": f"no client sent a {self.op} in time"}
        w = next(x for x in live if x.index == h.worker)
        host = self.clients[w.host]
        try:
            host.block(self.sources)
            self._blocked = [host]
            self._aimed, self._since = w, time.monotonic()
        finally:
            # every armed worker: another may have stopped at its point meanwhile; it goes
            # on unaimed (its `stop-before` event has no start of this fault after it)
            for x in armed:
                x.daemon.signal(signal.SIGCONT)
        fence = {} if h.fence is None else {"fence": h.fence}
        return {"fault": self.name, "targets": [w.host], "worker": w.index,
                "process": h.process, "key": h.key, "op": self.op, **fence,
                "stopped_ns": h.since_ns, "hold_ms": round(self.hold_s * 1000)}

    def stop(self) -> dict[str, Any]:
        w, blocked = self._aimed, [h.name for h in self._blocked]
        held = round((time.monotonic() - self._since) * 1000) if w is not None else 0
        self.heal()
        value: dict[str, Any] = {"fault": self.name, "targets": blocked, "op": self.op,
                                 "withheld_ms": held}
        if w is not None:
            value["worker"] = w.index
        return value

    def heal(self) -> None:
        self._aimed = None
        self._blocked = []
        try:
            heal_hosts(list(self.clients.values()))
        finally:
            for w in self.workers:  # SIGCONT of a running process is harmless
                w.daemon.signal(signal.SIGCONT)


def reply_loss(ctx: RunContext) -> ReplyLoss:
    spec = ctx.spec
    assert ctx.stopped_at_point is not None
    own = {c.name: c for c in ctx.cluster.clients if c.own_network}
    if not own:
        raise BadInput("--nemesis reply-loss: the clients share this machine's address "
                       "(no client hosts of their own), so their replies cannot be told "
                       "apart from others'")
    return ReplyLoss(ctx.workers, own, sorted(n.address for n in ctx.cluster.nodes),
                     ctx.stopped_at_point, op=spec.reply_op, aim=spec.reply_client,
                     hold_s=hold_ms(spec) / 1000.0,
                     wait_s=max(1.0, spec.nemesis_interval, 2 * spec.hold_ms[1] / 1000.0))
