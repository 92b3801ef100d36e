"""What a workload is: the body of a critical section, and the resource it protects.

The worker loop (`workloads/worker.py`) is the same for every workload: acquire a random
lock name, enter, run the workload's *body*, exit, release. The body gets a `Section`:
it can `work()` (hold the lock for a while; renewals happen in between, on the same
process, so a process never has two operations in flight) and `call()` recorded
operations on the protected resource. A workload may bring a *resource* that the
controller runs for the length of the test (a fenced store, a table), and the
checkers and verdict rule that judge it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from lockcheck.cluster.api import Node

# What a run of a workload puts on trial. "lock": only the lock's checkers decide.
# "lock+resource": the lock and the resource it protects are judged apart, and a report
# says which failed (the fenced workload). "resource": the resource's own checker decides,
# and the lock's failures are its cause.
Trial = Literal["lock", "lock+resource", "resource"]

# A body returns None when the section ran to its end, or why it stopped early:
# "not-owner" (a renew was refused), "lease-expired" (its own lease clock ran out),
# "indefinite" (an op's outcome is unknown: the process retired), "error".
Reason = str | None


class Section(Protocol):
    """The critical section a body runs in (implemented by the worker)."""

    key: str
    fence: int | None
    lease_token: str
    resource: Any  # the workload's resource client in this worker, or None

    def hold_time(self) -> float:
        """A critical-section length in seconds, drawn from `--hold-ms`."""
        ...

    def work(self, seconds: float, *, watch_clock: bool = True) -> Reason:
        """Hold the lock for `seconds`, renewing when due; stop early when a renewal is
        refused or the client library says the lock is gone, and (with `watch_clock`)
        as soon as the client's own lease clock runs out."""
        ...

    def believes(self) -> Reason:
        """None while the client believes it holds the lock, else why not."""
        ...

    def call(self, f: str, value: Mapping[str, Any],
             fn: Callable[[int], Outcome]) -> Outcome:
        """Record `invoke f value`, run `fn(process)`, record its completion.

        `fn` returns an `Outcome`; OSError/TimeoutError (or `Indefinite`) from it is
        recorded as `info` and retires the process (the section then ends)."""
        ...


@dataclass(frozen=True)
class Outcome:
    type: str  # "ok", "fail" or "info"
    value: Any = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResourceContext:
    """What the controller gives a workload's resource when it starts it."""

    mode: str  # --resource, one of the workload's `resources`
    workdir: Path  # the run's temp folder on the controller (sockets)
    run_dir: Path  # the results folder (the resource's own log goes here)
    t0_ns: int
    keys: Sequence[str] = ()  # the lock names of the run
    clients: int = 0  # how many workers will connect
    # where the resource may run processes of its own (a server), so that they go
    # with the run's cleanup; never cut off from clients through a Unix socket
    host: Node | None = None
    # appends a record to the history (a resource's final state, say)
    record: Callable[[dict[str, Any]], None] | None = None
    # the database's client configuration (endpoints), for a resource kept in it
    service: Mapping[str, Any] = field(default_factory=dict)


class Resource(Protocol):
    """A protected resource the controller runs for the length of a test."""

    def start(self) -> Resource: ...

    def stop(self) -> None: ...

    def worker_config(self) -> dict[str, Any]:
        """Plain data a worker needs to reach it."""
        ...


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    description: str
    body: str  # "module:function", called in the worker as body(section) -> Reason
    checkers: tuple[str, ...]  # run at the end, by name (checker/registry.py)
    # "module:function", called as verdict(results) -> (valid, one-line explanation): the
    # rule that turns the checkers' results (by name) into the run's verdict
    verdict: str
    on_trial: Trial  # what a failure indicts: the lock, the lock and a resource, a resource
    resource: str | None = None  # "module:factory": factory(ResourceContext) -> Resource
    resource_client: str | None = None  # "module:factory": factory(config, timeout_s) -> client
    resources: tuple[str, ...] = ("fenced", "unfenced")  # the --resource modes it takes
    # a --resource mode that only works with one backend family (its store is that
    # database itself): mode -> family
    resource_families: Mapping[str, str] = field(default_factory=dict)
    # "module:function", called as plan(spec) -> KeyPlan; default: k0..k<--keys - 1>,
    # each worker choosing among them at random
    keys: str | None = None
    # "module:function", called as pick(names, rng, elapsed_s, params) -> name: which lock
    # a worker takes next (the default: any of them, at random)
    pick: str | None = None
    # "module:function", called as round(worker) for each operation instead of the
    # one-lock round (acquire, body, release): an operation that holds several locks
    round: str | None = None


@dataclass(frozen=True)
class KeyPlan:
    """The lock names of a run, what workers need to choose among them, and the names
    the recovery phase takes once each at the end."""

    names: list[str]
    params: dict[str, Any]
    recovery: list[str]


def default_keys(n: int) -> KeyPlan:
    names = [f"k{i}" for i in range(n)]
    return KeyPlan(names, {}, names)
