"""Worker ops into the history: one thread reads every worker's pipe as ops arrive.

A worker prints each op as one JSON line in a fixed layout (`workloads/worker.py:
Recorder`: `{"time": ..., "process": ..., "type": "...", "f": "...", ...}`, ASCII). The
intake copies what a pipe brings as bytes, a block of complete lines at a time, and
does no work per line that C does not do for it: that every line of a block is in the
layout is three counts and an ASCII test over the block; the lines observers want are
found by substring search; the rest are counted by type with `bytes.count`. The writer
then gives each line its `index` (`HistoryWriter.append_block`), one write and one
flush per wake-up; a wake-up first waits `gather_s` (5 ms) for the other workers'
lines, unless a fault acts on ops the moment they arrive (`NemesisKind.prompt`:
client-pause). So the history is still written as the run goes and is readable after a
crash up to the last complete line, at a small part of the cost of decoding each line
(docs/benchmarks.md, "Harness overhead").

Observers (the progress counts, who holds a lock now) see, whole, the ops whose line
contains one of the `wants` markers (critical-section events, resource writes: a
substring test, which may let an extra line through but never misses one); of the
others `count` gets how many of each type came, a wake-up at a time. A line not in the
layout is dropped and counted, never written: a block with one takes the slow path,
line by line.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import threading
import time
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
_HEAD, _NEXT, _TAIL = b'{"time": ', b'\n{"time": ', b"}\n"
# the types counted by search; "invoke", the most common, is what the others leave
COUNTED = ("ok", "fail", "info", "event")
# a line's type as the layout writes it, between process and f: a value would have to
# hold this very text, unescaped, to be miscounted (only the progress counts use it)
_TYPE_MARKS = tuple((t, b'"type": "' + t.encode() + b'", "f": "') for t in COUNTED)
_decode = json.JSONDecoder().raw_decode


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
    """One worker's pipe: the partial line it ended a read with, and whether it ended."""

    def __init__(self, name: str, stream: IO[bytes]) -> None:
        self.name, self.stream = name, stream
        self.fd = stream.fileno()
        self.rest = b""
        self.bad_lines = 0
        self.ended = threading.Event()
        self.heard = threading.Event()  # it has written something: the worker is up

    def block(self, chunk: bytes) -> bytes:
        """The complete lines this read ends, with the start the last read left."""
        data = self.rest + chunk if self.rest else chunk
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        return data[:cut]

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


def read_whole(block: bytes, markers: Sequence[bytes]
               ) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, int]]]:
    """The lines holding a marker, decoded, with where each starts; and where those
    that are not one JSON object start and end."""
    whole: list[tuple[int, dict[str, Any]]] = []
    bad: list[tuple[int, int]] = []
    wanted = wanted_lines(block, markers)
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


class Intake(threading.Thread):
    def __init__(self, writer: HistoryWriter, observers: Sequence[Observer],
                 wants: Sequence[bytes],
                 count: Callable[[dict[str, int]], None] | None = None,
                 gather_s: float = GATHER_S) -> None:
        super().__init__(name="intake", daemon=True)
        self.writer, self.observers, self.wants = writer, list(observers), tuple(wants)
        self.count, self.gather_s = count, gather_s
        # a type whose every line some marker picks out is seen whole: not counted
        self._marks = [(t, m) for t, m in _TYPE_MARKS if not any(w in m for w in self.wants)]
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._new: list[Source] = []
        self._closing = self._done = False
        self.sources: list[Source] = []

    def add(self, name: str, stream: IO[bytes]) -> Source:
        """Start copying a worker's stdout (the thread must have been started)."""
        src = Source(name, stream)
        with self._lock:
            if self._done:
                raise RuntimeError("the intake is closed")
            self._new.append(src)
            self.sources.append(src)
        self._wake()
        return src

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
                time.sleep(self.gather_s)
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
                if src.rest:  # cut off mid-line: the worker died while writing
                    src.bad_lines += 1
                    src.rest = b""
                src.ended.set()
            if batch.blocks:
                self._deliver(batch)
            with self._lock:
                if self._closing and live == 0 and not self._new:
                    self._end()
                    return

    def _take(self, src: Source, block: bytes, batch: Batch) -> None:
        n = lines_in_layout(block) if block else 0
        if n < 0:
            block = only_in_layout(src, block)
            n = block.count(b"\n")
        if not n:
            return
        whole, bad = read_whole(block, self.wants)
        if bad:  # in the layout but not JSON: drop those, then take the rest
            src.bad_lines += len(bad)
            self._take(src, without(block, bad), batch)
            return
        pos = line = 0
        for start, op in whole:
            line += block.count(b"\n", pos, start)
            pos = start
            batch.whole.append((batch.lines + line, op))
        self._count(block, n, [op for _, op in whole], batch.light)
        batch.blocks.append(block)
        batch.lines += n

    def _count(self, block: bytes, n: int, whole: list[dict[str, Any]],
               light: dict[str, int]) -> None:
        """Add the types of the block's lines not read whole to `light`."""
        rest = n - len(whole)
        seen: dict[Any, int] = {}  # the types of the lines read whole: not counted again
        for op in whole:
            t = op.get("type")
            seen[t] = seen.get(t, 0) + 1
        for t, mark in self._marks:
            k = block.count(mark) - seen.get(t, 0)
            if k > 0:
                light[t] = light.get(t, 0) + k
                rest -= k
        if rest > 0:
            light["invoke"] = light.get("invoke", 0) + rest

    def _deliver(self, batch: Batch) -> None:
        first = self.writer.append_block(b"".join(batch.blocks))
        for pos, op in batch.whole:
            op["index"] = first + pos
            for obs in self.observers:
                obs(op)
        if self.count is not None and batch.light:
            self.count(batch.light)

    def _end(self) -> None:
        with self._lock:
            self._done = True
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
