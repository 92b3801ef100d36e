"""Nemeses by name, what each needs from the backend, and how it is built.

Adding a fault is a module with a factory `(RunContext) -> Nemesis` and an entry here.
A nemesis that needs a database capability the backend lacks (kill, pause, primary,
clock) is refused before the run starts, with one line. A fault that must be in place
before the clients connect (a proxy in the path, a fake clock under the workers) names
a `prepare` step, run once per run before the workers start (`nemesis/api.py:Prepared`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockcheck.cluster.api import CAPABILITIES, Clock
from lockcheck.errors import BadInput
from lockcheck.nemesis.api import Nemesis, RunContext
from lockcheck.registry import load

if TYPE_CHECKING:
    from lockcheck.spec import TestSpec


@dataclass(frozen=True, kw_only=True)
class NemesisKind:
    name: str
    description: str
    build: str  # "module:factory", called as factory(RunContext) -> Nemesis
    needs: tuple[str, ...] = ()  # database capabilities (cluster.api.CAPABILITIES)
    # a clock fault: needs the "clock" capability unless only clients are targeted
    clock: bool = False
    # "module:function", called as function(PrepareContext) -> Prepared before the
    # workers start; kinds that name the same step share it
    prepare: str | None = None
    min_nodes: int = 1
    min_nodes_why: str = ""
    # acts on ops the moment they arrive (a client pause aims at a holder, even one that
    # is releasing right now): the intake then delivers each op at once instead of
    # gathering a wake-up's worth (lockcheck/intake.py)
    prompt: bool = False
    # a fault aimed the way a published scenario aims it: what it is expected to show
    shows: str = ""

    def make(self, ctx: RunContext) -> Nemesis:
        nem: Nemesis = load(self.build)(ctx)
        return nem

    def needs_for(self, spec: TestSpec | None = None) -> tuple[str, ...]:
        if self.clock and "clock" not in self.needs and \
                (spec is None or spec.clock_targets != "clients"):
            return (*self.needs, "clock")
        return self.needs

    def missing(self, db: object, spec: TestSpec | None = None) -> list[str]:
        return [c for c in self.needs_for(spec) if not isinstance(db, CAPABILITIES[c])]


_PARTITION = "lockcheck.nemesis.partition:"
_CLOCK = "lockcheck.nemesis.clock:"


def _clock_kind(name: str, description: str, factory: str) -> NemesisKind:
    return NemesisKind(name=name, description=description, build=_CLOCK + factory,
                       clock=True, prepare=_CLOCK + "prepare")


NEMESES: dict[str, NemesisKind] = {
    k.name: k
    for k in [
        NemesisKind(name="partition",
                    description="random halves of the nodes, or one node isolated; each "
                                "client goes with one side",
                    build=_PARTITION + "partition"),
        NemesisKind(name="partition-one",
                    description="one node isolated from the other nodes; each client goes "
                                "with one side",
                    build=_PARTITION + "partition_one"),
        NemesisKind(name="partition-majority",
                    description="a random minority of the nodes cut from the majority; "
                                "each client goes with one side",
                    build=_PARTITION + "partition_majority"),
        NemesisKind(name="partition-halves",
                    description="random halves of the nodes; each client goes with one side",
                    build=_PARTITION + "partition_halves"),
        NemesisKind(name="partition-ring",
                    description="every node sees a majority, no two the same one (a ring); "
                                "each client sees what a random node sees",
                    build=_PARTITION + "partition_ring", min_nodes=4,
                    min_nodes_why="with 3, no two nodes can see different majorities"),
        NemesisKind(name="partition-bridge",
                    description="two halves that cannot talk and one node that sees both; "
                                "each client goes with one half",
                    build=_PARTITION + "partition_bridge", min_nodes=3,
                    min_nodes_why="two halves and a node between them"),
        NemesisKind(name="partition-clients",
                    description="each client cut from a random subset of the nodes; the "
                                "nodes keep their links (Redlock's masters never talk)",
                    build=_PARTITION + "partition_clients"),
        NemesisKind(name="partition-holder",
                    description="a lock holder's client, with the member its session is on "
                                "(ZooKeeper), cut from every other node and client, as it "
                                "enters its critical section: its session expires on the "
                                "quorum side while it holds on",
                    build="lockcheck.nemesis.holder_partition:partition_holder",
                    shows="a holder cut off keeps working while the quorum grants its lock "
                          "to a rival (zookeeper-lost-only: mutual-exclusion invalid; "
                          "zookeeper, which stops on a suspended session: valid)"),
        NemesisKind(name="kill",
                    description="SIGKILL the server on one node or a minority; restart it "
                                "--restart-delay-ms later",
                    build="lockcheck.nemesis.process:kill", needs=("kill",)),
        NemesisKind(name="outage",
                    description="the whole lock service gone: SIGKILL every server, and "
                                "restart them all after the fault's duration or two TTLs, "
                                "whichever is longer",
                    build="lockcheck.nemesis.process:outage", needs=("kill",),
                    shows="no critical section may start while every server is down: a "
                          "client that proceeds without a grant is flagged (outage: "
                          "invalid); what the clients did (failed fast, timed out, "
                          "blocked) in the outage checker"),
        NemesisKind(name="pause",
                    description="SIGSTOP the server on one node or a minority; SIGCONT "
                                "--nemesis-interval later",
                    build="lockcheck.nemesis.process:pause", needs=("pause",)),
        NemesisKind(name="partition-primary",
                    description="isolate the current primary or leader (as the service "
                                "names it) from the other nodes; clients go with either side",
                    build=_PARTITION + "partition_primary", needs=("primary",)),
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
                    build="lockcheck.nemesis.client_pause:client_pause", prompt=True),
        _clock_kind("clock-skew", "the clocks of one or a minority of the targets set off "
                    "by a random offset of up to --clock-offset-ms, either way",
                    "clock_skew"),
        _clock_kind("clock-bump", "the clocks of one or a minority of the targets jump "
                    "--clock-offset-ms forward (keys with a shorter TTL expire at once)",
                    "clock_bump"),
        _clock_kind("clock-rate", "the clocks of one or a minority of the targets run "
                    "--clock-rate times as fast (their TTLs expire early)", "clock_rate"),
        _clock_kind("clock-strobe", "the clocks of one or a minority of the targets jump "
                    "--clock-offset-ms forward and back every --clock-period-ms",
                    "clock_strobe"),
        NemesisKind(name="loss",
                    description="drop --loss-probability of the packets between one or a "
                                "minority of the nodes and every other host",
                    build="lockcheck.nemesis.loss:loss"),
        NemesisKind(name="delay",
                    description="add --delay-ms to every round trip between the clients "
                                "and one or a minority of the nodes (a TCP proxy that is "
                                "always in the path)",
                    build="lockcheck.nemesis.delay:delay",
                    prepare="lockcheck.nemesis.delay:prepare"),
        NemesisKind(name="pause-primary-until-promotion",
                    description="SIGSTOP the current primary; SIGCONT the moment a Sentinel "
                                "starts promoting a replica (at most --nemesis-duration, "
                                "default the larger of --nemesis-interval and 10 s)",
                    build="lockcheck.nemesis.promotion_pause:pause_until_promotion",
                    needs=("pause", "primary", "sentinel-events"),
                    shows="the old primary, resumed as its replica is promoted, grants "
                          "locks the new primary grants again (redis-sentinel: "
                          "mutual-exclusion invalid; redis-sentinel-wait: valid)"),
        # faults aimed the way the published scenarios aim them
        NemesisKind(name="bridge-clock",
                    description="partition-bridge with one client alone on one side; the "
                                "clock of the master both sides share jumps "
                                "--clock-offset-ms forward just after it granted that "
                                "client a lock",
                    build="lockcheck.nemesis.bridge_clock:bridge_clock", needs=("clock",),
                    clock=True, min_nodes=3,
                    min_nodes_why="two groups of masters and one they share", prompt=True,
                    shows="Kleppmann's Redlock clock scenario: a client of the other group "
                          "is granted the lock while the holder's validity still runs "
                          "(redlock: lease-safety and mutual-exclusion invalid)"),
        NemesisKind(name="pause-past-lease",
                    description="SIGSTOP a client worker just after it is granted a lock, "
                                "until its lease ran out and a rival was granted it (at "
                                "most --pause-ms, default 4x TTL plus the longest section)",
                    build="lockcheck.nemesis.pause_past_lease:pause_past_lease",
                    prompt=True,
                    shows="Jepsen's etcd lock-set: the woken holder writes over the "
                          "rival's update (etcd --workload lock-set: lock-set invalid, "
                          "a lost update)"),
        NemesisKind(name="reply-loss",
                    description="the reply of a chosen op (--reply-op acquire, renew or "
                                "release; --reply-client) is withheld for --reply-hold-ms "
                                "(default 3x the op timeout) after its request reached the "
                                "server and was applied",
                    build="lockcheck.nemesis.reply_loss:reply_loss", prompt=True),
    ]
}

NEED_WORDS = {"kill": "servers that can be killed and restarted",
              "pause": "servers that can be paused",
              "primary": "a service that names its primary or leader",
              "failover": "a service that can fail over on demand",
              "sentinel-events": "Sentinels that publish a failover's steps",
              "clock": "servers whose clock lockcheck can set per process (libfaketime; "
                       "Go's etcd and the JVM's ZooKeeper read the clock themselves)",
              "logs": "server log files"}
NEED_HINTS = {"clock": "; --clock-targets clients fakes only the clients' clocks"}


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


def check_supported(names: Sequence[str], db: object, backend: str,
                    spec: TestSpec | None = None) -> None:
    """Refuse a nemesis the backend cannot take, before anything starts."""
    for n in names:
        missing = NEMESES[n].missing(db, spec)
        # a database may leave a capability out on purpose and say why (Azurite's
        # restarts are not Azure's): that reason is the refusal
        why = getattr(db, "refused_faults", {}).get(missing[0]) if missing else None
        if why:
            raise BadInput(f"--nemesis {n}: backend {backend} refuses it: {why}")
        if missing:
            raise BadInput(f"--nemesis {n} needs {NEED_WORDS[missing[0]]}; backend "
                           f"{backend} has none (see: lockcheck backends)"
                           + NEED_HINTS.get(missing[0], ""))


def prepare_db(names: Sequence[str], db: object, spec: TestSpec) -> None:
    """Before the servers start: what the chosen faults need them to run under."""
    if any("clock" in NEMESES[n].needs_for(spec) for n in names):
        assert isinstance(db, Clock)
        db.fake_clock()


def prepare_steps(names: Sequence[str]) -> list[str]:
    """The distinct prepare steps of the chosen faults, in the order given."""
    steps: list[str] = []
    for n in names:
        p = NEMESES[n].prepare
        if p is not None and p not in steps:
            steps.append(p)
    return steps


def supported(db: object) -> list[str]:
    return [k.name for k in NEMESES.values() if not k.missing(db)]
