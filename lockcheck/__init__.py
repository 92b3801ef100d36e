"""lockcheck: a Jepsen-style tester for distributed locks."""

from typing import Any

__version__ = "0.1.0"


def run(spec: Any = None, /, **options: Any) -> Any:
    """Run one lockcheck test from Python (a `lockcheck.api.RunResult`): see
    `lockcheck.api.run`."""
    from lockcheck.api import run as run_test

    return run_test(spec, **options)
