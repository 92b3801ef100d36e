"""The data the engine works on: operations, events, models and results.

Everything here is plain data. A model is a frozen dataclass of pure functions; the
engine never mutates a state, so states may be shared freely between search branches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

S = TypeVar("S")  # model state
I = TypeVar("I")  # noqa: E741  operation input
O = TypeVar("O")  # noqa: E741  operation output


class _Unknown:
    """The type of `UNKNOWN`; there is exactly one instance."""

    _instance: _Unknown | None = None
    __slots__ = ()

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""The output the engine passes to `step` for an operation whose result is unknown.

Crashed operations (``return_time == math.inf``) are always stepped with ``UNKNOWN``,
whatever their recorded output; a history may also use ``UNKNOWN`` itself as the output
of an operation that returned but whose result was lost (a timed-out read). A model's
`step` must treat ``UNKNOWN`` as matching any result, and still apply the operation's
effect to the state.
"""


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation with its real-time interval ``[call, return_time]`` (closed).

    Times are any comparable numbers (ns ints are fine); two operations whose
    intervals touch (``a.return_time == b.call``) are concurrent. A crashed or
    indeterminate operation (Jepsen ``:info``) has ``return_time = math.inf``: it stays
    pending to the end and is *optional*: it may take effect at any point after its
    call, or never. Its output is ignored; `step` receives `UNKNOWN` for it.
    ``client_id`` is only used to draw the operation's row in `visualize`.
    """

    client_id: int
    input: Any
    call: float
    output: Any
    return_time: float

    @property
    def crashed(self) -> bool:
        """True for an operation that never returned (open until the end)."""
        return self.return_time == math.inf


_new = object.__new__
# the slots' own setters (getattr: they are descriptors on the class)
_set_client, _set_input, _set_call, _set_output, _set_return = (
    getattr(Operation, f).__set__ for f in ("client_id", "input", "call", "output", "return_time")
)


def make_operation(client_id: int, input: Any, call: float, output: Any,
                   return_time: float) -> Operation:
    """``Operation(...)``, about 4x faster: the frozen dataclass's ``__init__`` goes
    through ``object.__setattr__`` per field; this fills the slots directly. For the
    engine's hot paths (a million-op history builds a million of them)."""
    op = _new(Operation)
    _set_client(op, client_id)
    _set_input(op, input)
    _set_call(op, call)
    _set_output(op, output)
    _set_return(op, return_time)
    return op


@dataclass(frozen=True, slots=True)
class Event:
    """A call or a return; a list of events is in real-time order (its index is its time).

    ``value`` is the input on a call and the output on a return; ``id`` pairs a call with
    its return. A call without a return is a crashed operation (see `Operation`).
    """

    client_id: int
    kind: Literal["call", "return"]
    value: Any
    id: int


class CheckResult(StrEnum):
    """The verdict. UNKNOWN only comes from the timeout or the cache cap."""

    OK = "ok"
    ILLEGAL = "illegal"
    UNKNOWN = "unknown"


def _describe_operation(input: Any, output: Any) -> str:
    return f"{input!r} -> {output!r}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Model(Generic[S, I, O]):
    """A sequential specification, as pure functions.

    * ``init()`` gives the initial state; ``step(state, input, output)`` returns
      ``(legal, next_state)`` and must not mutate ``state``. For crashed operations
      ``output`` is `UNKNOWN` (see there).
    * States must be hashable (tuples, frozen dataclasses, strings, ints...): the
      engine memoizes on them. For other states give ``key`` (a hashable identity for
      a state) or ``equal`` and ``hash``.
    * ``partition(ops)`` / ``partition_events(events)`` optionally split a history into
      independent sub-histories (P-compositionality: the history is linearizable iff
      every part is). ``partition_events`` must keep a call and its return together;
      without it, the event API converts events to operations and uses ``partition``.
    * ``read_only(input, output)`` is an optional hint that speeds up the search: return
      True only for an operation that, in *every* state, is either illegal or leaves the
      state unchanged (a read, a failed compare-and-set with a known result). When such
      an operation can be linearized next, the search does so without trying
      alternatives. A wrong hint gives wrong verdicts; when in doubt, leave it out.
    * ``read_value(input, output)``, for ops marked read-only: the one state in which the
      op is legal (a register read's output), or `UNKNOWN` if that is not a single known
      state (then `step` decides). The search then compares instead of calling `step`.
      Ignored for models with ``key`` or ``equal``.
    * ``describe_operation`` / ``describe_state`` give the strings shown by `visualize`.
    """

    init: Callable[[], S]
    step: Callable[[S, I, O], tuple[bool, S]]
    partition: Callable[[Sequence[Operation]], list[list[Operation]]] | None = None
    partition_events: Callable[[Sequence[Event]], list[list[Event]]] | None = None
    key: Callable[[S], Hashable] | None = None
    equal: Callable[[S, S], bool] | None = None
    hash: Callable[[S], int] | None = None
    read_only: Callable[[I, O], bool] | None = None
    read_value: Callable[[I, O], Any] | None = None
    describe_operation: Callable[[I, O], str] = field(default=_describe_operation)
    describe_state: Callable[[S], str] = field(default=repr)

    def __post_init__(self) -> None:
        if (self.equal is None) != (self.hash is None):
            raise ValueError("Model: give both equal and hash, or neither")
        if self.key is not None and self.equal is not None:
            raise ValueError("Model: give either key or equal/hash, not both")


def nondeterministic(
    *,
    init: Callable[[], Iterable[S]],
    step: Callable[[S, I, O], Iterable[S]],
    partition: Callable[[Sequence[Operation]], list[list[Operation]]] | None = None,
    partition_events: Callable[[Sequence[Event]], list[list[Event]]] | None = None,
    describe_operation: Callable[[I, O], str] = _describe_operation,
    describe_state: Callable[[S], str] = repr,
) -> Model[frozenset[S], I, O]:
    """A model whose step may lead to several states (an empty result means illegal).

    It is turned into a deterministic `Model` over *sets* of states (the power-set
    construction): a step is legal when at least one state allows it, and the new
    state is the set of all successors. States must be hashable.
    """

    def set_step(states: frozenset[S], input: I, output: O) -> tuple[bool, frozenset[S]]:
        nxt: set[S] = set()
        for s in states:
            nxt.update(step(s, input, output))
        return (True, frozenset(nxt)) if nxt else (False, states)

    def set_describe(states: frozenset[S]) -> str:
        parts = sorted(describe_state(s) for s in states)
        return parts[0] if len(parts) == 1 else "{" + ", ".join(parts) + "}"

    return Model(
        init=lambda: frozenset(init()),
        step=set_step,
        partition=partition,
        partition_events=partition_events,
        describe_operation=describe_operation,
        describe_state=set_describe,
    )


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What the search learnt about one partition (a sub-history).

    ``partial_linearizations`` are the distinct longest linearizable prefixes found, as
    indices into ``history``: for each operation, the longest one that contains it. For
    an OK partition it is the single complete linearization (crashed operations that
    were never needed may be missing from it).
    """

    history: tuple[Operation, ...]
    result: CheckResult
    partial_linearizations: tuple[tuple[int, ...], ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class LinearizationInfo:
    """Per-partition histories and (longest partial) linearizations, for reports."""

    partitions: tuple[PartitionInfo, ...] = ()
    note: str = ""
    elapsed_s: float = 0.0
    cache_entries: int = 0

    def partial_linearizations(self) -> list[list[list[int]]]:
        """For each partition, its longest partial linearizations (op indices)."""
        return [[list(p) for p in part.partial_linearizations] for part in self.partitions]

    def partial_linearizations_operations(self) -> list[list[list[Operation]]]:
        """Like `partial_linearizations`, with the operations themselves."""
        return [
            [[part.history[i] for i in p] for p in part.partial_linearizations]
            for part in self.partitions
        ]

    def explain(self, model: Model[Any, Any, Any], limit: int = 10) -> str:
        """A short text saying where each illegal partition got stuck.

        It replays the longest partial linearization of the partition and lists the
        operations that could have come next and why none of them fit.
        """
        lines: list[str] = []
        for n, part in enumerate(self.partitions):
            if part.result is not CheckResult.ILLEGAL:
                continue
            lines.append(f"partition {n}: not linearizable ({len(part.history)} operations)")
            best = max(part.partial_linearizations, key=len, default=())
            state = model.init()
            lines.append(f"  longest linearizable prefix: {len(best)} operations")
            shown = best[-limit:]
            if len(best) > limit:
                for i in best[: len(best) - limit]:
                    op = part.history[i]
                    state = model.step(state, op.input, _effective_output(op))[1]
                lines.append(f"  ... {len(best) - limit} earlier operations")
            for i in shown:
                op = part.history[i]
                state = model.step(state, op.input, _effective_output(op))[1]
                desc = model.describe_operation(op.input, _effective_output(op))
                lines.append(f"  client {op.client_id}: {desc}  => {model.describe_state(state)}")
            done = set(best)
            pending = [i for i in range(len(part.history)) if i not in done]
            if pending:
                horizon = min(part.history[i].return_time for i in pending)
                nxt = [i for i in pending if part.history[i].call <= horizon]
                lines.append(
                    f"  then, in state {model.describe_state(state)}, the search could not"
                    " linearize any of these next:"
                )
                for i in nxt[:limit]:
                    op = part.history[i]
                    desc = model.describe_operation(op.input, _effective_output(op))
                    lines.append(f"    client {op.client_id}: {desc}")
                if len(nxt) > limit:
                    lines.append(f"    ... and {len(nxt) - limit} more")
        return "\n".join(lines)


def _effective_output(op: Operation) -> Any:
    return UNKNOWN if op.return_time == math.inf else op.output
