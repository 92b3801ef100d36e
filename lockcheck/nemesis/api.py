"""The nemesis interface (a few methods, like Jepsen's) and what a nemesis is built from."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lockcheck.cluster.api import DB, Cluster, Daemon
    from lockcheck.spec import TestSpec


class Nemesis(Protocol):
    name: str  # as given to --nemesis
    start_f: str  # history `f` of the start op, e.g. "start-partition"
    stop_f: str
    hold_s: float  # how long a fault lasts before it is stopped

    def start(self, rng: random.Random) -> dict[str, Any]:
        """Inject the fault; return what was done (goes into the history), with
        `fault` (this nemesis's name) and `targets` (the hosts it hit)."""
        ...

    def stop(self) -> dict[str, Any]:
        """End the fault started last; return what was done."""
        ...

    def heal(self) -> None:
        """Undo every effect this nemesis can have, whether or not it started.
        Idempotent; raises if something could not be undone."""
        ...


class EndsItself(Protocol):
    """A fault that knows when its work is done (a pause that lasts until a failover
    happened, a clock fault once the grant it aimed at was made): the schedule polls
    `ended` while the fault is held and stops it then, before `hold_s` has passed,
    so the next fault's window is not spent waiting."""

    def ended(self) -> bool:
        ...


def ends_itself(nem: object) -> bool:
    """Whether a nemesis says when it is done (see `EndsItself`)."""
    return callable(getattr(nem, "ended", None))


@dataclass(frozen=True)
class WorkerRef:
    """A client worker process, as a nemesis sees it."""

    index: int
    host: str  # the client host it runs on (c0, c1, ...)
    daemon: Daemon


@dataclass(frozen=True)
class Holding:
    """Someone inside a critical section right now, from the live history."""

    worker: int
    process: int
    key: str
    fence: int | None
    since_ns: int
    granted_by: tuple[str, ...] = ()  # the servers whose yes made the grant, if known
    refused_by: tuple[str, ...] = ()  # and those that had said no by then


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What a nemesis may act on: everything of the run, nothing global."""

    spec: TestSpec
    cluster: Cluster
    db: DB
    workers: Sequence[WorkerRef]
    holders: Callable[[], list[Holding]]
    # the next holder to leave its critical section, waiting up to the given seconds
    next_exit: Callable[[float], Holding | None] | None = None
    # arm workers to stop at their stop point (the next granted acquire, or the next
    # release's check), then wait for one to say it did
    stopped_at_point: Callable[[Callable[[Collection[int]], object], Collection[int],
                                float], Holding | None] | None = None
    # the next holder to enter a critical section that a predicate accepts, waiting up
    # to the given seconds; and whether another process was granted a holder's lock since
    next_enter: Callable[[float, Callable[[Holding], bool]], Holding | None] | None = None
    taken_over: Callable[[Holding], bool] | None = None
    # what the faults' prepare steps made (nemesis/registry.py), by step
    prepared: Mapping[str, Any] = field(default_factory=dict)



@dataclass(frozen=True, kw_only=True)
class PrepareContext:
    """What a prepare step may act on: the run, before any client worker exists."""

    spec: TestSpec
    cluster: Cluster
    db: DB


class Prepared(Protocol):
    """What a prepare step leaves in place for the whole run (a proxy in the path, a
    clock file under the workers), undone at teardown."""

    def worker_env(self, host: str) -> Mapping[str, str]:
        """Environment for the client worker that runs on `host` (may be empty)."""
        ...

    def close(self) -> None:
        """Undo it (after the workers have stopped). Idempotent."""
        ...
