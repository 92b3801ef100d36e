"""A test is plain data: every option of one run, as written to test.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from lockcheck.errors import BadInput

RESOURCES = ("fenced", "unfenced")
# which servers a kill hits, as Jepsen's target specs (nemesis/process.py)
KILL_TARGETS = ("one-or-minority", "one", "minority", "majority", "all")
PAUSE_AT = ("section", "release")  # where client-pause stops a holder


@dataclass(frozen=True, kw_only=True)
class TestSpec:
    __test__: ClassVar[bool] = False  # not a pytest test class, despite the name

    backend: str = "redis"
    workload: str = "mutex"
    nemesis: tuple[str, ...] = ("partition",)
    provider: str = "local"
    nodes: int = 1
    concurrency: int = 5
    keys: int = 3
    time_limit: float = 30.0
    ttl_ms: int = 1000
    hold_ms: tuple[int, int] = (50, 500)
    nemesis_interval: float = 3.0
    restart_delay: float = 0.1
    kill_targets: str = "one-or-minority"
    pause_ms: int | None = None  # client-pause: default 2x TTL
    pause_at: str = "section"
    quiet: float = 5.0  # final phase with every fault healed
    recover_s: float | None = None  # final check that every lock can be taken again
    resource: str = "fenced"
    seed: int = 0
    op_timeout_ms: int | None = None  # default: TTL/4
    clock_drift: float = 0.01
    results_dir: str = "results"
    leave_running: bool = False
    subnet: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        workload = self.workload + ("-unfenced" if self.resource == "unfenced" else "")
        return f"{self.backend}-{workload}-{'+'.join(self.nemesis) or 'none'}"

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
    from lockcheck.backends import backend
    from lockcheck.cluster.providers import provider
    from lockcheck.nemesis.registry import NEMESES
    from lockcheck.workloads.registry import workload

    b = backend(spec.backend)
    w = workload(spec.workload)
    prov = provider(spec.provider)
    for n in spec.nemesis:
        if n not in NEMESES:
            raise BadInput(f"unknown nemesis {n!r}; choose from none, {', '.join(NEMESES)}")
    if spec.resource not in w.resources:
        raise BadInput(f"unknown resource mode {spec.resource!r} for the {w.name} workload; "
                       f"choose {' or '.join(w.resources)}")
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
    if spec.kill_targets not in KILL_TARGETS:
        raise BadInput(f"unknown --kill-targets {spec.kill_targets!r}; choose from "
                       f"{', '.join(KILL_TARGETS)}")
    if spec.restart_delay < 0:
        raise BadInput("--restart-delay-ms must not be negative")
    if spec.nodes > prov.max_nodes:
        raise BadInput(f"--nodes must be at most {prov.max_nodes}")
    if spec.concurrency > prov.max_clients:
        raise BadInput(f"--concurrency must be at most {prov.max_clients}")
    if spec.nodes < b.min_nodes:
        raise BadInput(f"backend {b.name} needs --nodes {b.min_nodes} or more")
    if b.max_nodes is not None and spec.nodes > b.max_nodes:
        raise BadInput(f"backend {b.name} runs on at most {b.max_nodes} nodes")
    return spec
