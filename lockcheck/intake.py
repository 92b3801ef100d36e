"""Worker ops into the history: one thread reads every worker's pipe as ops arrive.

A worker prints each op as one JSON line in a fixed layout (`workloads/worker.py:
Recorder`: `{"time": ..., "process": ..., "type": "...", "f": "...", ...}`, ASCII). The
intake copies what a pipe brings as bytes, a block of complete lines at a time, and
does no work per line that C does not do for it. In the run's intake one pass in C
(`_crecord.scan`) tests that every line of a block is in the layout, counts the lines
by type and reads the critical-section events into rows (`EventRow`) without the JSON
decoder; where it was not built, or a block has a line out of the usual shape, three
counts and an ASCII test over the block do the layout test, `bytes.count` the types
and the decoder the events. The writer then gives each line its `index`
(`HistoryWriter.append_block`), one write and one flush per wake-up. A wake-up first
waits for the other workers' lines: 50 ms (`QUIET_GATHER_S`) while no fault has asked
who holds a lock, 5 ms (`GATHER_S`) once one has (`hurry`), not at all when a fault
acts on ops the moment they arrive (`NemesisKind.prompt`: client-pause). So the history
is still written as the run goes and is readable after a crash up to the last complete
line, at a small part of the cost of decoding each line (docs/benchmarks.md, "Harness
overhead"). When a worker's pipe ends, the lines its spool file still holds after the
last one the pipe brought (it died before sending them) are taken as its last block.

Observers (the progress counts, who holds a lock now) get the events as rows, and see
whole the other ops whose line contains one of the `wants` markers (resource writes: a
substring test, which may let an extra line through but never misses one), and any
event line out of the usual shape; of the others `count` gets how many of each type
came, a wake-up at a time. A line not in the layout, or an event whose value is not
JSON, is dropped and counted, never written: a block with one takes the slow path,
line by line.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from lockcheck.history import HistoryWriter

Observer = Callable[[dict[str, Any]], None]
CHUNK = 1 << 16
# how long a wake-up waits for more workers' lines: ten workers' writes then cost at most
# 200 wake-ups a second instead of thousands (each one a chance for the scheduler to
# preempt a worker inside its critical section, which costs the others a backoff, and
# about 75 us of the controller's CPU); a fault aimed at a holder sees it that much later
GATHER_S = 0.005
# while nobody watches who holds a lock (no fault has asked: `hurry` not called), a
# wake-up gathers this long: the history and the progress counts are that much later,
# and ten workers' lines cost 20 wake-ups a second (docs/benchmarks.md, "Harness
# overhead": the controller's wake-ups cost the workers more than its work)
QUIET_GATHER_S = 0.05
_HEAD, _NEXT, _TAIL = b'{"time": ', b'\n{"time": ', b"}\n"
# the types counted by search; "invoke", the most common, is what the others leave
COUNTED = ("ok", "fail", "info", "event")
# a line's type as the layout writes it, between process and f: a value would have to
# hold this very text, unescaped, to be miscounted (only the progress counts use it)
_TYPE_MARKS = tuple((t, b'"type": "' + t.encode() + b'", "f": "') for t in COUNTED)
_decode = json.JSONDecoder().raw_decode
# a critical-section event, as the layout writes its type
EVENT_MARK = b'"type": "event", "f": "'
# an event line read without the JSON decoder: (where its line starts in the block,
# time, process, f, key, worker, value as JSON text)
EventRow = tuple[int, int, int, str, "str | None", int, str]


def in_layout(line: bytes) -> bool:
    """One complete line as the Recorder writes it (whole JSON objects only, so a line
    cut off by a dying worker never reaches the history)."""
    return (line.startswith(_HEAD) and line.endswith(_TAIL) and line.count(b"\n") == 1
            and line.isascii())


def lines_in_layout(block: bytes) -> int:
    """How many lines a block of complete lines has if every one is `in_layout`, else
    -1; tested without a loop: each line starts with the head (the first, and every one
    after a newline) and each newline ends a line that ends with the tail."""
    n = block.count(b"\n")
    ok = (block.startswith(_HEAD) and block.count(_NEXT) == n - 1
          and block.count(_TAIL) == n and block.isascii())
    return n if ok else -1


class Source:
    """One worker's pipe: the partial line it ended a read with, and whether it ended.

    `keep`: the file the worker's spool keeps its unsent lines in (`_crecord.Spool`,
    `keep`); when the pipe ends, the lines there after the last one the pipe brought
    are the worker's too (it died before sending them), and `unsent` gives them."""

    def __init__(self, name: str, stream: IO[bytes], keep: str | None = None) -> None:
        self.name, self.stream, self.keep = name, stream, keep
        self.fd = stream.fileno()
        self.rest = b""
        self.last = b""  # the last whole line in the layout the pipe brought
        self.bad_lines = 0
        self.unsent_lines = 0  # lines taken from `keep`, not the pipe
        self.ended = threading.Event()
        self.heard = threading.Event()  # it has written something: the worker is up

    def block(self, chunk: bytes) -> bytes:
        """The complete lines this read ends, with the start the last read left."""
        data = self.rest + chunk if self.rest else chunk
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        if cut and self.keep is not None:
            start = data.rfind(b"\n", 0, cut - 1) + 1
            if not data.startswith(_HEAD, start):  # a library's print: the op line before
                start = data.rfind(_NEXT, 0, start) + 1
            if data.startswith(_HEAD, start):
                self.last = data[start:data.index(b"\n", start) + 1]
        return data[:cut]

    def unsent(self) -> bytes:
        """Once the pipe ended: the whole lines `keep` holds that the pipe did not bring
        (none when the worker sent everything), the start of a line the pipe cut off
        included in full. The file is removed."""
        if self.keep is None:
            return b""
        try:
            with open(self.keep, "rb") as f:
                data = f.read()
        except OSError:
            return b""
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.keep)
        # the spool's header: how many bytes of whole lines follow (_crecord.c)
        n = int.from_bytes(data[:8], sys.byteorder, signed=True) if len(data) >= 8 else 0
        kept = data[8:8 + max(0, n)]
        # lines are unique (each has its process and its nanosecond): what the file
        # holds after the last line the pipe brought went no further
        at = kept.rfind(self.last) if self.last else -1
        tail = kept[at + len(self.last):] if at >= 0 else kept
        if self.rest and tail.startswith(self.rest):
            self.rest = b""  # the pipe cut that line off; here it is whole
        self.unsent_lines = tail.count(b"\n")
        return tail

    def wait_ended(self, timeout: float) -> bool:
        return self.ended.wait(timeout)


@dataclass
class Batch:
    """What one wake-up brought: blocks of lines to write, the ops read whole (with the
    number of their line in the batch), and how many of each type came of the rest."""

    blocks: list[bytes] = field(default_factory=list)
    lines: int = 0
    whole: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    light: dict[str, int] = field(default_factory=dict)
    events: list[EventRow] = field(default_factory=list)


def only_in_layout(src: Source, block: bytes) -> bytes:
    """The slow path, for a block with a line out of the layout: drop and count those."""
    lines = block.split(b"\n")
    lines.pop()  # the block ends with a newline
    keep = [line + b"\n" for line in lines if in_layout(line + b"\n")]
    src.bad_lines += len(lines) - len(keep)
    return b"".join(keep)


def wanted_lines(block: bytes, markers: Sequence[bytes]) -> list[tuple[int, int]]:
    """Where the lines that hold any of `markers` start and end, in order."""
    found: set[tuple[int, int]] = set()
    for m in markers:
        i = block.find(m)
        while i >= 0:
            start = block.rfind(b"\n", 0, i) + 1
            end = block.find(b"\n", i) + 1
            found.add((start, end))
            i = block.find(m, end)
    return sorted(found)


def py_event_rows(block: bytes) -> tuple[list[EventRow], list[tuple[int, int]]]:
    """`_crecord.event_rows` in Python: the event lines of a block of lines in the
    layout as rows; where the others that hold the event mark start and end."""
    spans = wanted_lines(block, (EVENT_MARK,))
    whole, odd = read_whole(block, spans)
    ends = dict(spans)
    rows: list[EventRow] = []
    for start, op in whole:
        if (op.get("type") == "event" and type(op.get("f")) is str
                and all(type(op.get(k)) is int for k in ("time", "process", "worker"))
                and type(op.get("key")) in (str, type(None)) and "value" in op):
            rows.append((start, op["time"], op["process"], op["f"], op["key"],
                         op["worker"], json.dumps(op["value"])))
        else:
            odd.append((start, ends[start]))
    return rows, sorted(odd)


# (lines, (other, ok, fail, info, event) counts by type, event rows, odd event lines)
Scanned = tuple[int, tuple[int, int, int, int, int], list[EventRow], list[tuple[int, int]]]


def _compiled() -> tuple[Callable[[bytes], tuple[list[EventRow], list[tuple[int, int]]]],
                         Callable[[bytes], Scanned | None] | None]:
    try:
        from lockcheck._crecord import event_rows, scan
    except ImportError:
        return py_event_rows, None
    return event_rows, scan


# `_crecord.event_rows` or `py_event_rows`; `_crecord.scan` (a block's lines, their
# types and events in one pass), or None where it was not built
event_rows, scan = _compiled()
SCAN_TYPES = ("invoke", *COUNTED)  # scan's "other" is counted as invoke


def read_whole(block: bytes, wanted: list[tuple[int, int]]
               ) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, int]]]:
    """The `wanted` lines (start, end), decoded, with where each starts; and where
    those that are not one JSON object start and end."""
    whole: list[tuple[int, dict[str, Any]]] = []
    bad: list[tuple[int, int]] = []
    text = block.decode("ascii") if wanted else ""  # ASCII: the same offsets
    for start, end in wanted:
        try:
            op, stop = _decode(text, start)
            if stop != end - 1 or not isinstance(op, dict):
                raise ValueError("not one object")
            whole.append((start, op))
        except ValueError:
            bad.append((start, end))
    return whole, bad


def without(block: bytes, spans: list[tuple[int, int]]) -> bytes:
    """`block` less the (start, end) spans, which are in order."""
    kept, last = [], 0
    for start, end in spans:
        kept.append(block[last:start])
        last = end
    kept.append(block[last:])
    return b"".join(kept)


def type_counts(block: bytes, n: int) -> tuple[int, ...]:
    """`scan`'s counts by type, in `SCAN_TYPES` order, by substring search over a block
    of `n` lines in the layout (the rest is counted as invoke)."""
    counted = [block.count(mark) for _, mark in _TYPE_MARKS]
    return (n - sum(counted), *counted)


def light(by_type: Sequence[int], whole: list[dict[str, Any]], rows: int,
          out: dict[str, int]) -> None:
    """Add to `out` the counts by type (in `SCAN_TYPES` order) of the lines not read
    whole nor as event rows."""
    seen: dict[Any, int] = {"event": rows}
    for op in whole:
        t = op.get("type")
        seen[t] = seen.get(t, 0) + 1
    for t, k in zip(SCAN_TYPES, by_type, strict=True):
        k -= seen.get(t, 0)
        if k > 0:
            out[t] = out.get(t, 0) + k


class Intake(threading.Thread):
    """`observers` see whole each op whose line holds one of `wants`; `events`, when
    given, gets the critical-section events as rows (`EventRow`, read without the JSON
    decoder), a wake-up's worth at a time, and those lines are not given to the
    observers unless they are out of the usual shape; `count` gets how many of each
    type came of the rest. A wake-up gathers `gather_s`, or `hurried_s` once `hurry`
    was called."""

    def __init__(self, writer: HistoryWriter, observers: Sequence[Observer],
                 wants: Sequence[bytes],
                 count: Callable[[dict[str, int]], None] | None = None,
                 gather_s: float = GATHER_S,
                 events: Callable[[list[EventRow]], None] | None = None,
                 hurried_s: float | None = None) -> None:
        super().__init__(name="intake", daemon=True)
        self.writer, self.observers, self.wants = writer, list(observers), tuple(wants)
        self.count, self.gather_s, self.events = count, gather_s, events
        self.hurried_s = gather_s if hurried_s is None else min(gather_s, hurried_s)
        self._hurried = threading.Event()
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._new: list[Source] = []
        self._closing = self._done = False
        self.sources: list[Source] = []

    def add(self, name: str, stream: IO[bytes], keep: str | None = None) -> Source:
        """Start copying a worker's stdout (the thread must have been started); `keep`:
        the file its spool keeps unsent lines in (`Source`)."""
        src = Source(name, stream, keep)
        with self._lock:
            if self._done:
                raise RuntimeError("the intake is closed")
            self._new.append(src)
            self.sources.append(src)
        self._wake()
        return src

    def hurry(self) -> None:
        """From now on gather `hurried_s` (a fault has started to watch the holders),
        ending the gather under way. Any thread."""
        self.gather_s = self.hurried_s
        self._hurried.set()

    def _wake(self) -> None:
        with self._lock:
            if not self._done:  # after the end the fd number may belong to a new file
                os.write(self._wake_w, b"x")

    def run(self) -> None:
        live = 0
        while True:
            batch = Batch()
            ready = self.sel.select()
            if self.gather_s and len(ready) < live:
                # let the other workers' lines arrive too: one wake-up, one write for all
                if self._hurried.wait(self.gather_s):
                    self._hurried.clear()
                ready = self.sel.select(0)
            for key, _ in ready:
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    with self._lock:
                        new, self._new = self._new, []
                        closing = self._closing
                    for src in new:
                        self.sel.register(src.fd, selectors.EVENT_READ, src)
                        live += 1
                    if closing and live == 0:
                        self._end()
                        return
                    continue
                src = key.data
                chunk = os.read(src.fd, CHUNK)
                if chunk:
                    src.heard.set()
                    self._take(src, src.block(chunk), batch)
                    continue
                self.sel.unregister(src.fd)
                live -= 1
                tail = src.unsent()  # what the worker died before sending
                if src.rest:  # cut off mid-line, and the file did not complete it
                    src.bad_lines += 1
                    src.rest = b""
                if tail:
                    self._take(src, src.block(tail), batch)
                src.ended.set()
            if batch.blocks:
                self._deliver(batch)
            with self._lock:
                ending = self._closing and live == 0 and not self._new
            if ending:
                self._end()  # takes the lock itself: not under it
                return

    def _take(self, src: Source, block: bytes, batch: Batch) -> None:
        # with events read as rows, one pass in C does the layout test, the counts and
        # the rows, when every line is in the usual shape
        scanned = scan(block) if block and self.events is not None and scan else None
        by_type: tuple[int, ...] | None = None
        rows: list[EventRow] = []
        odd: list[tuple[int, int]] = []
        if scanned is not None:
            n, by_type, rows, odd = scanned
        else:
            n = lines_in_layout(block) if block else 0
            if n < 0:
                block = only_in_layout(src, block)
                n = block.count(b"\n")
            if not n:
                return
            if self.events is not None:
                rows, odd = event_rows(block)
        wanted = wanted_lines(block, self.wants)
        if odd or (wanted and rows):
            read = {start for start, *_ in rows}
            wanted = sorted({*(w for w in wanted if w[0] not in read), *odd})
        whole, bad = read_whole(block, wanted)
        if bad:  # in the layout but not JSON: drop those, then take the rest
            src.bad_lines += len(bad)
            self._take(src, without(block, bad), batch)
            return
        pos = line = 0
        for start, op in whole:
            line += block.count(b"\n", pos, start)
            pos = start
            batch.whole.append((batch.lines + line, op))
        if by_type is None:
            by_type = type_counts(block, n)
        light(by_type, [op for _, op in whole], len(rows), batch.light)
        batch.events += rows
        batch.blocks.append(block)
        batch.lines += n

    def _deliver(self, batch: Batch) -> None:
        first = self.writer.append_block(b"".join(batch.blocks), batch.lines)
        if batch.events and self.events is not None:
            self.events(batch.events)
        for pos, op in batch.whole:
            op["index"] = first + pos
            for obs in self.observers:
                obs(op)
        if self.count is not None and batch.light:
            self.count(batch.light)

    def _end(self) -> None:
        with self._lock:
            self._done = True
        for src in self.sources:  # a pipe that never ended: its file is not wanted
            if src.keep is not None:
                with contextlib.suppress(OSError):
                    os.unlink(src.keep)
        self.sel.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self, timeout: float = 10.0) -> None:
        """Once every source has ended (or after `timeout`), stop. Idempotent."""
        with self._lock:
            self._closing = True
        self._wake()
        if self.is_alive():
            self.join(timeout)
