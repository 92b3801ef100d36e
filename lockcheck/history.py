"""The history: ops as plain data, a live JSONL writer and a strict reader.

The format is documented in docs/history-format.md; keep the two in step.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import io
import json
import lzma
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

Process = int | str  # an int for clients, "nemesis" for faults

_KNOWN = frozenset({"index", "time", "process", "type", "f", "key", "value", "error", "worker"})
_NO_EXTRA: dict[str, Any] = {}  # shared and never mutated: most lines have no extra fields
TYPES = frozenset({"invoke", "ok", "fail", "info", "event"})
# One object per distinct short string (f, key, error, type): a parser makes a new string
# per line, and a history of millions of lines repeats a handful of them.
_STRINGS: dict[str, str] = {t: t for t in TYPES}
_STRINGS_OF_TYPES = dict(_STRINGS)
_SHARED_VALUES = 4096  # recent small values kept for sharing (docs/benchmarks-locks.md)
COMPLETIONS = frozenset({"ok", "fail", "info"})


class HistoryError(ValueError):
    """A history file that cannot be read: names the file and the line."""

    def __init__(self, path: str | os.PathLike[str], line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = str(path)
        self.line = line


@dataclass(slots=True)
class Op:
    """One line of the history. Treat it as read-only.

    Not a frozen dataclass on purpose: a frozen init costs several times more, and
    histories of millions of lines are read (docs/benchmarks-locks.md).
    """

    process: Process
    type: str
    f: str
    key: str | None = None
    value: Any = None
    time: int = 0
    index: int = -1
    error: str | None = None
    worker: int | None = None  # the OS-level worker that ran the process, if recorded
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "time": self.time,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "key": self.key,
            "value": self.value,
        }
        if self.error is not None:
            d["error"] = self.error
        if self.worker is not None:
            d["worker"] = self.worker
        d.update(self.extra)
        return d

    @property
    def fence(self) -> int | None:
        v = self.value
        if isinstance(v, dict):
            fence = v.get("fence")
            return fence if isinstance(fence, int) else None
        return None


def op_from_json(d: Any, *, where: tuple[str, int] = ("<memory>", 0)) -> Op:
    """Validate one decoded line and build an Op; raises HistoryError."""
    path, line = where
    if not isinstance(d, dict):
        raise HistoryError(path, line, "expected a JSON object")
    try:
        index, time, process, typ, f = d["index"], d["time"], d["process"], d["type"], d["f"]
    except KeyError as e:
        raise HistoryError(path, line, f"missing field {e.args[0]!r}") from None
    # `type(x) is int` is exact on purpose: it is fast, and it refuses booleans
    if type(index) is not int:
        raise HistoryError(path, line, "'index' must be an integer")
    if type(time) is not int:
        raise HistoryError(path, line, "'time' must be an integer (nanoseconds)")
    if type(process) is not int and type(process) is not str:
        raise HistoryError(path, line, "'process' must be an integer or a string")
    if typ not in TYPES:
        raise HistoryError(path, line, f"unknown type {typ!r}")
    if not isinstance(f, str):
        raise HistoryError(path, line, "'f' must be a string")
    key = d.get("key")
    if key is not None and not isinstance(key, str):
        raise HistoryError(path, line, "'key' must be a string or null")
    error = d.get("error")
    worker = d.get("worker")
    extra = _NO_EXTRA if d.keys() <= _KNOWN else {k: v for k, v in d.items() if k not in _KNOWN}
    strings = _STRINGS
    if len(strings) < 100_000:
        f = strings.setdefault(f, f)
        if key is not None:
            key = strings.setdefault(key, key)
        if type(error) is str:
            error = strings.setdefault(error, error)
    return Op(
        process=process,
        type=strings[typ],
        f=f,
        key=key,
        value=d.get("value"),
        time=time,
        index=index,
        error=error if isinstance(error, str) else None,
        worker=worker if type(worker) is int else None,
        extra=extra,
    )


@dataclass
class ReadResult:
    ops: list[Op]
    truncated_line: int | None  # line number of an incomplete last line, if any


def _stdlib_loads() -> Callable[[str], Any]:
    decode = json.JSONDecoder().raw_decode  # skips json.loads' per-call wrapper

    def loads(text: str) -> Any:
        text = text.strip()
        d, end = decode(text)
        if end != len(text):
            raise json.JSONDecodeError("extra data after the object", text, end)
        return d

    return loads


try:  # orjson parses a history line 3-4x faster than the stdlib (docs/benchmarks-locks.md)
    import orjson

    _loads: Callable[[str], Any] = orjson.loads
    JSON_READER = f"orjson {orjson.__version__}"
except ImportError:  # pragma: no cover - orjson is a dependency; this keeps a bare copy working
    _loads = _stdlib_loads()
    JSON_READER = "json (stdlib)"
_stdlib = _stdlib_loads()


def _has_float(x: Any) -> bool:
    if type(x) is float:
        return True
    if type(x) is dict:
        return any(_has_float(v) for v in x.values())
    if type(x) is list:
        return any(_has_float(v) for v in x)
    return False


def _exact(value: Any, raw: str) -> Any:
    """`value` as the stdlib reads it when orjson gave a float somewhere in it: orjson
    reads an integer beyond 64 bits as a float; the stdlib keeps it exact."""
    if _loads is _stdlib or not _has_float(value):
        return value
    return _stdlib(raw).get("value")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Reading allocates millions of objects and no cycles: the collector would walk
    the growing list again and again for nothing (reading took twice as long)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_history_lines(
    lines: Iterable[str], path: str = "<memory>", *, allow_truncated: bool = False
) -> ReadResult:
    """Parse and validate lines, the process rules included (`ProcessRules`)."""
    ops: list[Op] = []
    truncated: int | None = None
    last_index = -1
    step = ProcessRules().step
    loads = _loads
    # equal small values share one dict (a grant's {"fence": N, "lease": L} comes back on
    # its renews and release; {"ttl_ms": T} on every acquire): Op.value is read-only
    shared: dict[Any, Any] = {}
    known, types, strings, no_extra = _KNOWN, _STRINGS_OF_TYPES, _STRINGS, _NO_EXTRA
    with _gc_paused():
        for n, raw in enumerate(lines, start=1):
            try:
                d = loads(raw)
            except ValueError as e:  # orjson's and the stdlib's decode errors both are
                if not raw.strip():
                    continue
                if not raw.endswith("\n"):
                    if allow_truncated:
                        truncated = n
                        break
                    raise HistoryError(
                        path, n, "truncated last line (the run was cut off?)"
                    ) from None
                msg = getattr(e, "msg", str(e))
                raise HistoryError(path, n, f"not valid JSON ({msg})") from None
            # the common line, checked and built inline (op_from_json says what is wrong)
            if (type(d) is dict and d.keys() <= known and type(index := d.get("index")) is int
                    and type(t := d.get("time")) is int and type(f := d.get("f")) is str
                    and (typ := d.get("type")) in types
                    and (type(process := d.get("process")) is int or type(process) is str)
                    and (type(key := d.get("key")) is str or key is None)):
                error = d.get("error")
                worker = d.get("worker")
                f = strings.setdefault(f, f)
                if key is not None:
                    key = strings.setdefault(key, key)
                error = strings.setdefault(error, error) if type(error) is str else None
                op = Op(process, types[typ], f, key, d.get("value"), t, index, error,
                        worker if type(worker) is int else None, no_extra)
            else:
                op = op_from_json(d, where=(path, n))
            if op.index <= last_index:
                raise HistoryError(path, n, f"index {op.index} does not increase")
            last_index = op.index
            v = op.value
            if type(v) is dict and 0 < len(v) <= 3:
                kinds = tuple(map(type, v.values()))
                if float in kinds or dict in kinds or list in kinds:
                    op.value = v = _exact(v, raw)
                else:  # the types are in the key: 1 == 1.0 == True
                    op.value = shared.setdefault((*v.items(), *kinds), v)
                    if len(shared) > _SHARED_VALUES:
                        shared.clear()
            elif type(v) is list or type(v) is dict or type(v) is float:
                op.value = _exact(v, raw)
            broken = step(op.process, op.type, op.f)
            if broken:
                raise HistoryError(path, n, rule_message(broken, op.process, op.type, op.f))
            ops.append(op)
    return ReadResult(ops, truncated)


# Why a client op breaks Jepsen's process rules (the codes `checker/_lockscan.c` returns
# too): a completion with no open invoke of its process and `f`; an invoke while its
# process has one in flight; any op of a process after its `info`.
ORPHAN, IN_FLIGHT, AFTER_INFO = 2, 3, 4


class _Retired:
    """ProcessRules.open's mark of a process whose op ended in `info` (no f is it)."""


_RETIRED = _Retired()


def rule_message(code: int, process: Process, typ: str, f: str) -> str:
    what = f"{typ} {f} of process {process}"
    if code == IN_FLIGHT:
        return f"{what} while another op of that process is in flight (one at a time)"
    if code == AFTER_INFO:
        return f"{what} after an info of that process (its id is retired)"
    return f"{what} with no open invoke of that process before it"


class ProcessRules:
    """Jepsen's rules for client processes (its `client/validate`): a process has one
    op in flight at a time, which it completes with the same `f`, and issues nothing
    after an `info` (the op's outcome is unknown, so its id is retired). Events and the
    nemesis are exempt. Every reader of histories runs them: a history that breaks
    them is bad input, not something to guess the meaning of."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        # process -> the f of its op in flight, or _RETIRED after its info
        self.open: dict[Process, str | _Retired] = {}

    def step(self, process: Process, typ: str, f: str) -> int:
        """0, or the rule this op breaks (ORPHAN, IN_FLIGHT, AFTER_INFO); an op that
        breaks one changes nothing."""
        if typ == "event" or process == "nemesis":
            return 0
        state = self.open.get(process)
        if state is _RETIRED:
            return AFTER_INFO
        if typ == "invoke":
            if state is not None:
                return IN_FLIGHT
            self.open[process] = f
        elif state != f:
            return ORPHAN
        elif typ == "info":
            self.open[process] = _RETIRED
        else:
            del self.open[process]
        return 0


def validate_processes(ops: Iterable[Op]) -> tuple[Op, str] | None:
    """The first op that breaks the process rules and why, or None."""
    rules = ProcessRules()
    for op in ops:
        code = rules.step(op.process, op.type, op.f)
        if code:
            return op, rule_message(code, op.process, op.type, op.f)
    return None


def read_history(path: str | os.PathLike[str], *, allow_truncated: bool = False) -> list[Op]:
    """Read and validate a history.jsonl file."""
    return read_history_full(path, allow_truncated=allow_truncated).ops


def open_packed(p: Path) -> IO[bytes]:
    """A history file's bytes; a `.gz` or `.xz` one (a published run's) decompressed as
    it is read. Every reader of histories opens them through this."""
    if p.suffix == ".gz":
        return gzip.open(p, "rb")  # type: ignore[return-value]
    if p.suffix == ".xz":
        return lzma.open(p, "rb")
    return p.open("rb")


def read_history_full(path: str | os.PathLike[str], *, allow_truncated: bool = False) -> ReadResult:
    """Read a history; a `.gz` or `.xz` file (a published run's) is decompressed as it
    is read."""
    p = Path(path)
    try:
        with io.TextIOWrapper(open_packed(p), encoding="utf-8", newline="") as fh:
            return read_history_lines(fh, str(p), allow_truncated=allow_truncated)
    except UnicodeDecodeError:
        raise HistoryError(p, 0, "not UTF-8 text") from None
    except (gzip.BadGzipFile, lzma.LZMAError, EOFError) as e:
        raise HistoryError(p, 0, f"not a readable {p.suffix[1:]} file ({e})") from None


class HistoryWriter:
    """Appends ops to a JSONL file as they happen, one flushed line each.

    Thread-safe: worker reader threads and the nemesis share one writer. The writer
    assigns `index`; the op's `time` comes from whoever performed it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fh: BinaryIO = self.path.open("ab")
        self._lock = threading.Lock()
        self._next = 0
        self.counts: dict[str, int] = {}

    def append(self, op: dict[str, Any] | Op) -> dict[str, Any]:
        d = op.to_json() if isinstance(op, Op) else dict(op)
        with self._lock:
            d.pop("index", None)
            d = {"index": self._next, **d}  # the documented field order: index first
            line = json.dumps(d, separators=(", ", ": "))
            self._fh.write(line.encode() + b"\n")
            self._fh.flush()
            self._next += 1
            t = str(d.get("type"))
            self.counts[t] = self.counts.get(t, 0) + 1
        return d

    def append_block(self, block: bytes, lines: int | None = None) -> int:
        """Append ops that arrive already encoded: `block` is whole lines, each a JSON
        object without `index` (ASCII, `{"` first), each ending in a newline; `lines`, if
        the caller counted them already. Each gets the next index as its first field;
        one write and one flush for all (`counts` counts only `append`'s ops). Returns
        the first index."""
        with self._lock:
            first = self._next
            data, n = index_lines(block, first, lines)
            self._fh.write(data)
            self._fh.flush()
            self._next += n
        return first

    def __len__(self) -> int:
        return self._next

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()


def py_index_lines(block: bytes, first: int, lines: int | None = None) -> tuple[bytes, int]:
    """Each whole line of `block` with `"index": N, ` put first, N from `first`; and how
    many lines (`_crecord.index_lines` does the same in C; `lines` is not needed here)."""
    whole = block.split(b"\n")
    whole.pop()  # after the last newline
    return b"".join([b'{"index": %d, %b\n' % (i, line[1:])
                     for i, line in enumerate(whole, first)]), len(whole)


def _index_lines() -> Callable[[bytes, int, int | None], tuple[bytes, int]]:
    try:
        from lockcheck._crecord import index_lines as c_index_lines
    except ImportError:
        return py_index_lines

    def compiled(block: bytes, first: int, lines: int | None = None) -> tuple[bytes, int]:
        return c_index_lines(block, first), block.count(b"\n") if lines is None else lines
    return compiled


index_lines = _index_lines()


@dataclass(frozen=True, slots=True)
class Pair:
    """An invoke and its completion; `complete` is None when the history ended first."""

    invoke: Op
    complete: Op | None

    @property
    def type(self) -> str:
        return self.complete.type if self.complete is not None else "info"


def pair_ops(ops: Iterable[Op]) -> Iterator[Pair]:
    """Match each invoke with the next completion of the same process and f.

    Yields pairs in invoke order, nemesis ops included (their completions are
    `info`). Events have no completion and are not yielded; nor are completions
    without an invoke.
    """
    open_: dict[tuple[Process, str], Op] = {}
    pending: list[tuple[Op, list[Op | None]]] = []
    slots: dict[tuple[Process, str], list[Op | None]] = {}
    for op in ops:
        k = (op.process, op.f)
        if op.type == "invoke":
            slot: list[Op | None] = [None]
            open_[k] = op
            slots[k] = slot
            pending.append((op, slot))
        elif op.type in COMPLETIONS and k in open_:
            slots.pop(k)[0] = op
            del open_[k]
    for inv, slot in pending:
        yield Pair(inv, slot[0])


def sort_by_time(ops: Iterable[Op]) -> list[Op]:
    return sorted(ops, key=lambda o: (o.time, o.index))
