"""The lock-client interface: acquire -> lease with fence, renew, release, belief.

Errors split like httpx's: `Definite` means the request certainly did nothing (it
never left, or the service refused it); `Indefinite` means it may have been applied.
Each backend maps its library's exceptions into these in exactly one place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


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
    The client believes it holds the lock until then, unless a renew was refused.
    """

    key: str
    token: str
    fence: int | None
    ttl_ms: int
    valid_until_ns: int
    lost: bool = False

    def still_holds(self, now_ns: int | None = None) -> bool:
        now = time.monotonic_ns() if now_ns is None else now_ns
        return not self.lost and now < self.valid_until_ns


def lease_deadline(invoked_ns: int, ttl_ms: int, drift: float) -> int:
    return invoked_ns + int(ttl_ms * 1_000_000 * (1.0 - drift))


class LockClient(Protocol):
    """What a workload needs from a lock service client. Methods raise Definite/Indefinite."""

    def acquire(self, key: str) -> Lease | None:
        """Try once to take `key`; None if someone else holds it (a definite no)."""
        ...

    def renew(self, lease: Lease) -> None:
        """Reset the lease's TTL; raises NotOwner if the lock is no longer ours."""
        ...

    def release(self, lease: Lease) -> None:
        """Give the lock back; raises NotOwner if we did not hold it any more."""
        ...

    def close(self) -> None: ...
