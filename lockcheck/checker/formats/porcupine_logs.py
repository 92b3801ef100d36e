"""Parsers for Porcupine's test logs, into events for the porcupine engine.

* Jepsen etcd logs (``jepsen/etcd_NNN.log``): one compare-and-set register, for
  `lockcheck.checker.porcupine.models.cas_register`. Lines look like
  ``INFO  jepsen.util - 3\t:invoke\t:cas\t[1 2]``.
* kv logs (``kv/cNN-{ok,bad}.txt``): one EDN map per line, for
  `lockcheck.checker.porcupine.models.kv`.

Both are in real-time order without timestamps, hence events (index = time). An
operation is an invoke plus the next completion of the same process.

Semantics, as in Porcupine's own tests: ``:fail :cas`` is kept as an observation (the
register did not hold the expected value); ``:fail :read :timed-out`` is a return with
an `UNKNOWN` result; ``:info`` lines leave the operation open, i.e. crashed. A log that
breaks Jepsen's process rules (`lockcheck.history.ProcessRules`) is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lockcheck.checker.porcupine import UNKNOWN, Event
from lockcheck.history import ProcessRules, rule_message

_ETCD_LINE = re.compile(
    r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(invoke|ok|fail|info)\s+:(read|write|cas)\s+(.*?)\s*$"
)
_CAS_VALUE = re.compile(r"^\[\s*(-?\d+)\s+(-?\d+)\s*\]")
_KV_LINE = re.compile(
    r"^\{:process (\d+), :type :(invoke|ok|fail|info), :f :(get|put|append), "
    r':key "([^"]*)", :value (nil|"[^"]*")\}\s*$'
)


def _etcd_value(f: str, raw: str, where: str) -> Any:
    if f == "read":
        if raw.startswith("nil"):
            return None
        if raw.startswith(":timed-out"):
            return UNKNOWN
        return int(raw.split()[0])
    if f == "write":
        return int(raw.split()[0])
    m = _CAS_VALUE.match(raw)
    if m is None:
        raise ValueError(f"{where}: bad cas value {raw!r}")
    return (int(m.group(1)), int(m.group(2)))


def parse_etcd_log(path: str | os.PathLike[str]) -> list[Event]:
    """Parse a Jepsen etcd log file into `cas_register` events."""
    return parse_etcd_lines(Path(path).read_text().splitlines(), name=str(path))


def parse_etcd_lines(lines: Iterable[str], name: str = "<lines>") -> list[Event]:
    """Parse the lines of a Jepsen etcd log; ``name`` is used in error messages."""
    events: list[Event] = []
    open_ids: dict[int, int] = {}
    rules = ProcessRules()
    next_id = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        m = _ETCD_LINE.match(line)
        if m is None:
            raise ValueError(f"{name}:{lineno}: not a jepsen.util op line: {line!r}")
        proc, typ, f, raw = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        where = f"{name}:{lineno}"
        broken = rules.step(proc, typ, f)
        if broken:
            raise ValueError(f"{where}: {rule_message(broken, proc, typ, f)}")
        if typ == "invoke":
            value = None if f == "read" else _etcd_value(f, raw, where)
            open_ids[proc] = next_id
            events.append(Event(proc, "call", (f, value), next_id))
            next_id += 1
            continue
        if typ == "info":
            continue  # crashed: the op stays open, and the process issues nothing more
        op_id = open_ids.pop(proc)
        output: Any
        if f == "read":
            output = UNKNOWN if typ == "fail" else _etcd_value(f, raw, where)
        elif f == "write":
            if typ == "fail":
                raise ValueError(f"{where}: a failed write has no meaning in this model")
            output = None
        else:
            output = typ == "ok"
        events.append(Event(proc, "return", output, op_id))
    return events


def parse_kv_log(path: str | os.PathLike[str]) -> list[Event]:
    """Parse a Porcupine kv log file into `kv` events."""
    return parse_kv_lines(Path(path).read_text().splitlines(), name=str(path))


def parse_kv_lines(lines: Iterable[str], name: str = "<lines>") -> list[Event]:
    """Parse the lines of a Porcupine kv log; ``name`` is used in error messages."""
    events: list[Event] = []
    open_ops: dict[int, tuple[int, str, str]] = {}
    next_id = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        m = _KV_LINE.match(line)
        if m is None:
            raise ValueError(f"{name}:{lineno}: not a kv op line: {line!r}")
        proc, typ, f, key, raw = (
            int(m.group(1)),
            m.group(2),
            m.group(3),
            m.group(4),
            m.group(5),
        )
        value = None if raw == "nil" else raw[1:-1]
        if typ == "invoke":
            if proc in open_ops:
                raise ValueError(f"{name}:{lineno}: process {proc} invokes while an op is open")
            open_ops[proc] = (next_id, f, key)
            events.append(Event(proc, "call", (f, key, value), next_id))
            next_id += 1
            continue
        if typ in ("info", "fail"):
            raise ValueError(f"{name}:{lineno}: :{typ} is not used by these logs")
        if proc not in open_ops:
            raise ValueError(f"{name}:{lineno}: completion for process {proc} with no op")
        op_id, call_f, call_key = open_ops.pop(proc)
        if (call_f, call_key) != (f, key):
            raise ValueError(f"{name}:{lineno}: completion does not match its invoke")
        events.append(Event(proc, "return", value if f == "get" else None, op_id))
    return events
