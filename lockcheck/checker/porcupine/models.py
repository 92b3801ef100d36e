"""Generic models: a register, a compare-and-set register, registers read and written by
transactions (Knossos's multi-register), and a key-value store.

Inputs are Jepsen-like ``(f, value)`` tuples (``(f, key, value)`` for the kv store).
Every model accepts `UNKNOWN` as an output that matches anything and still applies the
operation's effect, as crashed operations require.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from .model import UNKNOWN, Event, Model, Operation

# --- register: ("read", None) -> value | ("write", v) -> anything --------------------


def register(initial: Any = None) -> Model[Any, tuple[str, Any], Any]:
    """A read/write register starting at ``initial``.

    Inputs ``("read", None)`` (output: the value read) and ``("write", v)`` (output
    ignored).
    """

    def step(state: Any, input: tuple[str, Any], output: Any) -> tuple[bool, Any]:
        f, value = input
        if f == "read":
            return (output is UNKNOWN or output == state), state
        if f == "write":
            return True, value
        raise ValueError(f"register: unknown operation {f!r}")

    return Model(
        init=lambda: initial,
        step=step,
        read_only=lambda input, output: input[0] == "read",
        read_value=_register_read_value,
        describe_operation=_describe_register_op,
        describe_state=repr,
    )


def cas_register(initial: Any = None) -> Model[Any, tuple[str, Any], Any]:
    """A register with compare-and-set, as in Jepsen's etcd tests.

    Inputs ``("read", None)``, ``("write", v)`` and ``("cas", (old, new))``. A read's
    output is the value; a cas's output is True (it swapped: the register held
    ``old``) or False (it definitely failed: the register did not hold ``old``).
    """

    def step(state: Any, input: tuple[str, Any], output: Any) -> tuple[bool, Any]:
        f, value = input
        if f == "read":
            return (output is UNKNOWN or output == state), state
        if f == "write":
            return True, value
        if f == "cas":
            old, new = value
            if output is UNKNOWN:
                return True, (new if state == old else state)
            if output:
                return state == old, new
            return state != old, state
        raise ValueError(f"cas_register: unknown operation {f!r}")

    return Model(
        init=lambda: initial,
        step=step,
        read_only=_cas_read_only,
        read_value=_register_read_value,
        describe_operation=_describe_register_op,
        describe_state=repr,
    )


def _register_read_value(input: tuple[str, Any], output: Any) -> Any:
    # a read with a known output is legal exactly when the register holds it
    return output if input[0] == "read" else UNKNOWN


def _cas_read_only(input: tuple[str, Any], output: Any) -> bool:
    # reads, and compare-and-sets known to have failed, never change the state
    return input[0] == "read" or (input[0] == "cas" and output is not UNKNOWN and not output)


def _describe_register_op(input: tuple[str, Any], output: Any) -> str:
    f, value = input
    out = "?" if output is UNKNOWN else repr(output)
    if f == "read":
        return f"read() -> {out}"
    if f == "write":
        return f"write({value!r})" + (" -> ?" if output is UNKNOWN else "")
    if f == "cas":
        old, new = value
        res = "?" if output is UNKNOWN else ("ok" if output else "fail")
        return f"cas({old!r}, {new!r}) -> {res}"
    return f"{f}({value!r}) -> {out}"


# --- multi-register: transactions of reads and writes over named registers ----------

Registers = tuple[tuple[Any, Any], ...]  # (name, value) pairs, sorted by name
MicroOp = tuple[str, Any, Any]  # ("read", name, value) or ("write", name, value)


def _registers(values: dict[Any, Any]) -> Registers:
    return tuple(sorted(values.items(), key=lambda kv: repr(kv[0])))


def multi_register(initial: dict[Any, Any] | None = None) -> Model[Registers, Any, Any]:
    """Registers by name (missing ones hold None), read and written by transactions that
    take effect atomically, as Knossos's ``multi-register``.

    An input is a tuple of micro-ops ``("read", name, None)`` / ``("write", name, v)``;
    the output of an ok transaction is the same tuple with the values read filled in. A
    read value of `UNKNOWN` matches anything (a lost answer); so does a crashed
    transaction's output, whose writes still apply.
    """
    start = _registers(initial or {})

    def step(state: Registers, input: tuple[MicroOp, ...], output: Any) -> tuple[bool, Any]:
        regs = dict(state)
        changed = False
        results = input if output is UNKNOWN else output
        for (f, name, value), (_, _, got) in zip(input, results, strict=True):
            if f == "read":
                if output is not UNKNOWN and got is not UNKNOWN and regs.get(name) != got:
                    return False, state
            elif f == "write":
                regs[name] = value
                changed = True
            else:
                raise ValueError(f"multi-register: unknown micro-op {f!r}")
        return True, (_registers(regs) if changed else state)

    def read_only(input: tuple[MicroOp, ...], output: Any) -> bool:
        return all(f == "read" for f, _, _ in input)

    def describe(input: tuple[MicroOp, ...], output: Any) -> str:
        results = input if output is UNKNOWN else output
        parts = []
        for (f, name, value), (_, _, got) in zip(input, results, strict=True):
            if f == "read":
                parts.append(f"r({name})={'?' if output is UNKNOWN or got is UNKNOWN else got!r}")
            else:
                parts.append(f"w({name}, {value!r})")
        return "txn[" + " ".join(parts) + "]"

    return Model(
        init=lambda: start,
        step=step,
        read_only=read_only,
        describe_operation=describe,
        describe_state=lambda s: "{" + ", ".join(f"{k}: {v!r}" for k, v in s) + "}",
    )


# --- kv: ("get", k, None) -> v | ("put", k, v) | ("append", k, v) --------------------


def _kv_partition(ops: Sequence[Operation]) -> list[list[Operation]]:
    by_key: dict[Any, list[Operation]] = defaultdict(list)
    for op in ops:
        by_key[op.input[1]].append(op)
    return list(by_key.values())


def _kv_partition_events(events: Sequence[Event]) -> list[list[Event]]:
    key_of: dict[int, Any] = {}
    by_key: dict[Any, list[Event]] = defaultdict(list)
    for ev in events:
        if ev.kind == "call":
            key_of[ev.id] = ev.value[1]
        by_key[key_of[ev.id]].append(ev)
    return list(by_key.values())


def _kv_value_step(state: str, input: tuple[str, Any, Any], output: Any) -> tuple[bool, str]:
    f, _, value = input
    if f == "get":
        return (output is UNKNOWN or output == state), state
    if f == "put":
        return True, value
    if f == "append":
        return True, state + value
    raise ValueError(f"kv: unknown operation {f!r}")


def _kv_map_step(
    state: tuple[tuple[Any, str], ...], input: tuple[str, Any, Any], output: Any
) -> tuple[bool, tuple[tuple[Any, str], ...]]:
    key = input[1]
    current = dict(state)
    ok, value = _kv_value_step(current.get(key, ""), input, output)
    if not ok or value == current.get(key, ""):
        return ok, state
    current[key] = value
    return True, tuple(sorted(current.items()))


def _kv_read_only(input: tuple[str, Any, Any], output: Any) -> bool:
    return input[0] == "get"


def _kv_read_value(input: tuple[str, Any, Any], output: Any) -> Any:
    return output  # per key, the state is the value; UNKNOWN stays UNKNOWN


def _describe_kv_op(input: tuple[str, Any, Any], output: Any) -> str:
    f, key, value = input
    if f == "get":
        return f"get({key!r}) -> {'?' if output is UNKNOWN else repr(output)}"
    return f"{f}({key!r}, {value!r})"


def kv(*, partitioned: bool = True) -> Model[Any, tuple[str, Any, Any], Any]:
    """A key-value store of strings (missing keys read as ``""``).

    Inputs ``("get", key, None)`` (output: the value), ``("put", key, v)`` and
    ``("append", key, v)`` (outputs ignored). By default the history is partitioned per
    key and a state is one string; ``partitioned=False`` checks the whole history with a
    map state (a sorted tuple of items), which is exponentially slower: for tests.
    """
    if partitioned:
        return Model(
            init=lambda: "",
            step=_kv_value_step,
            partition=_kv_partition,
            partition_events=_kv_partition_events,
            read_only=_kv_read_only,
            read_value=_kv_read_value,
            describe_operation=_describe_kv_op,
            describe_state=repr,
        )
    return Model(
        init=tuple,
        step=_kv_map_step,
        read_only=_kv_read_only,
        describe_operation=_describe_kv_op,
        describe_state=lambda s: "{" + ", ".join(f"{k!r}: {v!r}" for k, v in s) + "}",
    )
