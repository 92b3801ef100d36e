"""The run registry: one JSON file per live run, so leftovers of a killed run can be found.

A run writes its file *before* it creates anything, and adds each namespace, bridge
and PID as it creates them. `lockcheck cluster down` and the start of every
`lockcheck test` remove whatever a dead run left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lockcheck.cluster.node import pid_alive, pid_start_time

DEFAULT_STATE_DIR = Path(os.environ.get("LOCKCHECK_STATE_DIR", "/run/lockcheck"))


@dataclass
class RunState:
    run_id: str
    kind: str  # "test" or "cluster" (left running on purpose)
    owner_pid: int
    owner_start: int | None
    subnet: str
    bridge: str
    workdir: str
    namespaces: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)  # name -> address
    services: dict[str, dict[str, object]] = field(default_factory=dict)
    created: float = 0.0

    def owner_alive(self) -> bool:
        return pid_alive(self.owner_pid) and pid_start_time(self.owner_pid) == self.owner_start


class Registry:
    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR) -> None:
        self.dir = state_dir

    def path(self, run_id: str) -> Path:
        return self.dir / f"{run_id}.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock across lockcheck processes on this host.

        flock on the registry folder itself, so no lock file is left behind.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def save(self, state: RunState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path(state.run_id).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=1))
        os.replace(tmp, self.path(state.run_id))

    def remove(self, run_id: str) -> None:
        self.path(run_id).unlink(missing_ok=True)
        self.path(run_id).with_suffix(".tmp").unlink(missing_ok=True)

    def all(self) -> list[RunState]:
        out: list[RunState] = []
        if not self.dir.is_dir():
            return out
        for p in sorted(self.dir.glob("*.json")):
            try:
                out.append(RunState(**json.loads(p.read_text())))
            except (ValueError, TypeError, OSError):
                continue  # a torn file: its resources are still found by name
        return out
