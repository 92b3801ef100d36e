"""The nemesis interface: a few methods, like Jepsen's."""

from __future__ import annotations

import random
from typing import Any, Protocol


class Nemesis(Protocol):
    name: str  # as given to --nemesis
    start_f: str  # history `f` of the start op, e.g. "start-partition"
    stop_f: str

    def start(self, rng: random.Random) -> dict[str, Any]:
        """Inject the fault; return what was done (goes into the history)."""
        ...

    def stop(self) -> dict[str, Any]:
        """End the fault started last; return what was done."""
        ...

    def heal(self) -> None:
        """Undo every effect this nemesis can have, whether or not it started. Idempotent."""
        ...
