"""The lock-client interface: acquire -> lease with fence, renew, release, belief.

Errors split like httpx's: `Definite` means the request certainly did nothing (it
never left, or the service refused it); `Indefinite` means it may have been applied.
Each backend maps its library's exceptions into these in exactly one place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class LockClientError(Exception):
    """Base of the errors a lock client raises."""


class Definite(LockClientError):
    """Certainly not applied: the op is recorded as `fail`."""


class Indefinite(LockClientError):
    """May or may not have been applied: the op is recorded as `info`."""


class NotOwner(Definite):
    """The service says this client does not hold the lock (expired or taken)."""


@dataclass
class Lease:
    """A granted lock, as the client sees it.

    `valid_until_ns` is the client's own lease clock: the invoke time of the last
    acquire/renew that succeeded, plus the TTL shortened by the clock-drift bound.
    The client believes it holds the lock until then, unless a renew was refused or
    the client library said the lock is gone (`lost`, which a library's own thread
    may set at any time: a ZooKeeper session suspended, an etcd lease expired).

    `token` is unique per grant (the owner token the service stores); the history
    records it as `lease`, so every renew and release names the grant it belongs to.

    `granted_by` names the servers that said yes to the latest acquire or renew, and
    `refused_by` those that had said no by then, where the client asks several and can
    tell (Redlock's masters; pottery returns at the quorum, so a late yes is not in
    it). The history records them with the grant, so a double grant can be traced to
    the servers that made both: a grant with every other server's no is on a bare
    quorum.
    """

    key: str
    token: str
    fence: int | None
    ttl_ms: int
    valid_until_ns: int
    lost: bool = False
    granted_by: tuple[str, ...] = ()
    refused_by: tuple[str, ...] = ()

    def still_holds(self, now_ns: int | None = None) -> bool:
        now = time.monotonic_ns() if now_ns is None else now_ns
        return not self.lost and now < self.valid_until_ns


def lease_deadline(invoked_ns: int, ttl_ms: int, drift: float) -> int:
    return invoked_ns + int(ttl_ms * 1_000_000 * (1.0 - drift))


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """What every lock client is told, besides where the service is."""

    ttl_ms: int
    op_timeout_s: float
    drift: float = 0.01
    worker: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)  # the backend variant's switches
    # called by a client that can (Backend.stops_at_reply) with the lock name, once a
    # grant's replies are in and before its algorithm reads them: where `client-pause
    # --pause-at acquire` stops the worker (Kleppmann's pause with replies in flight)
    at_grant_reply: Callable[[str], None] | None = None
    # called by a client whose release is a check then an act (Backend.stops_at_release)
    # with the lease, between the two: where `client-pause --pause-at release` stops it
    at_release_check: Callable[[Lease], None] | None = None


class LockClient(Protocol):
    """What a workload needs from a lock service client. Methods raise Definite/Indefinite."""

    def acquire(self, key: str) -> Lease | None:
        """Try once to take `key`; None if someone else holds it (a definite no)."""
        ...

    def renew(self, lease: Lease) -> None:
        """Reset the lease's TTL (a service without TTLs confirms the lock is still
        ours); raises NotOwner if it is not, and updates `lease.valid_until_ns`."""
        ...

    def release(self, lease: Lease) -> None:
        """Give the lock back; raises NotOwner if we did not hold it any more."""
        ...

    def close(self) -> None: ...


# (client_config from the database, lock names, options) -> a client per lock name
ClientFactory = Callable[[Mapping[str, Any], Sequence[str], ClientOptions],
                         Mapping[str, LockClient]]
