"""The waiter's takeover rule of locks whose service keeps no time (DynamoDB, GCS).

The service cannot expire a lease, so a waiter does: it remembers the version of a
held lock it read (a record version, an object generation) and when it first saw it,
on its own monotonic clock. A holder renews with a new version well within its lease,
so a version that stood unchanged for a whole lease belongs to a holder that stopped;
the waiter may then take the lock over, conditionally on that very version. The timer
starts when the read's reply is in, after the holder's write, which came after the
invoke its lease counts from: the holder's belief is over before a takeover is sent.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

V = TypeVar("V", bound=Hashable)


@dataclass
class Observations(Generic[V]):
    """Per lock name, the held version a waiter has seen and when it first saw it."""

    lease_ns: int
    seen: dict[str, tuple[V, int]] = field(default_factory=dict)

    def observe(self, key: str, version: V | None, now_ns: int) -> None:
        """A read found `version` held (None: free, or no record at all)."""
        if version is None:
            self.seen.pop(key, None)
        elif key not in self.seen or self.seen[key][0] != version:
            self.seen[key] = (version, now_ns)

    def takeover(self, key: str, now_ns: int) -> V | None:
        """The version this waiter may take the lock over from now, if any."""
        got = self.seen.get(key)
        if got is None or now_ns - got[1] < self.lease_ns:
            return None
        return got[0]

    def expired(self, key: str, version: V, now_ns: int) -> bool:
        """`version` has stood a whole lease: it may be taken over."""
        return self.takeover(key, now_ns) == version
