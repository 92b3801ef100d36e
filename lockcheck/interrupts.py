"""Signals during long runs: SIGTERM takes the Ctrl-C path, so whatever a command
started is still torn down (and recorded) when it is asked to stop."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside, SIGTERM raises KeyboardInterrupt like Ctrl-C does."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# Started from a background job (`nohup ... &`), a process has SIGINT ignored and passes
# that on across exec, so a child lockcheck means to stop with SIGINT (and have it heal
# and tear down) would not stop. This restores SIGINT's default in the child, then execs
# the command under the same PID: unlike a preexec_fn, safe in a parent with threads.
_SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execvp(sys.argv[1], sys.argv[1:])")


def interruptible(argv: Sequence[str]) -> list[str]:
    """`argv` to start a child that a SIGINT stops, even where ours is ignored."""
    return [sys.executable, "-I", "-S", "-c", _SIGINT_DEFAULT, *argv]
