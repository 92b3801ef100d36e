"""lockcheck's public Python API, version 1.

An adapter for your own lock imports everything it needs from here:

    from lockcheck.api import ClientOptions, Definite, Indefinite, Lease, NotOwner

and `lockcheck test --client mypkg.locks:make_clients` (or `client-check`) calls
`make_clients(client_config, lock_names, options)`, a `ClientFactory`, in each client
worker. What is here keeps its names, signatures and meaning for as long as
`API_VERSION` is 1; a change that breaks an adapter raises it (docs/your-own-lock.md).

The same contract in short:

* `acquire(key)` tries once: a `Lease` if granted, `None` if someone else holds it.
* `renew(lease)` pushes the lease's end out (`lease.valid_until_ns`) or raises
  `NotOwner`; `release(lease)` gives it back or raises `NotOwner`; `close()`.
* Errors: `Definite` (certainly not applied: recorded `fail`), `Indefinite` (may have
  been applied: `info`), `NotOwner` (a `Definite`: the service says the lock is not
  ours). Any other exception is recorded as `info` with its class name, and the run's
  summary says the adapter maps no errors.
* `Lease.fence` is the adapter's fencing token, or `None` if the lock issues none.

`run(...)` and `TestSpec` run a whole test from Python (`lockcheck.run` is the same).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockcheck.locks.api import (
    ClientFactory,
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    LockClientError,
    NotOwner,
    lease_deadline,
)
from lockcheck.spec import TestSpec

if TYPE_CHECKING:
    from lockcheck.python_api import RunResult

API_VERSION = 1

__all__ = [
    "API_VERSION",
    "ClientFactory",
    "ClientOptions",
    "Definite",
    "Indefinite",
    "Lease",
    "LockClient",
    "LockClientError",
    "NotOwner",
    "RunResult",
    "TestSpec",
    "lease_deadline",
    "run",
]


def run(spec: TestSpec | None = None, /, **options: Any) -> RunResult:
    """Run one test and return its verdict, checker results, metrics and folder.

    Either a `TestSpec`, or its fields as keywords (`backend="redis",
    client="mypkg.locks:make_clients", nemesis=("client-pause",), time_limit=20`).
    Bad options raise `lockcheck.errors.BadInput` with the same one line the CLI
    prints. Needs what `lockcheck test` needs (root, the servers)."""
    from lockcheck.python_api import run as run_spec

    return run_spec(spec, **options)


def __getattr__(name: str) -> Any:
    if name == "RunResult":  # without importing the runner for an adapter
        from lockcheck.python_api import RunResult

        return RunResult
    raise AttributeError(name)
