"""Reading a history.jsonl straight into lock-operation columns, for the lock check.

`lockcheck.history.read_history` builds an `Op` per line: two million objects (and
several hundred MB) for a million-op history, most of which the lock check never looks
at. `read_lock_columns` reads the file with the compiled scanner (`_lockscan.c`) into
int64 columns, one entry per lock operation, exactly as `linearizable.lock_operations`
would adapt the `Op`s, with the reader's own checks and errors. Lines of a shape the
scanner does not read (escaped or non-ASCII strings, extra fields, nested values...)
are read here with the ordinary decoder, one at a time, and handed to it.

It returns None where this path does not apply (the scanner was not built, or a
number does not fit its columns); the caller then reads the history the ordinary way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from lockcheck.checker.porcupine import UNKNOWN, Operation
from lockcheck.checker.porcupine.lock_models import LockInput, LockOutput
from lockcheck.checker.porcupine.model import make_operation
from lockcheck.history import (
    HistoryError,
    _exact,
    _loads,
    op_from_json,
    open_packed,
    rule_message,
)

try:  # built by `pip install` where a C compiler is there
    from lockcheck.checker import _lockscan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a copy without the extension
    _lockscan = None

COMPILED = _lockscan is not None and not os.environ.get("LOCKCHECK_PURE_READER")
CHUNK = 1 << 22  # bytes read at a time

# the scanner's string ids of the lock operations (the order of WELL_KNOWN in the C)
_ACQUIRE, _RELEASE, _RENEW = 5, 6, 7
F_NAMES = {_ACQUIRE: "acquire", _RELEASE: "release", _RENEW: "renew"}
CRASHED, HAS_FENCE, HAS_NAMED = 1, 2, 4


class _Unsupported(Exception):
    """A value this path cannot hold (an integer beyond 60 bits): read the usual way."""


@dataclass
class LockColumns:
    """The lock operations of a history, in `lock_operations`' order, as columns."""

    key: Any  # numpy int64 arrays, one entry per lock op: the key's string id
    f: Any  # _ACQUIRE, _RELEASE or _RENEW
    flags: Any  # CRASHED | HAS_FENCE | HAS_NAMED
    proc: Any  # the op's process, tagged (see `value_of`)
    owner: Any  # whose lease it is about, tagged
    call: Any
    ret: Any  # meaningless where CRASHED
    fence: Any  # an ok acquire's fence (where HAS_FENCE)
    named: Any  # the fence a renew or release names (where HAS_NAMED)
    strings: list[str]
    truncated_line: int | None
    n_ops: int  # lines read as ops (all of them, not only the lock ops)
    kinds: dict[str, int]  # lines of client processes (not events) per `f`

    def __len__(self) -> int:
        return len(self.key)

    def value_of(self, tag: int) -> Any:
        """A process or owner back from its tag: 4v an int, 4s+1 a string, and the
        owners no grant names: 4s+2 / 4v+3 a lease token string / int."""
        v, kind = tag >> 2, tag & 3
        if kind == 0:
            return v
        if kind == 1:
            return self.strings[v]
        return f"lease {self.strings[v] if kind == 2 else v}"

    def keys(self) -> dict[str, Any]:
        """Each key's name -> the indices of its ops, in order."""
        ids = self.key
        out: dict[str, Any] = {}
        for k in np.unique(ids).tolist():
            out[self.strings[k]] = np.flatnonzero(ids == k)
        return out

    def operations(self, idx: Any) -> list[Operation]:
        """The engine operations at these indices (as `lock_operations` makes them; a
        string process's timeline row counts from the first index given)."""
        ids: dict[Any, int] = {}
        return [self._operation(i, ids) for i in idx.tolist()]

    def operation_at(self) -> Callable[[int], Operation]:
        ids: dict[Any, int] = {}
        return lambda i: self._operation(i, ids)

    def _operation(self, i: int, ids: dict[Any, int]) -> Operation:
        proc = self.value_of(int(self.proc[i]))
        flags = int(self.flags[i])
        f = F_NAMES[int(self.f[i])]
        named = int(self.named[i]) if flags & HAS_NAMED else None
        key = self.strings[int(self.key[i])]
        inp = LockInput(f, self.value_of(int(self.owner[i])), key, named)  # type: ignore[arg-type]
        client = proc if type(proc) is int else ids.setdefault(proc, 1_000_000 + len(ids))
        if flags & CRASHED:
            return make_operation(client, inp, int(self.call[i]), UNKNOWN, math.inf)
        fence = int(self.fence[i]) if flags & HAS_FENCE else None
        return make_operation(client, inp, int(self.call[i]), LockOutput(fence),
                              int(self.ret[i]))


def _chunks(fh: IO[bytes]) -> Iterator[bytes]:
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            return
        yield chunk


def _fence_of(v: Any) -> int | None:
    if type(v) is dict:
        fence = v.get("fence")
        if type(fence) is int:
            return fence
    return None


def _lease_of(v: Any) -> Any:
    if type(v) is dict:
        lease = v.get("lease")
        if type(lease) is str or type(lease) is int:
            return lease
    return None


def read_lock_columns(
    source: str | os.PathLike[str] | IO[bytes], *, allow_truncated: bool = False,
    name: str | None = None,
) -> LockColumns | None:
    """Read a history (a path, or an open binary stream) into lock columns; None where
    this path does not apply. Raises `HistoryError` as `read_history` does."""
    if not COMPILED:
        return None
    if isinstance(source, (str, os.PathLike)):
        path = name or str(source)
        with open_packed(Path(source)) as fh:
            return _read(fh, path, allow_truncated)
    return _read(source, name or str(getattr(source, "name", "<stream>")), allow_truncated)


def _read(fh: IO[bytes], path: str, allow_truncated: bool) -> LockColumns | None:
    sc = _lockscan.Scanner()
    rest = b""
    truncated: int | None = None
    try:
        for chunk in _chunks(fh):
            data = rest + chunk if rest else chunk
            pos = 0
            while True:
                pos = sc.scan(data, pos)
                nl = data.find(b"\n", pos)
                if nl < 0:
                    break
                _slow_line(sc, data[pos:nl + 1], path, allow_truncated)
                pos = nl + 1
            rest = data[pos:]
        if rest:  # a last line without its newline
            truncated = _slow_line(sc, rest, path, allow_truncated)
    except _Unsupported:
        return None
    n_ops, kinds = sc.counts()
    cols = {k: np.frombuffer(v, dtype=np.int64) for k, v in sc.finish().items()}
    kff = cols["kff"]
    return LockColumns(
        key=kff >> 8, f=(kff >> 4) & 15, flags=kff & 15, proc=cols["proc"],
        owner=cols["owner"], call=cols["call"], ret=cols["ret"], fence=cols["fence"],
        named=cols["named"], strings=sc.strings, truncated_line=truncated, n_ops=n_ops,
        kinds=kinds,
    )


def _slow_line(sc: Any, raw: bytes, path: str, allow_truncated: bool) -> int | None:
    """One line the scanner left: read as `read_history_lines` reads it. Returns the
    line's number if it is a truncated last line that is allowed."""
    n = sc.lines + 1
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HistoryError(path, 0, "not UTF-8 text") from None
    try:
        d = _loads(text)
    except ValueError as e:
        if not text.strip():
            sc.lines = n
            return None
        if not text.endswith("\n"):
            if allow_truncated:
                return n
            raise HistoryError(path, n, "truncated last line (the run was cut off?)") from None
        msg = getattr(e, "msg", str(e))
        raise HistoryError(path, n, f"not valid JSON ({msg})") from None
    op = op_from_json(d, where=(path, n))
    v = op.value
    if type(v) is list or type(v) is dict or type(v) is float:
        v = _exact(v, text)
    try:
        code = sc.feed(op.index, op.time, op.process, op.type, op.f, op.key, _fence_of(v),
                       _lease_of(v))
    except OverflowError:
        raise _Unsupported from None
    if code == 1:
        raise HistoryError(path, n, f"index {op.index} does not increase")
    if code:  # a process rule (history.ProcessRules), by the same code
        raise HistoryError(path, n, rule_message(code, op.process, op.type, op.f))
    return None
