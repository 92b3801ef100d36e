"""lockcheck.spec: a test as plain data, and the parsing/validation of its options."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockcheck import spec as spec_mod
from lockcheck.backends import BACKENDS
from lockcheck.errors import BadInput
from lockcheck.nemesis.registry import NEMESES, parse_nemesis
from lockcheck.spec import parse_range_ms, validate
from lockcheck.workloads.registry import WORKLOADS

Spec = spec_mod.TestSpec  # not imported by its name: pytest would try to collect "Test*"


def test_defaults_and_name() -> None:
    s = Spec()
    assert (s.backend, s.workload, s.nemesis, s.nodes) == ("redis", "mutex", ("partition",), 1)
    assert s.name == "redis-mutex-partition"
    assert Spec(workload="fenced", nemesis=("kill", "pause")).name == "redis-fenced-kill+pause"
    assert Spec(nemesis=()).name == "redis-mutex-none"
    assert Spec(workload="fenced", resource="unfenced", nemesis=("kill",)).name == \
        "redis-fenced-unfenced-kill"


def test_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Spec().nodes = 3  # type: ignore[misc]


@pytest.mark.parametrize(("ttl_ms", "op_timeout_ms", "expected"), [
    (1000, None, 0.25), (100, None, 0.05), (40, None, 0.05), (8000, None, 2.0),
    (1000, 700, 0.7),
])
def test_op_timeout(ttl_ms: int, op_timeout_ms: int | None, expected: float) -> None:
    assert Spec(ttl_ms=ttl_ms, op_timeout_ms=op_timeout_ms).op_timeout_s == expected


def test_to_json_is_plain_json_with_the_name() -> None:
    d = Spec(nemesis=("kill",), hold_ms=(0, 0), seed=7).to_json()
    assert d["name"] == "redis-mutex-kill"
    assert d["seed"] == 7 and d["hold_ms"] == (0, 0)
    back = json.loads(json.dumps(d))
    assert back["nemesis"] == ["kill"] and back["hold_ms"] == [0, 0]
    assert set(back) >= {"backend", "workload", "nemesis", "nodes", "concurrency", "keys",
                         "time_limit", "ttl_ms", "hold_ms", "resource", "seed", "clock_drift"}


def test_registries_know_the_names_the_cli_offers() -> None:
    assert {"mutex", "fenced"} <= set(WORKLOADS)
    assert {"partition", "kill", "pause", "client-pause"} <= set(NEMESES)
    assert "none" not in NEMESES  # "none" is the empty list, not a fault
    assert "redis" in BACKENDS


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_backend_validates_with_its_default_nodes(name: str) -> None:
    b = BACKENDS[name]
    assert validate(Spec(backend=name, nodes=b.default_nodes)).backend == name


# -- --nemesis -------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("none", ()), (" none ", ()), ("kill", ("kill",)), ("client-pause", ("client-pause",)),
    ("partition,kill", ("partition", "kill")),
    (" pause , kill ,", ("pause", "kill")), ("kill,kill", ("kill", "kill")),
])
def test_parse_nemesis(text: str, expected: tuple[str, ...]) -> None:
    assert parse_nemesis(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "--nemesis is empty"), (" , ", "--nemesis is empty"),
    ("chaos", "unknown nemesis 'chaos'"), ("kill,Kill", "unknown nemesis 'Kill'"),
    ("none,kill", "cannot be combined"),
])
def test_parse_nemesis_rejects(text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        parse_nemesis(text)


# -- --hold-ms and other ranges ----------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("0", (0, 0)), ("200", (200, 200)), ("50-500", (50, 500)), (" 5 - 7 ", (5, 7)),
    ("10-10", (10, 10)),
])
def test_parse_range_ms(text: str, expected: tuple[int, int]) -> None:
    assert parse_range_ms(text, "--hold-ms") == expected


@pytest.mark.parametrize("text", ["", "abc", "1.5", "5-", "-5", "1-2-3", "500-50", "x-1"])
def test_parse_range_ms_rejects_with_the_option_name(text: str) -> None:
    with pytest.raises(BadInput) as ei:
        parse_range_ms(text, "--hold-ms")
    assert "--hold-ms" in str(ei.value) and repr(text) in str(ei.value)


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_parse_range_ms_property(a: int, b: int) -> None:
    lo, hi = min(a, b), max(a, b)
    assert parse_range_ms(f"{lo}-{hi}", "--x") == (lo, hi)
    assert parse_range_ms(str(a), "--x") == (a, a)


# -- validate --------------------------------------------------------------------------


def test_validate_returns_the_spec() -> None:
    s = Spec(workload="fenced", resource="unfenced", nemesis=(), ttl_ms=1000)
    assert validate(s) is s


def test_a_ttl_not_given_is_the_backends_own_default() -> None:
    """1000 ms, or the shortest lease the backend's service grants; a shorter TTL given
    on such a backend is refused in one line."""
    from lockcheck.spec import DEFAULT_TTL_MS, TTLNotGiven

    for name, b in BACKENDS.items():
        ttl = validate(Spec(backend=name, nemesis=(), nodes=b.default_nodes)).ttl_ms
        assert ttl == max(DEFAULT_TTL_MS, b.min_ttl_ms or 0), name
        assert not isinstance(ttl, TTLNotGiven), name
    floor = next(b for b in BACKENDS.values() if b.min_ttl_ms)
    assert floor.min_ttl_ms is not None
    with pytest.raises(BadInput, match=f"--ttl-ms 1000 is too short for backend {floor.name}"):
        validate(Spec(backend=floor.name, nemesis=(), nodes=floor.default_nodes, ttl_ms=1000))
    assert validate(Spec(backend=floor.name, nemesis=(), nodes=floor.default_nodes,
                         ttl_ms=floor.min_ttl_ms)).ttl_ms == floor.min_ttl_ms


@pytest.mark.parametrize(("changes", "message"), [
    ({"backend": "zookeper"}, "unknown backend 'zookeper'"),
    ({"nemesis": ("chaos",)}, "unknown nemesis 'chaos'"),
    ({"provider": "cloud"}, "unknown provider 'cloud'"),
    ({"pause_ms": 0}, "--pause-ms must be at least 1"),
    ({"restart_delay": -0.1}, "--restart-delay-ms must not be negative"),
    ({"workload": "queue"}, "unknown workload 'queue'"),
    ({"resource": "sometimes"}, "unknown resource mode 'sometimes'"),
    ({"concurrency": 0}, "--concurrency must be at least 1"),
    ({"keys": 0}, "--keys must be at least 1"),
    ({"nodes": 0}, "--nodes must be at least 1"),
    ({"ttl_ms": 0}, "--ttl-ms must be at least 1"),
    ({"time_limit": 0}, "--time-limit must be positive"),
    ({"time_limit": -1.0}, "--time-limit must be positive"),
    ({"nemesis_interval": 0}, "--nemesis-interval must be positive"),
])
def test_validate_rejects(changes: dict[str, object], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        validate(Spec(**changes))  # type: ignore[arg-type]
