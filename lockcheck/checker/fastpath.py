"""Lock histories decided without search: O(n log n) for `mutex` and `fenced-mutex`.

A lock history has far more structure than a general object's, and this module uses
it to decide one key exactly, with fences or without, or to say why it cannot (then
the caller searches, bounded).

**Grants and blocks.** Every ok acquire is a *grant*. Every ok renew or release of
client c (`LockInput.client`: the lease's owner) is attributed to the last grant to c
that completed before the op was invoked. In both models an op of c is legal only
while c holds the lock, and only an acquire makes c the holder, so the op must be
linearized after *some* acquire by c with no other acquire in between. The attribution
is exact when it is the only candidate: every other acquire by c either completed
before the attributed grant was invoked or was invoked after the op completed. That
holds whenever a client has one op in flight (Jepsen's rule, and lockcheck's); where
it does not, `fast_check` declines. Hence every linearization is a sequence of
*blocks*, one per grant, in some order: the acquire, its renews, then its release, if
any (a renew after the release, a second release, or an op before its grant is
illegal at once).

**Crashed ops.** A crashed renew does nothing: dropped. A crashed release only frees
the lock: in `fenced-mutex`, where any acquire displaces the holder, that never helps
anyone, so it is dropped; in `mutex` it may close its grant's block at any point after
its call, which is kept (below). A crashed acquire by c can only help a later renew or
release by c (for everyone else it takes the lock away), so it is dropped when no
renew or release of c could come after it, i.e. when c retired after it, as Jepsen's
and lockcheck's clients do; otherwise `fast_check` declines.

**The order of the blocks.** For a block g let L(g) be the earliest return and U(g)
the latest invoke of its ops. Blocks g before h respect real time iff no op of h
returned before an op of g was invoked: iff U(g) <= L(h). In `mutex` a lock is free
again only after a release, so every block but the last must end in one: its "closed"
U is U(g) with the call of its earliest crashed release included when it has no ok
release, and infinite when it has no release at all. `fenced-mutex` needs no closing
(a lease may expire at any moment), and its fences fix the order of the fenced grants
among themselves (each must exceed every fence granted before it; a repeated fence is
illegal at once). So the question is whether the blocks have an order in which every
earlier block's closed U is at most every later block's L, respecting the fence order.

Built from the back: the last block g needs L(g) >= closed U(h) of all others (its own
closure does not matter) and no fenced block above it. If a block qualifies, putting
it last is never wrong (exchange argument: moving it to the end of any valid order
keeps the order valid), so the greedy choice is exact; when no block qualifies, two or
three of them are in a cycle of "must come before" (real time or fences), which is the
witness. With heaps this is O(n log n).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from lockcheck.checker.porcupine import CheckResult, Operation
from lockcheck.checker.porcupine.lock_models import LockOutput, describe_lock_operation

INF = math.inf
MODELS = ("mutex", "fenced-mutex")


@dataclass(frozen=True, slots=True)
class FastVerdict:
    """The fast path's answer for one key.

    ``result`` is None when the path does not apply (``reason`` says why); otherwise OK
    or ILLEGAL, and for ILLEGAL ``reason`` explains, ``witness`` lists the ops that
    prove it and ``window`` the ops of the grants involved (a sub-history that is
    illegal for the same reason, small enough to draw).
    """

    result: CheckResult | None
    reason: str = ""
    witness: tuple[Operation, ...] = field(default=())
    window: tuple[Operation, ...] = field(default=())

    @property
    def applies(self) -> bool:
        return self.result is not None


@dataclass(slots=True)
class _Block:
    """A grant and the ops attributed to it."""

    acquire: Operation
    fence: int | None
    renews: list[Operation] = field(default_factory=list)
    release: Operation | None = None
    crashed_release: Operation | None = None  # mutex only: the earliest-invoked one

    def ops(self) -> list[Operation]:
        out = [self.acquire, *self.renews]
        if self.release is not None:
            out.append(self.release)
        elif self.crashed_release is not None:
            out.append(self.crashed_release)
        return out


def _describe(op: Operation) -> str:
    return describe_lock_operation(op.input, op.output)


def _fence(op: Operation) -> int | None:
    out = op.output
    f = out.fence if isinstance(out, LockOutput) else None
    return f if isinstance(f, int) and not isinstance(f, bool) else None


def _illegal(reason: str, *ops: Operation, window: Sequence[Operation] = ()) -> FastVerdict:
    return FastVerdict(CheckResult.ILLEGAL, reason, tuple(ops), tuple(window) or tuple(ops))


def fast_check(history: Sequence[Operation], model: str = "fenced-mutex") -> FastVerdict:
    """Decide one key's history against `mutex` or `fenced-mutex`, if possible."""
    if model not in MODELS:
        return FastVerdict(None, f"no fast path for model {model!r}")
    fenced = model == "fenced-mutex"
    grants: dict[Hashable, list[Operation]] = {}
    crashed_acquires: dict[Hashable, float] = {}  # client -> earliest call
    attached: list[Operation] = []
    for op in history:
        f = op.input.f
        crashed = op.return_time == INF
        if f == "acquire":
            c = op.input.client
            if crashed:
                crashed_acquires[c] = min(op.call, crashed_acquires.get(c, INF))
            else:
                grants.setdefault(c, []).append(op)
        elif f == "renew" or f == "release":
            if not crashed or (f == "release" and not fenced):
                attached.append(op)
        else:
            return FastVerdict(None, f"unknown operation {f!r}")

    if fenced:  # a fence granted twice can never be in increasing order
        seen: dict[int, Operation] = {}
        for ops in grants.values():
            for a in ops:
                n = _fence(a)
                if n is None:
                    continue
                other = seen.get(n)
                if other is not None:
                    return _illegal(
                        f"fence {n} was granted twice: {_describe(other)} and {_describe(a)}",
                        other, a,
                    )
                seen[n] = a

    # each client's grants in call order, with the latest return among earlier ones
    calls: dict[Hashable, list[float]] = {}
    prior_ret: dict[Hashable, list[float]] = {}
    for c, ops in grants.items():
        ops.sort(key=lambda o: o.call)
        calls[c] = [o.call for o in ops]
        top, before = -INF, []
        for o in ops:
            before.append(top)
            top = max(top, o.return_time)
        prior_ret[c] = before
    blocks = {id(a): _Block(a, _fence(a)) for ops in grants.values() for a in ops}

    for op in attached:
        c = op.input.client
        if c in crashed_acquires and crashed_acquires[c] <= op.return_time:
            return FastVerdict(None, f"a crashed acquire of {c} may precede {_describe(op)}")
        j = bisect_right(calls.get(c, []), op.return_time) - 1
        if j < 0:
            if op.return_time == INF:
                continue  # a crashed release with nothing to release: never took effect
            return _illegal(
                f"{_describe(op)} completed at {op.return_time}, but {c} was granted "
                "the lock by no acquire invoked before that", op)
        g = grants[c][j]
        if not (g.return_time < op.call and prior_ret[c][j] < g.call):
            return FastVerdict(None, f"{c} has overlapping operations: cannot tell which "
                                     f"grant {_describe(op)} belongs to")
        b = blocks[id(g)]
        named = op.input.fence
        if fenced and named is not None and b.fence is not None and named != b.fence:
            return _illegal(
                f"{_describe(op)} names fence {named}, but the lease {c} held then was "
                f"granted with fence {b.fence} ({_describe(g)})", g, op)
        if op.input.f == "renew":
            b.renews.append(op)
        elif op.return_time == INF:
            if b.crashed_release is None or op.call < b.crashed_release.call:
                b.crashed_release = op
        elif b.release is not None:
            first = b.release
            return _illegal(
                f"the lease of {_describe(g)} was released twice: "
                f"{_describe(first)} and {_describe(op)}", first, op, window=[*b.ops(), op])
        else:
            b.release = op

    order = list(blocks.values())
    for b in order:  # inside a block: renews before the release
        rel = b.release
        if rel is not None:
            for r in b.renews:
                if rel.return_time < r.call:
                    return _illegal(
                        f"{_describe(r)} was invoked at {r.call}, after the release of the "
                        f"same lease completed at {rel.return_time}: the lease of "
                        f"{_describe(b.acquire)} was renewed after it had been released",
                        rel, r, window=b.ops())
    return _order(order, fenced)


@dataclass(frozen=True, slots=True)
class _Span:
    low: float  # L: earliest return
    low_op: Operation
    high: float  # closed U: latest invoke (inf: never released, mutex)
    high_op: Operation | None


def _span(b: _Block, fenced: bool) -> _Span:
    low_op = high_op = b.acquire
    for o in b.renews:
        if o.return_time < low_op.return_time:
            low_op = o
        if o.call > high_op.call:
            high_op = o
    rel = b.release
    if rel is not None:
        if rel.return_time < low_op.return_time:
            low_op = rel
        if rel.call > high_op.call:
            high_op = rel
    high: float = high_op.call
    closing: Operation | None = high_op
    if not fenced and rel is None:
        cr = b.crashed_release
        if cr is None:
            high, closing = INF, None
        elif cr.call > high:
            high, closing = cr.call, cr
    return _Span(low_op.return_time, low_op, high, closing)


def _order(blocks: list[_Block], fenced: bool) -> FastVerdict:
    """Find an order of the blocks from the back (see the module doc), or a cycle."""
    n = len(blocks)
    spans = [_span(b, fenced) for b in blocks]
    chain = sorted((b.fence, i) for i, b in enumerate(blocks) if fenced and b.fence is not None)
    in_chain = {i for _, i in chain}
    by_high = [(-s.high, i) for i, s in enumerate(spans)]
    by_low = [(-s.low, i) for i, s in enumerate(spans) if i not in in_chain]
    heapq.heapify(by_high)
    heapq.heapify(by_low)
    gone = [False] * n

    def top(heap: list[tuple[float, int]], skip: int = -1) -> int:
        """The best remaining entry of a heap other than `skip` (-1: none)."""
        while heap and gone[heap[0][1]]:
            heapq.heappop(heap)
        if not heap:
            return -1
        if heap[0][1] != skip:
            return heap[0][1]
        first = heapq.heappop(heap)
        second = top(heap)
        heapq.heappush(heap, first)
        return second

    left = n
    while left > 1:
        h1 = top(by_high)
        h2 = top(by_high, h1)
        t = chain[-1][1] if chain else -1
        if (h1 not in in_chain or h1 == t) and spans[h1].low >= spans[h2].high:
            pick = h1
        else:
            best = [i for i in (top(by_low, h1), t) if i >= 0 and i != h1]
            g = max(best, key=lambda i: spans[i].low, default=-1)
            if g >= 0 and spans[g].low >= spans[h1].high:
                pick = g
            else:
                return _cycle(blocks, spans, h1, h2, t, in_chain)
        gone[pick] = True
        left -= 1
        if chain and chain[-1][1] == pick:
            chain.pop()
    return FastVerdict(CheckResult.OK, f"{n} grants put in order without search")


def _edge(blocks: list[_Block], spans: list[_Span], a: int, b: int) -> tuple[str, list[Operation]]:
    """Why block a must come before block b (real time, or else the fences)."""
    sa, sb = spans[a], spans[b]
    if sa.low < sb.high:
        if sb.high_op is None:
            return (f"the lock granted by {_describe(blocks[b].acquire)} was never released, "
                    "so that grant must be the last one", [sa.low_op, blocks[b].acquire])
        return (f"{_describe(sa.low_op)} completed at {sa.low} before {_describe(sb.high_op)} "
                f"was invoked at {sb.high}", [sa.low_op, sb.high_op])
    return (f"fence {blocks[a].fence} is below fence {blocks[b].fence}",
            [blocks[a].acquire, blocks[b].acquire])


def _cycle(blocks: list[_Block], spans: list[_Span], h1: int, h2: int, t: int,
           in_chain: set[int]) -> FastVerdict:
    """No block can come last: name two or three grants that must precede each other."""
    h1_free = h1 not in in_chain or h1 == t
    if not h1_free:
        cyc = [t, h1]  # t before h1 by real time, h1 before t by fence
    elif h2 >= 0 and (h2 not in in_chain or h2 == t):
        cyc = [h1, h2]
    elif t >= 0 and t != h1:
        cyc = [t, h1, h2]  # t before h1 (time), h1 before h2 (time), h2 before t (fence)
    else:
        cyc = [h1, h2]  # h1 is the top fence; h2 is below it
    parts: list[str] = []
    witness: list[Operation] = []
    for k, a in enumerate(cyc):
        b = cyc[(k + 1) % len(cyc)]
        text, ops = _edge(blocks, spans, a, b)
        parts.append(f"{_describe(blocks[a].acquire)} must come before "
                     f"{_describe(blocks[b].acquire)}: {text}")
        witness.extend(o for o in ops if o not in witness)
    window = [o for i in cyc for o in blocks[i].ops()]
    window.sort(key=lambda o: o.call)
    return FastVerdict(
        CheckResult.ILLEGAL,
        "no order of the grants respects real time and the fences: " + "; ".join(parts),
        tuple(witness),
        tuple(window),
    )
