"""Signals during long runs: SIGTERM takes the Ctrl-C path, so whatever a command
started is still torn down (and recorded) when it is asked to stop."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


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
