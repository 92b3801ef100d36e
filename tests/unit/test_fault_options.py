"""The options of the faults and of their schedule, without a cluster: bad input is one
line and 254 before anything starts; a fault the backend cannot take is refused through
the capability check; --hold-ms distributions draw what they say."""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from lockcheck import exitcodes
from lockcheck.cluster.api import Clock
from lockcheck.db.redis import RedisDB
from lockcheck.errors import BadInput
from lockcheck.nemesis.registry import (
    NEMESES,
    check_supported,
    prepare_db,
    prepare_steps,
    supported,
)
from lockcheck.spec import TestSpec
from lockcheck.workloads.hold import parse_hold, sampler
from tests.unit.test_cli import one_error_line, run


@pytest.mark.parametrize(("args", "message"), [
    (["--nemesis-mode", "some"], "unknown --nemesis-mode 'some'; choose from one, all"),
    (["--nemesis-duration", "0"], "--nemesis-duration must be positive"),
    (["--clock-rate", "1"], "--clock-rate must be above 0, at most 100, and not 1"),
    (["--clock-rate", "-2"], "--clock-rate must be above 0"),
    (["--clock-targets", "servers"], "unknown --clock-targets 'servers'"),
    (["--clock-offset-ms", "0"], "--clock-offset-ms must be at least 1"),
    (["--clock-period-ms", "5"], "--clock-period-ms must be at least 10"),
    (["--loss-probability", "0"], "--loss-probability must be above 0 and at most 1"),
    (["--loss-probability", "1.5"], "--loss-probability must be above 0 and at most 1"),
    (["--delay-ms", "0"], "--delay-ms must be between 1 and 10000"),
    (["--nemesis", "partition-ring", "--nodes", "3"],
     "--nemesis partition-ring needs --nodes 4 or more"),
    (["--nemesis", "partition-bridge", "--nodes", "2"],
     "--nemesis partition-bridge needs --nodes 3 or more"),
    (["--hold-ms", "lognormal:200"], "--hold-ms must be milliseconds like 200"),
    (["--hold-ms", "lognormal:0:1"], "every number must be positive"),
    (["--hold-ms", "pareto:100:1.5:50"], "the cap is below the minimum"),
    (["--hold-ms", "zipf:1:2"], "--hold-ms must be milliseconds like 200"),
    (["--workload", "lock-set", "--nemesis", "partition-ring,nope"], "unknown nemesis 'nope'"),
])
def test_bad_fault_options_are_one_line_and_254(tmp_path: Path, args: list[str],
                                                message: str) -> None:
    results = tmp_path / "results"
    r = run("test", *args, "--results-dir", results)
    assert r.exit_code == exitcodes.BAD_INPUT, r.output
    assert message in one_error_line(r)
    assert not results.exists()


class ServersThatReadTheirOwnClock:
    """A database without the Clock capability (as etcd and ZooKeeper are)."""

    def kill(self, node: str) -> None: ...
    def start(self, node: str) -> None: ...
    def alive(self, node: str) -> bool:
        return True


@pytest.mark.parametrize("fault", ["clock-skew", "clock-bump", "clock-rate", "clock-strobe"])
def test_a_clock_fault_on_servers_that_ignore_libfaketime_is_refused(fault: str) -> None:
    db = ServersThatReadTheirOwnClock()
    assert not isinstance(db, Clock)
    with pytest.raises(BadInput) as e:
        check_supported([fault], db, "etcd", TestSpec())
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"--nemesis {fault} needs servers whose clock lockcheck can set")
    assert "Go's etcd and the JVM's ZooKeeper read the clock themselves" in msg
    assert "backend etcd has none" in msg
    # only the clients' clocks: no server clock needed, nothing refused
    check_supported([fault], db, "etcd", TestSpec(clock_targets="clients"))


def test_redis_offers_the_clock_and_starts_under_it_only_when_asked() -> None:
    db = RedisDB(TestSpec())
    assert isinstance(db, Clock)
    assert {"clock-skew", "clock-bump", "clock-rate", "clock-strobe"} <= set(supported(db))
    assert set(supported(ServersThatReadTheirOwnClock())).isdisjoint(
        {"clock-skew", "clock-bump", "clock-rate", "clock-strobe"})
    prepare_db(["partition", "kill"], db, TestSpec())
    assert db.faking is False
    with pytest.raises(RuntimeError, match="not started under a fake clock"):
        db.set_clock("n1", 10)
    prepare_db(["clock-bump"], db, TestSpec(clock_targets="clients"))
    assert db.faking is False, "client clocks only: the servers run as usual"
    prepare_db(["partition", "clock-bump"], db, TestSpec())
    assert db.faking is True


def test_only_faults_aimed_at_a_holder_need_ops_the_moment_they_arrive() -> None:
    assert [k.name for k in NEMESES.values() if k.prompt] == [
        "client-pause", "bridge-clock", "pause-past-lease", "reply-loss"]


def test_prepare_steps_are_shared_and_in_order() -> None:
    assert prepare_steps(["clock-bump", "partition", "delay", "clock-rate"]) == [
        "lockcheck.nemesis.clock:prepare", "lockcheck.nemesis.delay:prepare"]
    assert prepare_steps(["partition", "kill"]) == []


def test_every_fault_is_documented_in_the_history_format() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "history-format.md").read_text()
    for name in NEMESES:
        assert f"`{name}`" in doc, f"{name} is missing from docs/history-format.md"


def test_fault_duration_defaults_to_the_interval() -> None:
    assert TestSpec(nemesis_interval=2.5).fault_duration == 2.5
    assert TestSpec(nemesis_interval=2.5, nemesis_duration=0.5).fault_duration == 0.5
    assert TestSpec(ttl_ms=1000).clock_offset == 2000
    assert TestSpec(ttl_ms=1000).clock_period == 250
    assert TestSpec(ttl_ms=100).clock_period == 50


# -- --hold-ms ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "bounds", "dist"), [
    ("200", (200, 200), None),
    ("50-500", (50, 500), None),
    ("lognormal:200:1", (0, 4000), "lognormal:200:1:4000"),
    ("lognormal:200:2:9000", (0, 9000), "lognormal:200:2:9000"),
    ("pareto:50:1.5", (50, 1000), "pareto:50:1.5:1000"),
    ("pareto:50:1.5:5000.5", (50, 5001), "pareto:50:1.5:5000.5"),
])
def test_parse_hold(text: str, bounds: tuple[int, int], dist: str | None) -> None:
    h = parse_hold(text)
    assert (h.bounds, h.dist) == (bounds, dist)


def draws(text: str, n: int = 20000) -> list[float]:
    h = parse_hold(text)
    f = sampler(h.bounds, h.dist)
    rng = random.Random(1)
    return [f(rng) for _ in range(n)]


def test_fixed_and_uniform_draws() -> None:
    assert set(draws("200", 100)) == {200.0}
    d = draws("50-500")
    assert min(d) >= 50 and max(d) <= 500 and abs(statistics.mean(d) - 275) < 5


def test_lognormal_has_its_median_and_a_long_capped_tail() -> None:
    d = sorted(draws("lognormal:200:1"))
    assert abs(statistics.median(d) - 200) < 10
    p99 = d[int(0.99 * len(d))]
    assert 1500 < p99 < 3000, p99  # e^(2.33) = 10x the median
    assert max(d) <= 4000 and d.count(4000) > 0, "the cap is reached and holds"


def test_pareto_has_its_minimum_and_a_heavy_tail() -> None:
    d = sorted(draws("pareto:50:1.5:100000"))
    assert min(d) >= 50
    assert abs(statistics.median(d) - 50 * 2 ** (1 / 1.5)) < 3  # the median of a Pareto
    assert d[int(0.999 * len(d))] > 50 * 50, "a heavy tail"


def test_worker_config_carries_the_distribution() -> None:
    from lockcheck.workloads.worker import WorkerConfig

    cfg = WorkerConfig(worker=0, process_stride=2, backend="redis", workload="mutex",
                       client_config={}, keys=["k0"], ttl_ms=1000, hold_ms=(0, 4000),
                       seed=1, t0_ns=0, op_timeout_s=0.25, hold_dist="lognormal:200:1:4000")
    back: Any = WorkerConfig.from_json(cfg.to_json())
    assert back == cfg
