"""A child lockcheck means to stop with SIGINT gets SIGINT's default action, also when
lockcheck itself was started with SIGINT ignored (`nohup ... &`, a non-interactive
shell's background job): test-all's cells heal and tear down when their time is up."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = ("import signal, sys; "
         "sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 3)")


def parent(wrapped: bool) -> str:
    """A parent that ignores SIGINT, as a background job does, and starts the child."""
    start = "interruptible(argv)" if wrapped else "argv"
    return ("import signal, subprocess, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "from lockcheck.interrupts import interruptible; "
            f"argv = [sys.executable, '-c', {CHILD!r}]; "
            f"sys.exit(subprocess.run({start}).returncode)")


@pytest.mark.parametrize(("wrapped", "code"), [(True, 0), (False, 3)])
def test_a_child_started_interruptible_takes_sigint_even_when_its_parent_ignores_it(
        wrapped: bool, code: int) -> None:
    r = subprocess.run([sys.executable, "-c", parent(wrapped)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == code, r.stderr
