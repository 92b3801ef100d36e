"""The token-aware fast path for the `fenced-mutex` model: O(n log n), no search.

When the ok acquisitions of a key carry distinct integer fences, the fences fix the
order of the grants: in any linearization the ok acquires come in increasing fence
order. An ok renew or release naming fence N (of an ok acquire by the same client)
must come after that acquire, before the next grant, and renews before the release.
So a linearization is a sequence of groups

    acquire(f1), renews of f1, release of f1, acquire(f2), renews of f2, ...

with free order inside a group. Such a sequence respecting real time exists iff no op
of a later group completed before an op of an earlier group was invoked (intervals are
closed: touching ones are concurrent). With a running maximum of invoke times over the
groups that is one pass after a sort.

Crashed ops can be left out: under these conditions their effect only ever restricts
(a crashed acquire raises the fence floor and displaces the holder; a crashed release
frees a lease nobody else can name; a crashed renew does nothing), so linearizing them
last, which is the same as "never", is always at least as good.

The path applies when, for the key:

* every ok acquire has an integer fence (duplicates are decided at once: illegal);
* every ok renew/release names (``LockInput.fence``) the fence of an ok acquire by the
  same client.

Otherwise `fast_check` says why not and the caller falls back to the search. Property
tests (tests/checker/test_lock_models_properties.py) compare the two verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lockcheck.checker.porcupine import CheckResult, Operation
from lockcheck.checker.porcupine.lock_models import LockOutput, describe_lock_operation


@dataclass(frozen=True, slots=True)
class FastVerdict:
    """The fast path's answer for one key.

    ``result`` is None when the path does not apply (``reason`` says why); otherwise OK
    or ILLEGAL, and for ILLEGAL ``reason`` explains and ``witness`` lists the ops.
    """

    result: CheckResult | None
    reason: str = ""
    witness: tuple[Operation, ...] = field(default=())

    @property
    def applies(self) -> bool:
        return self.result is not None


def _describe(op: Operation) -> str:
    return describe_lock_operation(op.input, op.output)


def _fence(op: Operation) -> Any:
    out = op.output
    return out.fence if isinstance(out, LockOutput) else None


def fast_check(history: Sequence[Operation]) -> FastVerdict:
    """Check one key's history against `fenced_mutex` without search, if possible."""
    done = [op for op in history if op.return_time != math.inf]

    acquires: dict[int, Operation] = {}
    for op in done:
        if op.input.f != "acquire":
            continue
        fence = _fence(op)
        if not isinstance(fence, int) or isinstance(fence, bool):
            return FastVerdict(None, f"an ok acquire has no fence: {_describe(op)}")
        other = acquires.get(fence)
        if other is not None:
            return FastVerdict(
                CheckResult.ILLEGAL,
                f"fence {fence} was granted twice: {_describe(other)} and {_describe(op)}",
                (other, op),
            )
        acquires[fence] = op

    # rank of each lease in fence order; groups are 3*rank (+1 renews, +2 release)
    rank = {fence: n for n, fence in enumerate(sorted(acquires))}
    group: list[tuple[int, Operation]] = []
    released: dict[int, Operation] = {}
    for op in done:
        f = op.input.f
        if f == "acquire":
            group.append((3 * rank[_fence(op)], op))
            continue
        if f not in ("renew", "release"):
            return FastVerdict(None, f"unknown operation {f!r}")
        n = op.input.fence
        owner = acquires.get(n) if isinstance(n, int) else None
        if owner is None or owner.input.client != op.input.client:
            return FastVerdict(None, f"names no ok acquire of its client: {_describe(op)}")
        if f == "renew":
            group.append((3 * rank[n] + 1, op))
        else:
            first = released.get(n)
            if first is not None:
                return FastVerdict(
                    CheckResult.ILLEGAL,
                    f"the lease with fence {n} was released twice: "
                    f"{_describe(first)} and {_describe(op)}",
                    (first, op),
                )
            released[n] = op
            group.append((3 * rank[n] + 2, op))

    group.sort(key=lambda g: g[0])
    best: Operation | None = None  # the latest-invoked op of the groups before
    i = 0
    while i < len(group):
        j = i
        g = group[i][0]
        while j < len(group) and group[j][0] == g:
            j += 1
        if best is not None:
            for _, op in group[i:j]:
                if op.return_time < best.call:
                    return FastVerdict(CheckResult.ILLEGAL, _why(best, op, group[i][0]), (best, op))
        for _, op in group[i:j]:
            if best is None or op.call > best.call:
                best = op
        i = j
    return FastVerdict(CheckResult.OK, f"{len(acquires)} grants in fence order")


def _lease(op: Operation) -> Any:
    return _fence(op) if op.input.f == "acquire" else op.input.fence


def _why(first: Operation, later: Operation, later_group: int) -> str:
    """`later` must be linearized after `first` but completed before `first` began."""
    kind = ("acquire", "renew", "release")[later_group % 3]
    a, b = _lease(first), _lease(later)
    if first.input.f == "acquire" and kind == "acquire":
        why = (
            f"fence {b} was granted before the acquire that got the lower fence {a} "
            "was even invoked"
        )
    elif first.input.f == "acquire" and a == b:
        why = f"the lease with fence {b} was used before it was granted"
    elif first.input.f == "acquire":
        why = f"the lease with fence {b} was in use before the lower fence {a} was granted"
    elif kind == "acquire":
        why = (
            f"the older lease (fence {a}) was still renewed or released after fence {b} "
            "had been granted"
        )
    elif a == b:
        why = f"the lease with fence {a} was renewed after it had been released"
    else:
        why = f"the lease with fence {b} was in use while the older lease {a} still was"
    return (
        f"{_describe(later)} completed at {later.return_time} before "
        f"{_describe(first)} was invoked at {first.call}, but must come after it: {why}"
    )
