"""Lock models: an owner-aware `mutex` and a lease lock with fences, `fenced_mutex`.

Both are partitioned by key (each lock is independent). An operation's input is a
`LockInput` (what was asked, by which client, on which key, naming which lease) and an
ok output is a `LockOutput` (the fence the service returned, if any). Definite failures
(`fail`) took no effect and must be dropped before checking; a crashed (`info`) op is
given ``return_time = inf`` and is stepped with `UNKNOWN`: it may take effect at any
point after its call, or never.

`mutex`: a lock that only `release` frees (no expiry).

* ``acquire`` by c is legal only when the lock is free; c becomes the holder.
* ``release`` by c is legal only when c holds it; the lock becomes free.
* ``renew`` by c is legal only when c holds it (a renew ok by c proves c held the lock
  at that point); it changes nothing.
* Fences are ignored. A lease that expires without a release is *not* modelled: with a
  TTL-based service, any history in which a holder lost its lease by expiry and someone
  else then acquired is illegal under `mutex`. Use it for lock services without expiry
  (or to see whether expiry ever mattered); use `fenced_mutex` on lockcheck runs.

`fenced_mutex`: a lease lock; the holder may lose the lock at any moment (expiry), so
``acquire`` never waits for a release. What it checks:

* every ok ``acquire`` with a fence gets a fence strictly greater than every fence
  granted before it in the linearization (fence order against real time);
* ``renew`` and ``release`` ok by c are legal only while c holds the lease they name
  (their ``fence``; a None fence on either side matches any lease of c). Expiry never
  needs to be modelled explicitly: a lease that expired can only be followed by another
  client's acquire, which is legal anyway, so "not yet expired" is always at least as
  permissive.
* An acquire ok without a fence (a backend that issues none) is not ordered.
* A crashed acquire that took effect granted a fence we never saw. The state keeps it
  as `PENDING` and assumes the smallest fence possible (one above the floor, fences are
  integers); a later renew/release by that client naming fence N fixes it to N if
  N is possible.

Both models are deterministic: a crashed op that is linearized applies its effect.
Where it could not have taken effect (a release or renew of a lease its client does not
hold, an acquire of a held lock), its step is illegal, as an ok op's would be: the
engine treats crashed ops as optional (it never has to linearize them), so "it took no
effect" needs no clause of its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lockcheck.checker.porcupine.model import UNKNOWN, Model, Operation

LockF = Literal["acquire", "release", "renew"]


@dataclass(frozen=True, slots=True)
class LockInput:
    """What was asked: ``f`` by ``client`` on ``key``; ``fence`` names the lease
    (for renew and release; None when unknown or for acquire)."""

    f: LockF
    client: Hashable
    key: Hashable = None
    fence: int | None = None


@dataclass(frozen=True, slots=True)
class LockOutput:
    """What an ok op returned: the fence (None if the service issues none)."""

    fence: int | None = None


class _Pending:
    """The fence of a lease granted by a crashed acquire: not known."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"

    def __reduce__(self) -> str:
        return "PENDING"


PENDING: Any = _Pending()

MutexState = Hashable  # the holder's client id, or None when free
# (holder or None, the holder's lease fence (int, None or PENDING), floor or None):
# floor is the lowest value every later fence must exceed.
FencedState = tuple[Hashable, Any, int | None]


def partition_by_key(ops: Sequence[Operation]) -> list[list[Operation]]:
    """Split a history by the lock key in each op's `LockInput`."""
    parts: dict[Hashable, list[Operation]] = defaultdict(list)
    for op in ops:
        parts[op.input.key].append(op)
    return list(parts.values())


def describe_lock_operation(inp: LockInput, out: Any) -> str:
    lease = f", fence {inp.fence}" if inp.fence is not None else ""
    if out is UNKNOWN:
        result = "?"
    elif inp.f == "acquire" and isinstance(out, LockOutput):
        result = f"fence {out.fence}" if out.fence is not None else "ok"
    else:
        result = "ok"
    return f"{inp.f}({inp.client}{lease}) -> {result}"


# ---------------------------------------------------------------- mutex


def _mutex_init() -> MutexState:
    return None


def _mutex_step(holder: MutexState, inp: LockInput, out: Any) -> tuple[bool, MutexState]:
    if inp.f == "acquire":
        return holder is None, inp.client if holder is None else holder
    if inp.f == "release":
        return holder == inp.client, None if holder == inp.client else holder
    if inp.f == "renew":
        return holder == inp.client, holder
    return False, holder


def _describe_mutex_state(holder: MutexState) -> str:
    return "free" if holder is None else f"held by {holder}"


mutex: Model[MutexState, LockInput, Any] = Model(
    init=_mutex_init,
    step=_mutex_step,
    partition=partition_by_key,
    describe_operation=describe_lock_operation,
    describe_state=_describe_mutex_state,
)


# ---------------------------------------------------------------- fenced mutex


def _fenced_init() -> FencedState:
    return (None, None, None)


def _owned(state: FencedState, inp: LockInput) -> FencedState | None:
    """The state after learning that `inp.client` holds the lease `inp.fence`, or None
    when it cannot hold it."""
    holder, hfence, floor = state
    if holder is None or holder != inp.client:
        return None
    n = inp.fence
    if hfence is PENDING:
        if n is None:
            return state
        if floor is not None and n < floor:
            return None
        return (holder, n, n if floor is None else max(floor, n))
    if hfence is None or n is None or hfence == n:
        return state
    return None


def _fenced_step(state: FencedState, inp: LockInput, out: Any) -> tuple[bool, FencedState]:
    crashed = out is UNKNOWN
    floor = state[2]
    if inp.f == "acquire":
        if crashed:
            return True, (inp.client, PENDING, None if floor is None else floor + 1)
        fence = out.fence if isinstance(out, LockOutput) else None
        if fence is None:
            return True, (inp.client, None, floor)
        if floor is not None and fence <= floor:
            return False, state
        return True, (inp.client, fence, fence)
    if inp.f in ("renew", "release"):
        owned = _owned(state, inp)
        if owned is None:
            return False, state
        if inp.f == "release":
            return True, (None, None, owned[2])
        return True, owned
    return False, state


def _describe_fenced_state(state: FencedState) -> str:
    holder, hfence, floor = state
    top = "none" if floor is None else str(floor)
    if holder is None:
        return f"free (highest fence {top})"
    lease = "unknown fence" if hfence is PENDING else f"fence {hfence}"
    return f"held by {holder} ({lease}; highest fence {top})"


fenced_mutex: Model[FencedState, LockInput, Any] = Model(
    init=_fenced_init,
    step=_fenced_step,
    partition=partition_by_key,
    describe_operation=describe_lock_operation,
    describe_state=_describe_fenced_state,
)

LOCK_MODELS: dict[str, Model[Any, LockInput, Any]] = {
    "mutex": mutex,
    "fenced-mutex": fenced_mutex,
}
