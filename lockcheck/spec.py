"""A test is plain data: every option of one run, as written to test.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from lockcheck.errors import BadInput

# which servers a kill hits, as Jepsen's target specs (nemesis/process.py)
KILL_TARGETS = ("one-or-minority", "one", "minority", "majority", "all", "holder-quorum")
PAUSE_AT = ("section", "release", "acquire")  # where client-pause stops a client
NEMESIS_MODES = ("one", "all")  # a random one of the faults each interval, or all together
CLOCK_TARGETS = ("nodes", "clients", "all")
MAX_DELAY_MS = 10_000
DEFAULT_TTL_MS = 1000  # the TTL of a backend without a minimum of its own


class TTLNotGiven(int):
    """The TTL of a spec whose --ttl-ms was not given: DEFAULT_TTL_MS until `validate`
    replaces it with the backend's default (its minimum TTL, where it has one)."""


TTL_NOT_GIVEN = TTLNotGiven(DEFAULT_TTL_MS)


@dataclass(frozen=True, kw_only=True)
class TestSpec:
    __test__: ClassVar[bool] = False  # not a pytest test class, despite the name

    backend: str = "redis"
    # a lock client run against the backend's servers instead of its own: a shipped
    # adapter's name or "module:factory" (lockcheck/clients.py)
    client: str | None = None
    # the server the backend runs instead of its own (`--server valkey` for the Redis
    # backends: `Backend.alternatives`); None: its own
    server: str | None = None
    workload: str = "mutex"
    nemesis: tuple[str, ...] = ("partition",)
    provider: str = "local"
    # the provider's own options: nodes_file, accept_new_host_keys (ssh), image (docker)
    provider_options: dict[str, Any] = field(default_factory=dict)
    nodes: int = 1
    concurrency: int = 5
    keys: int = 3
    time_limit: float = 30.0
    ttl_ms: int = TTL_NOT_GIVEN  # not given: `validate` makes it the backend's default
    hold_ms: tuple[int, int] = (50, 500)  # bounds of the critical-section time
    hold_dist: str | None = None  # a long-tail distribution (workloads/hold.py), or uniform
    nemesis_interval: float = 3.0
    nemesis_duration: float | None = None  # how long a fault lasts; default the interval
    nemesis_mode: str = "one"
    restart_delay: float = 0.1
    kill_targets: str = "one-or-minority"
    pause_ms: int | None = None  # client-pause: default 2x TTL
    pause_at: str = "section"
    clock_offset_ms: int | None = None  # clock-skew/bump/strobe: default 2x TTL
    clock_rate: float = 4.0  # clock-rate: how many times faster the clock runs
    clock_period_ms: int | None = None  # clock-strobe: default max(50, TTL/4)
    clock_targets: str = "nodes"
    loss_probability: float = 0.3  # loss: share of packets dropped on a lossy link
    delay_ms: int = 100  # delay: added to every round trip through a delayed node
    # reply-loss: whose op's replies are withheld, whose, and for how long
    reply_op: str = "release"
    reply_client: str = "all"  # "all" or a client name (c0, c1, ...)
    reply_hold_ms: int | None = None  # default: 3x the op timeout
    quiet: float = 5.0  # final phase with every fault healed
    recover_s: float | None = None  # final check that every lock can be taken again
    resource: str = "fenced"
    # transfer: locks taken per operation, in which order, how long each acquire may
    # block (None: 3x TTL; 0: no limit), one coarse lock or the fine ones
    lock_order: str = "sorted"
    locks_per_op: int = 2
    wait_ms: int | None = None
    lock_scope: str = "fine"
    seed: int = 0
    op_timeout_ms: int | None = None  # default: TTL/4
    clock_drift: float = 0.01
    results_dir: str = "results"
    leave_running: bool = False
    report: bool = True  # report.html at the end (`lockcheck check` writes it later)
    subnet: str | None = None

    @property
    def name(self) -> str:
        return "-".join(self.run_path)

    @property
    def run_path(self) -> tuple[str, str, str]:
        """Where its runs go under the results folder: backend (with the server when
        another was chosen, and the client when one was brought), workload, nemesis
        (no ambiguity when a name has a dash)."""
        # the resource modes a run's folder shows
        named = ("unfenced", "etcd-txn", "consul-txn", "azure-blob", "row-lock", "version")
        workload = self.workload + (f"-{self.resource}" if self.resource in named else "")
        backend = self.backend
        if self.server is not None:
            backend += f"@{self.server}"
        if self.client is not None:
            from lockcheck.clients import client_label

            backend += f"+{client_label(self.client)}"
        return backend, workload, "+".join(self.nemesis) or "none"

    @property
    def fault_duration(self) -> float:
        """How long a partition, pause, clock, loss or delay fault lasts."""
        if self.nemesis_duration is not None:
            return self.nemesis_duration
        return self.nemesis_interval

    @property
    def clock_offset(self) -> int:
        return self.clock_offset_ms if self.clock_offset_ms is not None else 2 * self.ttl_ms

    @property
    def clock_period(self) -> int:
        if self.clock_period_ms is not None:
            return self.clock_period_ms
        return max(50, self.ttl_ms // 4)

    @property
    def op_timeout_s(self) -> float:
        ms = self.op_timeout_ms if self.op_timeout_ms is not None else max(50, self.ttl_ms // 4)
        return ms / 1000.0

    @property
    def recover_timeout_s(self) -> float:
        """Long enough for every lease a killed worker left behind to expire."""
        if self.recover_s is not None:
            return self.recover_s
        return max(10.0, 3 * self.ttl_ms / 1000.0)

    @property
    def process_stride(self) -> int:
        """Worker w runs as processes w, w + stride, ...; the recovery worker is the
        extra one (index `concurrency`)."""
        return self.concurrency + 1

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["name"] = self.name
        return d


def parse_range_ms(text: str, option: str) -> tuple[int, int]:
    try:
        if "-" in text:
            lo_s, hi_s = text.split("-", 1)
            lo, hi = int(lo_s), int(hi_s)
        else:
            lo = hi = int(text)
    except ValueError:
        raise BadInput(f"{option} must be milliseconds like 200 or 50-500, got {text!r}") from None
    if lo < 0 or hi < lo:
        raise BadInput(f"{option} range {text!r} is empty or negative")
    return lo, hi


def validate(spec: TestSpec) -> TestSpec:
    """Refuse a spec that cannot run, with one line naming the option."""
    from lockcheck.backends import BACKENDS, backend
    from lockcheck.cluster.providers import provider
    from lockcheck.nemesis.registry import NEMESES
    from lockcheck.workloads.registry import workload

    b = backend(spec.backend)
    spec = resolve_ttl(spec, b.name, b.min_ttl_ms)
    if b.choose_server(spec.server) is None and spec.server is not None:
        spec = replace(spec, server=None)  # the backend's own, named
    w = workload(spec.workload)
    prov = provider(spec.provider)
    for n in spec.nemesis:
        if n not in NEMESES:
            raise BadInput(f"unknown nemesis {n!r}; choose from none, {', '.join(NEMESES)}")
    if spec.resource not in w.resources:
        raise BadInput(f"unknown resource mode {spec.resource!r} for the {w.name} workload; "
                       f"choose {' or '.join(w.resources)}")
    family = w.resource_families.get(spec.resource)
    if family is not None and b.family != family:
        raise BadInput(f"--resource {spec.resource} keeps its data in {family} itself: it "
                       f"needs a backend of the {family} family, not {b.name}")
    for name, v in (("--concurrency", spec.concurrency), ("--keys", spec.keys),
                    ("--nodes", spec.nodes), ("--ttl-ms", spec.ttl_ms)):
        if v < 1:
            raise BadInput(f"{name} must be at least 1")
    if spec.time_limit <= 0:
        raise BadInput("--time-limit must be positive")
    if spec.nemesis_interval <= 0:
        raise BadInput("--nemesis-interval must be positive")
    if spec.pause_ms is not None and spec.pause_ms < 1:
        raise BadInput("--pause-ms must be at least 1")
    if spec.pause_at not in PAUSE_AT:
        raise BadInput(f"unknown --pause-at {spec.pause_at!r}; choose from {', '.join(PAUSE_AT)}")
    if spec.pause_at == "acquire" and "client-pause" in spec.nemesis \
            and not b.stops_at_reply:
        able = ", ".join(n for n, x in BACKENDS.items() if x.stops_at_reply)
        raise BadInput(f"--pause-at acquire needs a client that can stop with a grant's "
                       f"replies unread; backend {b.name} cannot (these can: {able})")
    if spec.kill_targets not in KILL_TARGETS:
        raise BadInput(f"unknown --kill-targets {spec.kill_targets!r}; choose from "
                       f"{', '.join(KILL_TARGETS)}")
    validate_faults(spec)
    if spec.restart_delay < 0:
        raise BadInput("--restart-delay-ms must not be negative")
    if spec.nodes > prov.max_nodes:
        raise BadInput(f"--nodes must be at most {prov.max_nodes}")
    if spec.concurrency > prov.max_clients:
        raise BadInput(f"--concurrency must be at most {prov.max_clients}")
    for n in spec.nemesis:
        need = NEMESES[n].min_nodes
        if spec.nodes < need:
            raise BadInput(f"--nemesis {n} needs --nodes {need} or more "
                           f"({NEMESES[n].min_nodes_why})")
    if spec.nodes < b.min_nodes:
        raise BadInput(f"backend {b.name} needs --nodes {b.min_nodes} or more")
    if b.max_nodes is not None and spec.nodes > b.max_nodes:
        raise BadInput(f"backend {b.name} runs on at most {b.max_nodes} nodes")
    if spec.client is not None:
        from lockcheck.clients import resolve_client

        resolve_client(spec.client, b.name)
    return spec


def resolve_ttl(spec: TestSpec, backend: str, min_ttl_ms: int | None) -> TestSpec:
    """The TTL a run uses: the one given, unless it is below what the backend's service
    grants (refused with one line), or the backend's default when none was given."""
    if isinstance(spec.ttl_ms, TTLNotGiven):
        return replace(spec, ttl_ms=max(DEFAULT_TTL_MS, min_ttl_ms or 0))
    if min_ttl_ms is not None and spec.ttl_ms < min_ttl_ms:
        raise BadInput(f"--ttl-ms {spec.ttl_ms} is too short for backend {backend}: its "
                       f"service grants no lease under {min_ttl_ms} ms (leave --ttl-ms "
                       f"out to run at {min_ttl_ms})")
    return spec


def validate_faults(spec: TestSpec) -> None:
    """The options of the faults and of their schedule."""
    if spec.nemesis_duration is not None and spec.nemesis_duration <= 0:
        raise BadInput("--nemesis-duration must be positive")
    if spec.nemesis_mode not in NEMESIS_MODES:
        raise BadInput(f"unknown --nemesis-mode {spec.nemesis_mode!r}; choose from "
                       f"{', '.join(NEMESIS_MODES)}")
    if spec.clock_targets not in CLOCK_TARGETS:
        raise BadInput(f"unknown --clock-targets {spec.clock_targets!r}; choose from "
                       f"{', '.join(CLOCK_TARGETS)}")
    if spec.clock_offset_ms is not None and spec.clock_offset_ms < 1:
        raise BadInput("--clock-offset-ms must be at least 1")
    if spec.clock_period_ms is not None and spec.clock_period_ms < 10:
        raise BadInput("--clock-period-ms must be at least 10")
    if not 0 < spec.clock_rate <= 100 or spec.clock_rate == 1:
        raise BadInput("--clock-rate must be above 0, at most 100, and not 1 "
                       f"(got {spec.clock_rate:g})")
    if not 0 < spec.loss_probability <= 1:
        raise BadInput("--loss-probability must be above 0 and at most 1 "
                       f"(got {spec.loss_probability:g})")
    if not 1 <= spec.delay_ms <= MAX_DELAY_MS:
        raise BadInput(f"--delay-ms must be between 1 and {MAX_DELAY_MS}")
    from lockcheck.nemesis.reply_loss import validate as validate_reply_loss

    validate_reply_loss(spec)
