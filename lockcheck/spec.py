"""A test is plain data: every option of one run, as written to test.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from lockcheck.errors import BadInput

WORKLOADS = ("mutex", "fenced")
NEMESES = ("none", "partition", "kill", "pause")
RESOURCES = ("fenced", "unfenced")


@dataclass(frozen=True, kw_only=True)
class TestSpec:
    __test__: ClassVar[bool] = False  # not a pytest test class, despite the name

    backend: str = "redis"
    workload: str = "mutex"
    nemesis: tuple[str, ...] = ("partition",)
    nodes: int = 1
    concurrency: int = 5
    keys: int = 3
    time_limit: float = 30.0
    ttl_ms: int = 1000
    hold_ms: tuple[int, int] = (50, 500)
    nemesis_interval: float = 3.0
    restart_delay: float = 0.1
    quiet: float = 5.0  # final phase with every fault healed
    resource: str = "fenced"
    seed: int = 0
    op_timeout_ms: int | None = None  # default: TTL/4
    clock_drift: float = 0.01
    results_dir: str = "results"
    leave_running: bool = False
    subnet: str | None = None
    checkers: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        workload = self.workload + ("-unfenced" if self.resource == "unfenced" else "")
        return f"{self.backend}-{workload}-{'+'.join(self.nemesis) or 'none'}"

    @property
    def op_timeout_s(self) -> float:
        ms = self.op_timeout_ms if self.op_timeout_ms is not None else max(50, self.ttl_ms // 4)
        return ms / 1000.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["name"] = self.name
        return d


def parse_nemesis(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    if not parts:
        raise BadInput("--nemesis is empty; use none, partition, kill, pause or a comma list")
    for p in parts:
        if p not in NEMESES:
            raise BadInput(f"unknown nemesis {p!r}; choose from {', '.join(NEMESES)}")
    if "none" in parts and len(parts) > 1:
        raise BadInput("--nemesis none cannot be combined with other faults")
    return parts


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
    from lockcheck.locks.backends import BACKENDS

    if spec.backend not in BACKENDS:
        raise BadInput(f"unknown backend {spec.backend!r}; available: {', '.join(BACKENDS)}")
    if spec.workload not in WORKLOADS:
        raise BadInput(f"unknown workload {spec.workload!r}; choose from {', '.join(WORKLOADS)}")
    if spec.resource not in RESOURCES:
        raise BadInput(f"unknown resource mode {spec.resource!r}; choose fenced or unfenced")
    for name, v in (("--concurrency", spec.concurrency), ("--keys", spec.keys),
                    ("--nodes", spec.nodes), ("--ttl-ms", spec.ttl_ms)):
        if v < 1:
            raise BadInput(f"{name} must be at least 1")
    if spec.time_limit <= 0:
        raise BadInput("--time-limit must be positive")
    if spec.nemesis_interval <= 0:
        raise BadInput("--nemesis-interval must be positive")
    from lockcheck.cluster.netns import MAX_CLIENTS, MAX_NODES

    if spec.nodes > MAX_NODES:
        raise BadInput(f"--nodes must be at most {MAX_NODES}")
    if spec.concurrency > MAX_CLIENTS:
        raise BadInput(f"--concurrency must be at most {MAX_CLIENTS}")
    return spec
