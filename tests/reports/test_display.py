"""The terminal: the live run status and the matrix (rich on a real pseudo-terminal,
plain lines elsewhere), and the end-of-run summary."""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import select
import struct
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from lockcheck.results.display import (
    LiveRunDisplay,
    MatrixDisplay,
    PlainRunDisplay,
    RunStatus,
    make_run_display,
    render_summary,
)

ESC = "\x1b["


def status(phase: str = "running", elapsed: float = 5.0, **kw: Any) -> RunStatus:
    base: dict[str, Any] = {"elapsed_s": elapsed, "time_limit_s": 20.0, "phase": phase,
                            "ops": 10, "by_type": {"ok": 4, "fail": 3, "info": 1}, "faults": 2,
                            "active": ("kill n1",), "violations": 3}
    base.update(kw)
    return RunStatus(**base)


# what rich (and lockcheck) read from the environment about the terminal
TERMINAL_ENV = ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE",
                "TTY_INTERACTIVE", "COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES")


@pytest.fixture
def tty(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, IO[str]]]:
    """A real pseudo-terminal, 100 columns, of a colour terminal whatever the one pytest
    runs in: (master fd to read, the terminal to write)."""
    for name in TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "100")  # rich reads it, not the pty's size
    monkeypatch.setenv("LINES", "30")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    out = os.fdopen(slave, "w", encoding="utf-8")
    try:
        yield master, out
    finally:
        out.close()
        os.close(master)


def drain(master: int) -> str:
    chunks = []
    while select.select([master], [], [], 0.2)[0]:
        chunks.append(os.read(master, 65536))
    return b"".join(chunks).decode("utf-8", "replace")


def test_plain_lines_on_phase_changes_and_every_few_seconds() -> None:
    out = io.StringIO()
    d = make_run_display(out, "redis-mutex-kill")
    assert isinstance(d, PlainRunDisplay)
    d.update(status())
    d.update(status(elapsed=5.5))  # same phase, too soon: nothing
    d.update(status("quiet", elapsed=16))
    d.update(status("quiet", elapsed=16.2), force=True)
    d.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0] == ("redis-mutex-kill [  5.0s/20s] running | ops 10 (ok 4, fail 3, info 1) "
                        "| faults 2 (active: kill n1) | violations so far 3")
    assert " quiet " in lines[1] and ESC not in out.getvalue()


@pytest.mark.parametrize("no_color", [False, True])
def test_live_on_a_terminal(tty: tuple[int, IO[str]], monkeypatch: pytest.MonkeyPatch,
                            no_color: bool) -> None:
    """Drawn in place, in colour unless NO_COLOR is set."""
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    master, out = tty
    d = make_run_display(out, "redis-mutex-kill")
    assert isinstance(d, LiveRunDisplay)
    d.update(status(), force=True)
    d.update(status("recovery", elapsed=19.0, active=(), violations=0), force=True)
    d.close()
    screen = drain(master)
    assert ESC in screen and bool(colours(screen)) is not no_color
    assert "redis-mutex-kill" in screen and "kill n1" in screen and "recovery" in screen
    assert "violations" in screen


def colours(screen: str) -> list[str]:
    """The SGR sequences on the screen that set a colour (not bold, dim, reset)."""
    return [m for m in re.findall(r"\x1b\[([0-9;]*)m", screen)
            if re.search(r"(^|;)(3[0-9]|4[0-9]|9[0-7]|10[0-7])(;|$)", m)]


def test_a_dumb_terminal_gets_the_plain_lines(tty: tuple[int, IO[str]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """TERM=dumb cannot move the cursor: no redrawing in place, no escape sequences."""
    monkeypatch.setenv("TERM", "dumb")
    master, out = tty
    d = make_run_display(out, "redis-mutex-kill")
    assert isinstance(d, PlainRunDisplay)
    d.update(status(), force=True)
    d.close()
    m = MatrixDisplay.start(out, ["redis-mutex-none"])
    m.set(0, "unsafe", 6.0)
    m.close()
    screen = drain(master)
    assert "redis-mutex-kill [  5.0s/20s] running" in screen
    assert "[1/1] redis-mutex-none: unsafe (6s)" in screen and ESC not in screen


def results(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "results.json").read_text())
    return data


def test_summary_tables(unfenced_run: Path) -> None:
    out = io.StringIO()
    render_summary(results(unfenced_run), out)
    text = out.getvalue()
    assert ESC not in text
    for name in ("mutual-exclusion", "fencing", "lease-safety", "linearizable"):
        assert name in text
    assert "acquire latency, granted" in text and "availability under kill" in text
    assert "expiries while working" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("INVALID: the lock and the resource failed: ")
    assert "resource corrupted" in last


def test_summary_in_colour_on_a_terminal(tty: tuple[int, IO[str]], fenced_run: Path) -> None:
    master, out = tty
    render_summary(results(fenced_run), out)
    out.flush()
    screen = drain(master)
    assert colours(screen) and "valid" in screen and "checkers" in screen


def test_matrix_progress_plain() -> None:
    out = io.StringIO()
    m = MatrixDisplay.start(out, ["redis-mutex-none", "redis-mutex-kill"])
    m.set(0, "running")
    m.set(0, "safe", 6.2)
    m.set(1, "running")
    m.set(1, "error", 3.0, "timed out")
    m.close()
    assert out.getvalue().splitlines() == [
        "test-all: 2 runs", "[1/2] redis-mutex-none ...", "[1/2] redis-mutex-none: safe (6s)",
        "[2/2] redis-mutex-kill ...", "[2/2] redis-mutex-kill: error (3s) timed out"]


def test_matrix_progress_live(tty: tuple[int, IO[str]]) -> None:
    master, out = tty
    m = MatrixDisplay.start(out, ["redis-mutex-none", "redis-mutex-kill"])
    m.set(0, "running")
    m.set(0, "unsafe", 6.0)
    m.close()
    screen = drain(master)
    assert ESC in screen and "1 done, 1 left" in screen and "unsafe" in screen
