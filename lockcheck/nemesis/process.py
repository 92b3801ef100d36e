"""Process faults on the servers: SIGKILL then restart, SIGSTOP then SIGCONT."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol


class Service(Protocol):
    @property
    def node(self) -> Any: ...

    def kill(self) -> None: ...
    def restart(self, timeout: float = 10.0) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...


def pick_targets(n: int, rng: random.Random) -> list[int]:
    """One node, or (with several nodes) sometimes a minority of them."""
    if n <= 2 or rng.random() < 0.6:
        return [rng.randrange(n)]
    return sorted(rng.sample(range(n), rng.randint(1, (n - 1) // 2)))


@dataclass
class Kill:
    services: list[Service]
    name: str = "kill"
    start_f: str = "kill"
    stop_f: str = "restart"
    _down: list[int] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        self._down = pick_targets(len(self.services), rng)
        for i in self._down:
            self.services[i].kill()
        return {"nodes": [self.services[i].node.name for i in self._down]}

    def stop(self) -> dict[str, Any]:
        names = [self.services[i].node.name for i in self._down]
        self.heal()
        return {"nodes": names}

    def heal(self) -> None:
        down, self._down = self._down, []
        for i in down:
            self.services[i].restart()


@dataclass
class Pause:
    services: list[Service]
    name: str = "pause"
    start_f: str = "pause"
    stop_f: str = "resume"
    _paused: list[int] = field(default_factory=list)

    def start(self, rng: random.Random) -> dict[str, Any]:
        self._paused = pick_targets(len(self.services), rng)
        for i in self._paused:
            self.services[i].pause()
        return {"nodes": [self.services[i].node.name for i in self._paused]}

    def stop(self) -> dict[str, Any]:
        names = [self.services[i].node.name for i in self._paused]
        self.heal()
        return {"nodes": names}

    def heal(self) -> None:
        # resume everything, not only what we remember pausing: SIGCONT is harmless
        for s in self.services:
            s.resume()
        self._paused = []
