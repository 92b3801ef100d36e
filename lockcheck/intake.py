"""Worker ops into the history: one thread reads every worker's pipe as ops arrive.

A worker prints each op as one JSON line in a fixed layout (`workloads/worker.py:
Recorder`: `{"time": ..., "process": ..., "type": "...", "f": "...", ...}`). The
intake does not decode and re-encode what it copies: it takes the complete lines each
pipe has, prefixes each with its `index`, and appends them with one write and one
flush per wake-up (`HistoryWriter.append_lines`); a wake-up first waits `gather_s`
(2 ms) for the other workers' lines, unless a fault acts on ops the moment they
arrive (`NemesisKind.prompt`: client-pause). So the history is still written as the
run goes and is readable after a crash up to the last complete line, at a small part
of the cost of a thread per worker and a parse, a dump and a flush per line
(docs/benchmarks.md).

Observers (the progress counts, who holds a lock now) see, whole, the ops whose line
`wants` (critical-section events, resource writes: a substring test, which may let an
extra line through but never misses one); of the others `count` gets how many of each
type came, a wake-up at a time. A line not in the layout is dropped and counted,
never written.
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
# how long a wake-up waits for more workers' lines: ten workers' writes then cost a few
# hundred wake-ups a second instead of thousands (each one a chance for the scheduler to
# preempt a worker inside its critical section, which costs the others a backoff)
GATHER_S = 0.002
_HEAD, _TAIL, _TYPE = '{"time": ', "}\n", '"type": "'


def line_type(line: str) -> str:
    """The `type` of a line in the Recorder's layout (it follows time and process)."""
    i = line.find(_TYPE, 10, 80) + len(_TYPE)
    return line[i:line.find('"', i)]


def in_layout(line: str) -> bool:
    """A complete line as the Recorder writes it (whole JSON objects only, so a line
    cut off by a dying worker never reaches the history)."""
    return line.startswith(_HEAD) and line.endswith(_TAIL)


class Source:
    """One worker's pipe: the partial line it ended a read with, and whether it ended."""

    def __init__(self, name: str, stream: IO[bytes]) -> None:
        self.name, self.stream = name, stream
        self.fd = stream.fileno()
        self.rest = b""
        self.bad_lines = 0
        self.ended = threading.Event()
        self.heard = threading.Event()  # it has written something: the worker is up

    def lines(self, chunk: bytes) -> list[str]:
        data = self.rest + chunk
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        return data[:cut].decode("utf-8", "replace").splitlines(keepends=True)

    def wait_ended(self, timeout: float) -> bool:
        return self.ended.wait(timeout)


@dataclass
class Batch:
    """What one wake-up brought: the lines to write, the ops read whole (with their
    place among the lines), and how many of each type came of the rest."""

    lines: list[str] = field(default_factory=list)
    whole: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    light: dict[str, int] = field(default_factory=dict)


class Intake(threading.Thread):
    def __init__(self, writer: HistoryWriter, observers: Sequence[Observer],
                 wants: Callable[[str], bool],
                 count: Callable[[dict[str, int]], None] | None = None,
                 gather_s: float = GATHER_S) -> None:
        super().__init__(name="intake", daemon=True)
        self.writer, self.observers, self.wants = writer, list(observers), wants
        self.count, self.gather_s = count, gather_s
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
                    self._parse(src, src.lines(chunk), batch)
                    continue
                self.sel.unregister(src.fd)
                live -= 1
                if src.rest:  # cut off mid-line: the worker died while writing
                    src.bad_lines += 1
                    src.rest = b""
                src.ended.set()
            if batch.lines:
                self._deliver(batch)
            with self._lock:
                if self._closing and live == 0 and not self._new:
                    self._end()
                    return

    def _parse(self, src: Source, lines: list[str], batch: Batch) -> None:
        for line in lines:
            if not in_layout(line):
                src.bad_lines += 1
                continue
            if self.wants(line):
                try:
                    op = json.loads(line)
                except ValueError:
                    src.bad_lines += 1
                    continue
                batch.whole.append((len(batch.lines), op))
            else:
                t = line_type(line)
                batch.light[t] = batch.light.get(t, 0) + 1
            batch.lines.append(line)

    def _deliver(self, batch: Batch) -> None:
        first = self.writer.append_lines(batch.lines)
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
