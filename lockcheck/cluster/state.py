"""The run registry: one JSON file per live run, so leftovers of a killed run can be found.

A run writes its file *before* it creates anything, and adds each namespace, bridge,
PID (and, for the docker and ssh providers, each container or remote host) as it
creates them. `lockcheck cluster down` and the start of every
`lockcheck test` remove whatever a dead run left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from lockcheck.cluster.node import pid_alive, pid_start_time
from lockcheck.errors import BadInput


def default_state_dir() -> Path:
    """`$LOCKCHECK_STATE_DIR`; else /run/lockcheck for root; else a folder the user owns
    (`$XDG_RUNTIME_DIR/lockcheck`, `~/.cache/lockcheck/runs`, or one in the temp folder):
    a run without root (`--provider inproc`) registers itself there."""
    env = os.environ.get("LOCKCHECK_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/lockcheck")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    for base, sub in ((runtime, "lockcheck"), (str(Path.home() / ".cache"), "lockcheck/runs")):
        if base and _writable(Path(base)):
            return Path(base) / sub
    return Path(tempfile.gettempdir()) / f"lockcheck-state-{os.geteuid()}"


def _writable(d: Path) -> bool:
    """`d`, or the nearest folder above it that exists, can be written by this user."""
    try:
        while not d.exists() and d != d.parent:
            d = d.parent
        return d.is_dir() and os.access(d, os.W_OK | os.X_OK)
    except OSError:  # inside a folder this user may not even look into (HOME=/root)
        return False


DEFAULT_STATE_DIR = default_state_dir()


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
    # which provider made it: each provider's reap cleans only its own runs
    provider: str = "local"
    # what that provider needs to find the run's things again (containers and network,
    # SSH hosts and their PIDs, ...): plain JSON
    remote: dict[str, Any] = field(default_factory=dict)

    def owner_alive(self) -> bool:
        return pid_alive(self.owner_pid) and pid_start_time(self.owner_pid) == self.owner_start


class Registry:
    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR) -> None:
        self.dir = state_dir

    def _make_dir(self) -> None:
        # 0700: in a shared temp folder, another user's files must not pass for runs
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.dir.stat().st_uid != os.geteuid() and os.geteuid() != 0:
            raise BadInput(f"the run registry {self.dir} belongs to another user; "
                           "set LOCKCHECK_STATE_DIR to a folder of your own")

    def path(self, run_id: str) -> Path:
        return self.dir / f"{run_id}.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock across lockcheck processes on this host.

        flock on the registry folder itself, so no lock file is left behind.
        """
        self._make_dir()
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def sidecar(self, run_id: str) -> Path:
        # the whole state of a docker or ssh run; not "*.json", so that a lockcheck
        # without those providers (an older one, run at the same time) never reads it:
        # it reads the main file, which keeps the fields it knows
        return self.dir / f"{run_id}.remote"

    def save(self, state: RunState) -> None:
        self._make_dir()
        full = asdict(state)
        if state.provider != "local" or state.remote:
            _replace(self.sidecar(state.run_id), full)
        _replace(self.path(state.run_id), {k: v for k, v in full.items() if k in LEGACY})

    def remove(self, run_id: str) -> None:
        for p in (self.path(run_id), self.sidecar(run_id)):
            p.unlink(missing_ok=True)
            p.with_suffix(p.suffix + ".tmp").unlink(missing_ok=True)
        self.path(run_id).with_suffix(".tmp").unlink(missing_ok=True)

    def all(self) -> list[RunState]:
        out: dict[str, RunState] = {}
        if not self.dir.is_dir():
            return []
        # a sidecar whose main file is gone still names a run to clean up
        for p in [*sorted(self.dir.glob("*.remote")), *sorted(self.dir.glob("*.json"))]:
            if p.stem in out:
                continue
            try:
                data = json.loads(p.read_text())
                out[p.stem] = RunState(**{k: v for k, v in data.items() if k in FIELDS})
            except (ValueError, TypeError, OSError):
                continue  # a torn file: its resources are still found by name
        return [out[k] for k in sorted(out)]


class Selection(Registry):
    """The registry with only some of its runs in view: a provider's `remove_kept`
    given one removes those clusters and no other."""

    def __init__(self, registry: Registry, run_ids: Collection[str]) -> None:
        super().__init__(registry.dir)
        self.run_ids = frozenset(run_ids)

    def all(self) -> list[RunState]:
        return [st for st in super().all() if st.run_id in self.run_ids]


def keep_running(state: RunState, registry: Registry,
                 services: Mapping[str, Mapping[str, object]]) -> None:
    """A cluster left up on purpose: `lockcheck cluster down` (or status) finds it by
    its kind, and no reap takes it for a dead run's."""
    state.kind = "cluster"
    state.services = {k: dict(v) for k, v in services.items()}
    registry.save(state)


FIELDS = {f.name for f in fields(RunState)}
LEGACY = FIELDS - {"provider", "remote"}  # what every lockcheck version can read


def _replace(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
