"""Nemeses by name, what each needs from the backend, and how it is built.

Adding a fault is a module with a factory `(RunContext) -> Nemesis` and an entry here.
A nemesis that needs a database capability the backend lacks (kill, pause, primary)
is refused before the run starts, with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcheck.backends import load
from lockcheck.cluster.api import CAPABILITIES
from lockcheck.errors import BadInput
from lockcheck.nemesis.api import Nemesis, RunContext


@dataclass(frozen=True, kw_only=True)
class NemesisKind:
    name: str
    description: str
    build: str  # "module:factory", called as factory(RunContext) -> Nemesis
    needs: tuple[str, ...] = ()  # database capabilities (cluster.api.CAPABILITIES)

    def make(self, ctx: RunContext) -> Nemesis:
        nem: Nemesis = load(self.build)(ctx)
        return nem

    def missing(self, db: object) -> list[str]:
        return [c for c in self.needs if not isinstance(db, CAPABILITIES[c])]


NEMESES: dict[str, NemesisKind] = {
    k.name: k
    for k in [
        NemesisKind(name="partition",
                    description="random halves of the nodes, or one node isolated; each "
                                "client goes with one side",
                    build="lockcheck.nemesis.partition:partition"),
        NemesisKind(name="kill",
                    description="SIGKILL the server on one node or a minority; restart it "
                                "--restart-delay-ms later",
                    build="lockcheck.nemesis.process:kill", needs=("kill",)),
        NemesisKind(name="pause",
                    description="SIGSTOP the server on one node or a minority; SIGCONT "
                                "--nemesis-interval later",
                    build="lockcheck.nemesis.process:pause", needs=("pause",)),
        NemesisKind(name="partition-primary",
                    description="isolate the current primary or leader (as the service "
                                "names it) from the other nodes; clients go with either side",
                    build="lockcheck.nemesis.partition:partition_primary", needs=("primary",)),
        NemesisKind(name="kill-primary",
                    description="SIGKILL the current primary or leader; restart it "
                                "--restart-delay-ms later",
                    build="lockcheck.nemesis.process:kill_primary", needs=("kill", "primary")),
        NemesisKind(name="pause-primary",
                    description="SIGSTOP the current primary or leader; SIGCONT "
                                "--nemesis-interval later",
                    build="lockcheck.nemesis.process:pause_primary",
                    needs=("pause", "primary")),
        NemesisKind(name="failover",
                    description="the service fails over on demand: Sentinel promotes a "
                                "replica, Postgres terminates the lock holders' sessions",
                    build="lockcheck.nemesis.failover:failover", needs=("failover",)),
        NemesisKind(name="client-pause",
                    description="SIGSTOP a client worker while it holds a lock, for "
                                "--pause-ms (default 2x TTL): a GC pause of the holder",
                    build="lockcheck.nemesis.client_pause:client_pause"),
    ]
}

NEED_WORDS = {"kill": "servers that can be killed and restarted",
              "pause": "servers that can be paused",
              "primary": "a service that names its primary or leader",
              "failover": "a service that can fail over on demand",
              "logs": "server log files"}


def parse_nemesis(text: str) -> tuple[str, ...]:
    """`--nemesis` as given: "none", one name, or a comma-separated list."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    if not parts:
        raise BadInput("--nemesis is empty; use none, one of "
                       f"{', '.join(NEMESES)}, or a comma-separated list")
    for p in parts:
        if p != "none" and p not in NEMESES:
            raise BadInput(f"unknown nemesis {p!r}; choose from none, {', '.join(NEMESES)}")
    if "none" in parts and len(parts) > 1:
        raise BadInput("--nemesis none cannot be combined with other faults")
    return () if parts == ("none",) else parts


def check_supported(names: Sequence[str], db: object, backend: str) -> None:
    """Refuse a nemesis the backend cannot take, before anything starts."""
    for n in names:
        missing = NEMESES[n].missing(db)
        if missing:
            raise BadInput(f"--nemesis {n} needs {NEED_WORDS[missing[0]]}; backend "
                           f"{backend} has none (see: lockcheck backends)")


def supported(db: object) -> list[str]:
    return [k.name for k in NEMESES.values() if not k.missing(db)]
