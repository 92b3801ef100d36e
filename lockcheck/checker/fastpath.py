"""Lock histories decided without search, for `mutex` and `fenced-mutex`: sorts and passes.

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
witness. The blocks are sorted once by closed U and by L; each step then takes the
best block left in each order (gone ones skipped by path-compressed jumps), so after the
sorts it is linear in the grants.

`decide` works on columns (lists indexed by op), so that a history read straight into
columns (`lockcheck.checker.lockscan`) needs no object per operation; `fast_check` is
the same on engine operations.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

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


ACQUIRE, RENEW, RELEASE = 0, 1, 2
_CODES = {"acquire": ACQUIRE, "renew": RENEW, "release": RELEASE}


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
    f: list[int] = []
    for op in history:
        code = _CODES.get(op.input.f)
        if code is None:
            return FastVerdict(None, f"unknown operation {op.input.f!r}")
        f.append(code)
    return decide(
        f,
        [op.input.client for op in history],
        [op.call for op in history],
        [op.return_time for op in history],
        [_fence(op) if code == ACQUIRE else None for op, code in zip(history, f, strict=True)],
        [op.input.fence for op in history],
        model == "fenced-mutex",
        history.__getitem__,
    )


def decide(
    f: list[int],
    client: list[Hashable],
    call: list[Any],
    ret: list[Any],
    fence: list[int | None],
    named: list[int | None],
    fenced: bool,
    op_at: Callable[[int], Operation],
) -> FastVerdict:
    """`fast_check` on columns: op i is `f[i]` (ACQUIRE, RENEW or RELEASE) about the
    lease of `client[i]`, invoked at `call[i]`, returned at `ret[i]` (inf if crashed),
    with `fence[i]` (an ok acquire's fence) and `named[i]` (the fence a renew or
    release names). ``op_at(i)`` gives the operation, for the messages. Every step is
    a pass over the columns or over the grants, with a sort of each client's grants and
    a binary search per renew or release; the order of the grants is O(g log g)."""
    n = len(f)
    grants: dict[Hashable, list[int]] = {}
    crashed_acquires: dict[Hashable, Any] = {}  # client -> earliest call
    attached: list[int] = []
    for i in range(n):
        fi = f[i]
        crashed = ret[i] == INF
        if fi == ACQUIRE:
            c = client[i]
            if crashed:
                t = crashed_acquires.get(c)
                if t is None or call[i] < t:
                    crashed_acquires[c] = call[i]
            else:
                mine = grants.get(c)
                if mine is None:
                    grants[c] = [i]
                else:
                    mine.append(i)
        elif not crashed or (fi == RELEASE and not fenced):
            attached.append(i)

    if fenced:  # a fence granted twice can never be in increasing order
        fences = [fence[a] for ops in grants.values() for a in ops if fence[a] is not None]
        if len(set(fences)) != len(fences):
            seen: dict[int, int] = {}
            for ops in grants.values():
                for a in ops:
                    fa = fence[a]
                    if fa is None:
                        continue
                    other = seen.get(fa)
                    if other is not None:
                        o, p = op_at(other), op_at(a)
                        return _illegal(f"fence {fa} was granted twice: {_describe(o)} and "
                                        f"{_describe(p)}", o, p)
                    seen[fa] = a

    # each client's grants in call order, with the latest return among earlier ones;
    # blocks are numbered in that order (client by client)
    calls: dict[Hashable, list[Any]] = {}
    prior_ret: dict[Hashable, list[Any]] = {}
    first_block: dict[Hashable, int] = {}
    acq: list[int] = []  # block -> its acquire
    for c, ops in grants.items():
        ops.sort(key=call.__getitem__)
        calls[c] = [call[a] for a in ops]
        top, before = -INF, []
        for a in ops:
            before.append(top)
            r = ret[a]
            if r > top:
                top = r
        prior_ret[c] = before
        first_block[c] = len(acq)
        acq.extend(ops)
    nb = len(acq)
    renews: dict[int, list[int]] = {}
    release = [-1] * nb
    crashed_release = [-1] * nb  # mutex only: the earliest-invoked one

    for i in attached:
        c = client[i]
        ri = ret[i]
        t = crashed_acquires.get(c)
        if t is not None and t <= ri:
            op = op_at(i)
            return FastVerdict(None, f"a crashed acquire of {op.input.client} may precede "
                                     f"{_describe(op)}")
        cs = calls.get(c)
        j = bisect_right(cs, ri) - 1 if cs is not None else -1
        if j < 0:
            if ri == INF:
                continue  # a crashed release with nothing to release: never took effect
            op = op_at(i)
            return _illegal(
                f"{_describe(op)} completed at {op.return_time}, but {op.input.client} was "
                "granted the lock by no acquire invoked before that", op)
        b = first_block[c] + j
        g = acq[b]
        if not (ret[g] < call[i] and prior_ret[c][j] < call[g]):
            op = op_at(i)
            return FastVerdict(None, f"{op.input.client} has overlapping operations: cannot "
                                     f"tell which grant {_describe(op)} belongs to")
        nm = named[i]
        if fenced and nm is not None and fence[g] is not None and nm != fence[g]:
            op, go = op_at(i), op_at(g)
            return _illegal(
                f"{_describe(op)} names fence {nm}, but the lease {op.input.client} held then "
                f"was granted with fence {fence[g]} ({_describe(go)})", go, op)
        if f[i] == RENEW:
            rs = renews.get(b)
            if rs is None:
                renews[b] = [i]
            else:
                rs.append(i)
        elif ri == INF:
            cr = crashed_release[b]
            if cr < 0 or call[i] < call[cr]:
                crashed_release[b] = i
        elif release[b] >= 0:
            first, op = op_at(release[b]), op_at(i)
            window = [op_at(x) for x in _block_ops(b, acq, renews, release, crashed_release)]
            return _illegal(
                f"the lease of {_describe(op_at(g))} was released twice: "
                f"{_describe(first)} and {_describe(op)}", first, op, window=[*window, op])
        else:
            release[b] = i

    for b in sorted(renews):  # inside a block: renews before the release
        rs = renews[b]
        rel = release[b]
        if rel >= 0:
            for r in rs:
                if ret[rel] < call[r]:
                    rop, relop = op_at(r), op_at(rel)
                    window = [op_at(x)
                              for x in _block_ops(b, acq, renews, release, crashed_release)]
                    return _illegal(
                        f"{_describe(rop)} was invoked at {rop.call}, after the release of "
                        f"the same lease completed at {relop.return_time}: the lease of "
                        f"{_describe(op_at(acq[b]))} was renewed after it had been released",
                        relop, rop, window=window)
    return _order(_Blocks(acq, renews, release, crashed_release, fence, call, ret, op_at),
                  fenced)


def _block_ops(b: int, acq: list[int], renews: dict[int, list[int]], release: list[int],
               crashed_release: list[int]) -> list[int]:
    """A block's ops: the acquire, its renews, then its release (or crashed release)."""
    out = [acq[b], *renews.get(b, ())]
    if release[b] >= 0:
        out.append(release[b])
    elif crashed_release[b] >= 0:
        out.append(crashed_release[b])
    return out


@dataclass(slots=True)
class _Blocks:
    """The grants (blocks) of one key and the columns of its ops."""

    acq: list[int]
    renews: dict[int, list[int]]
    release: list[int]
    crashed_release: list[int]
    fence: list[int | None]
    call: list[Any]
    ret: list[Any]
    op_at: Callable[[int], Operation]

    def ops(self, b: int) -> list[Operation]:
        return [self.op_at(i) for i in _block_ops(b, self.acq, self.renews, self.release,
                                                   self.crashed_release)]


def _spans(bl: _Blocks, fenced: bool) -> tuple[list[Any], list[int], list[Any], list[int]]:
    """Per block: L (earliest return) and its op, closed U (latest invoke; inf: never
    released, mutex) and its op (-1 for none)."""
    call, ret, renews, release, crel = bl.call, bl.ret, bl.renews, bl.release, bl.crashed_release
    lows: list[Any] = []
    low_ops: list[int] = []
    highs: list[Any] = []
    high_ops: list[int] = []
    for b, a in enumerate(bl.acq):
        lo = hi = a
        for o in renews.get(b, ()):
            if ret[o] < ret[lo]:
                lo = o
            if call[o] > call[hi]:
                hi = o
        rel = release[b]
        if rel >= 0:
            if ret[rel] < ret[lo]:
                lo = rel
            if call[rel] > call[hi]:
                hi = rel
        high = call[hi]
        if not fenced and rel < 0:
            cr = crel[b]
            if cr < 0:
                high, hi = INF, -1
            elif call[cr] > high:
                high, hi = call[cr], cr
        lows.append(ret[lo])
        low_ops.append(lo)
        highs.append(high)
        high_ops.append(hi)
    return lows, low_ops, highs, high_ops


class _Walk:
    """Blocks in a fixed order (best first) from which blocks only go: the best one
    left, skipping the gone ones with path-compressed jumps (amortized O(1), where a
    heap would pay O(log n) per pop, and Python per step)."""

    __slots__ = ("gone", "items", "jump")

    def __init__(self, items: list[int], gone: list[bool]) -> None:
        self.items = items
        self.gone = gone
        self.jump = list(range(1, len(items) + 1))  # a position -> a later one to look at

    def _alive(self, q: int) -> int:
        """The first position >= q whose block is not gone (len(items) if none)."""
        items, gone, jump = self.items, self.gone, self.jump
        m = len(items)
        r = q
        while r < m and gone[items[r]]:
            r = jump[r]
        while q < r:  # compress the path just walked
            nq = jump[q]
            jump[q] = r
            q = nq
        return r

    def top(self, skip: int = -1) -> int:
        """The best block left other than `skip` (-1: none)."""
        m = len(self.items)
        p = self._alive(0)
        if p < m and self.items[p] == skip:
            p = self._alive(p + 1)
        return self.items[p] if p < m else -1


def _order(bl: _Blocks, fenced: bool) -> FastVerdict:
    """Find an order of the blocks from the back (see the module doc), or a cycle."""
    n = len(bl.acq)
    lows, low_ops, highs, high_ops = _spans(bl, fenced)
    fence = bl.fence
    chain = sorted((fence[a], b) for b, a in enumerate(bl.acq)
                   if fenced and fence[a] is not None)
    in_chain = {b for _, b in chain}
    gone = [False] * n
    # highest closed U first, then lowest block number (as a heap of (-U, b) would pop)
    by_high = _Walk(sorted(range(n), key=lambda b: -highs[b]), gone)
    by_low = _Walk(sorted((b for b in range(n) if b not in in_chain), key=lambda b: -lows[b]),
                   gone)
    left = n
    while left > 1:
        h1 = by_high.top()
        h2 = by_high.top(h1)
        t = chain[-1][1] if chain else -1
        if (h1 not in in_chain or h1 == t) and lows[h1] >= highs[h2]:
            pick = h1
        else:
            best = [i for i in (by_low.top(h1), t) if i >= 0 and i != h1]
            g = max(best, key=lows.__getitem__, default=-1)
            if g >= 0 and lows[g] >= highs[h1]:
                pick = g
            else:
                spans = _Spans(lows, low_ops, highs, high_ops)
                return _cycle(bl, spans, h1, h2, t, in_chain)
        gone[pick] = True
        left -= 1
        if chain and chain[-1][1] == pick:
            chain.pop()
    return FastVerdict(CheckResult.OK, f"{n} grants put in order without search")


@dataclass(slots=True)
class _Spans:
    low: list[Any]
    low_op: list[int]
    high: list[Any]
    high_op: list[int]


def _edge(bl: _Blocks, sp: _Spans, a: int, b: int) -> tuple[str, list[Operation]]:
    """Why block a must come before block b (real time, or else the fences)."""
    op = bl.op_at
    if sp.low[a] < sp.high[b]:
        low_op = op(sp.low_op[a])
        if sp.high_op[b] < 0:
            return (f"the lock granted by {_describe(op(bl.acq[b]))} was never released, "
                    "so that grant must be the last one", [low_op, op(bl.acq[b])])
        high_op = op(sp.high_op[b])
        return (f"{_describe(low_op)} completed at {sp.low[a]} before {_describe(high_op)} "
                f"was invoked at {sp.high[b]}", [low_op, high_op])
    return (f"fence {bl.fence[bl.acq[a]]} is below fence {bl.fence[bl.acq[b]]}",
            [op(bl.acq[a]), op(bl.acq[b])])


def _cycle(bl: _Blocks, sp: _Spans, h1: int, h2: int, t: int, in_chain: set[int]) -> FastVerdict:
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
        text, ops = _edge(bl, sp, a, b)
        parts.append(f"{_describe(bl.op_at(bl.acq[a]))} must come before "
                     f"{_describe(bl.op_at(bl.acq[b]))}: {text}")
        witness.extend(o for o in ops if o not in witness)
    window = [o for i in cyc for o in bl.ops(i)]
    window.sort(key=lambda o: o.call)
    return FastVerdict(
        CheckResult.ILLEGAL,
        "no order of the grants respects real time and the fences: " + "; ".join(parts),
        tuple(witness),
        tuple(window),
    )
