"""Each nemesis does what it claims, measured with real traffic and real servers, and
heals completely: a test here fails if the fault does nothing (or too much).

One cluster for the module (tests/integration/probes.py): 5 nodes with redis-server
under a fake clock, 2 clients, and a prober in every namespace that connects, sends
UDP datagrams and times redis PINGs on request. Faults are built through the
registry, as a run builds them. benchmarks/bench_faults.py measures the same.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from lockcheck.cluster.node import pid_state
from lockcheck.nemesis.api import PrepareContext
from lockcheck.nemesis.clock import prepare as prepare_clocks
from lockcheck.nemesis.delay import prepare as prepare_delay
from tests.conftest import faked_redis_refusal, faketime_files, lockcheck_ids_on_host
from tests.integration.probes import SPEC, Rig, expiry_s, median_rtt, redis_now_ms, rig_up

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with rig_up(fake_clock=faked_redis_refusal() is None) as r:
        run_id = r.cluster.run_id
        yield r
    assert run_id not in lockcheck_ids_on_host()
    assert Rig.pids and faketime_files(Rig.pids) == [], "libfaketime's files left in /dev/shm"


def expected_links(grudge: dict[str, list[str]], hosts: list[str]) -> dict[tuple[str, str],
                                                                           bool]:
    return {(a, b): b not in grudge.get(a, []) and a not in grudge.get(b, [])
            for a in hosts for b in hosts if a != b}


def test_everyone_reaches_everyone_before(rig: Rig) -> None:
    m = rig.matrix()
    assert all(m.values()), [k for k, v in m.items() if not v]


@pytest.mark.parametrize("name", ["partition", "partition-one", "partition-majority",
                                  "partition-halves", "partition-ring", "partition-bridge",
                                  "partition-clients"])
def test_partition_cuts_exactly_its_grudge_and_heals(rig: Rig, name: str) -> None:
    nem = rig.nemesis(name)
    value = nem.start(random.Random(hash(name) % 1000))
    try:
        assert value["fault"] == name and "targets" in value and value["kind"]
        assert any(value["grudge"].values()), value
        want = expected_links(value["grudge"], [h.name for h in rig.hosts])
        got = rig.matrix()
        wrong = {k: v for k, v in got.items() if want[k] != v}
        assert not wrong, f"{name} {value['grudge']}: " + ", ".join(
            f"{a}->{b} {'passes' if ok else 'dropped'}" for (a, b), ok in sorted(wrong.items()))
    finally:
        nem.stop()
    m = rig.matrix()
    assert all(m.values()), f"{name} left cut: {[k for k, v in m.items() if not v]}"


def test_loss_drops_about_the_share_asked_for_and_only_there(rig: Rig) -> None:
    nem = rig.nemesis("loss")
    value = nem.start(random.Random(5))
    try:
        t = value["targets"][0]
        others = [h.name for h in rig.cluster.nodes if h.name not in value["targets"]]
        u, v = others[0], others[1]
        into, out_of = rig.udp_share(u, t), rig.udp_share(t, "c1")
        # 1000 datagrams, each kept with probability 0.7: 4.6 standard deviations wide
        assert 0.63 <= into <= 0.77, into
        assert 0.63 <= out_of <= 0.77, out_of
        assert rig.udp_share(u, v) >= 0.99, "a link between two healthy hosts lost packets"
    finally:
        nem.stop()
    assert rig.udp_share(u, t) >= 0.99 and rig.udp_share(t, "c1") >= 0.99


@pytest.fixture(scope="module")
def proxies(rig: Rig) -> Iterator[Any]:
    p = prepare_delay(PrepareContext(spec=SPEC, cluster=rig.cluster, db=rig.db))
    rig.ctx_prepared["lockcheck.nemesis.delay:prepare"] = p
    try:
        yield p
    finally:
        p.close()
        rig.ctx_prepared.pop("lockcheck.nemesis.delay:prepare")


def test_delay_adds_about_the_delay_asked_for_and_heals(rig: Rig, proxies: Any) -> None:
    base = {n.name: median_rtt(rig, "c0", n.name) for n in rig.cluster.nodes}
    assert max(base.values()) < 40, base  # through the proxy, with no delay
    nem = rig.nemesis("delay")
    value = nem.start(random.Random(2))
    try:
        assert value["delay_ms"] == 150
        for n in rig.cluster.nodes:
            ms = median_rtt(rig, "c1", n.name)
            if n.name in value["targets"]:
                assert 140 <= ms <= 150 + 80, (n.name, ms)
            else:
                assert ms < 60, (n.name, ms)
    finally:
        nem.stop()
    for n in rig.cluster.nodes:
        assert median_rtt(rig, "c0", n.name) < 60, n.name
    # between nodes, nothing goes through a proxy
    assert all(proxies.proxies[n.name].daemon.alive() for n in rig.cluster.nodes)


@pytest.mark.usefixtures("faked_redis")
def test_clock_rate_makes_a_redis_expire_keys_early_and_heals(rig: Rig) -> None:
    nem = rig.nemesis("clock-rate", clock_targets="nodes")
    clients = {n.name: rig.redis(n.name) for n in rig.cluster.nodes}
    for r in clients.values():
        r.set("k", "v", px=2000)
    value = nem.start(random.Random(4))
    try:
        gone = expiry_s(clients)
    finally:
        nem.stop()
    fast = value["targets"]
    assert value["rate"] == 4.0 and fast
    for name, s in gone.items():
        if name in fast:
            assert 0.3 <= s <= 0.85, (name, s)  # 2 s at 4x: 0.5 s
        else:
            assert s >= 1.8, (name, s)
    assert set(gone) == set(clients)
    for name, r in clients.items():
        assert abs(redis_now_ms(r) - time.time() * 1000) < 100, f"{name}'s clock not reset"


@pytest.mark.usefixtures("faked_redis")
def test_clock_bump_and_skew_move_a_redis_clock_and_its_ttls(rig: Rig) -> None:
    r = {n.name: rig.redis(n.name) for n in rig.cluster.nodes}
    for name in ("clock-bump", "clock-skew"):
        nem = rig.nemesis(name, clock_targets="nodes")
        for c in r.values():
            c.set("k", "v", px=5000)
        value = nem.start(random.Random(8))
        try:
            offsets = value["offsets_ms"]
            assert offsets and set(offsets) == set(value["targets"])
            for node, c in r.items():
                off = offsets.get(node, 0)
                assert abs(redis_now_ms(c) - time.time() * 1000 - off) < 100, (name, node)
                # a clock ahead shortens what is left of a TTL, one behind lengthens it
                assert abs(c.pttl("k") - (5000 - off)) < 300, (name, node, c.pttl("k"))
        finally:
            nem.stop()
        for c in r.values():
            assert abs(redis_now_ms(c) - time.time() * 1000) < 100


def settled_state(pid: int, want_stopped: bool, timeout: float = 2.0) -> str | None:
    """The process state once a signal sent to it has landed (a running process takes
    a moment to stop)."""
    deadline = time.monotonic() + timeout
    while (pid_state(pid) == "T") != want_stopped and time.monotonic() < deadline:
        time.sleep(0.01)
    return pid_state(pid)


def test_pause_stops_the_server_and_resumes_it(rig: Rig) -> None:
    nem = rig.nemesis("pause")
    value = nem.start(random.Random(1))
    try:
        for n in rig.cluster.nodes:
            pid = rig.db.servers[n.name].daemon.pid  # type: ignore[union-attr]
            stopped = n.name in value["targets"]
            assert (settled_state(pid, stopped) == "T") == stopped, (n.name, pid_state(pid))
            r = redis.Redis(host=n.address, port=6379, socket_timeout=0.3)
            if stopped:
                with pytest.raises(redis.exceptions.TimeoutError):
                    r.ping()
            else:
                assert r.ping()
    finally:
        nem.stop()
    for n in rig.cluster.nodes:
        pid = rig.db.servers[n.name].daemon.pid  # type: ignore[union-attr]
        assert settled_state(pid, False) != "T"
        assert rig.redis(n.name).ping()


# a client under the fake clock: for each line on stdin, one history record (its `time`
# from CLOCK_MONOTONIC, as every worker stamps it) carrying its wall clock
CLIENT = """
import sys, time
from lockcheck.workloads.worker import Recorder, select_sleep
rec = Recorder(sys.stdout, int(sys.argv[1]), 0)
for line in sys.stdin:
    select_sleep(0.001)
    rec(0, "event", "probe", None, {"wall_ns": time.time_ns()})
"""


def test_client_clock_moves_the_wall_clock_but_never_history_times(rig: Rig) -> None:
    clocks = prepare_clocks(PrepareContext(spec=SPEC, cluster=rig.cluster, db=rig.db))
    rig.ctx_prepared["lockcheck.nemesis.clock:prepare"] = clocks
    c0 = rig.cluster.clients[0]
    t0 = time.monotonic_ns()
    d = c0.spawn("fake-clock-client", [sys.executable, "-c", CLIENT, str(t0)],
                 env=dict(clocks.worker_env("c0")), stdin=subprocess.PIPE,
                 stdout=subprocess.PIPE)
    assert d.popen is not None and d.popen.stdin and d.popen.stdout

    def probe() -> tuple[int, int, int]:
        """(the client's wall clock, the real wall clock before asking, after the
        answer), in ns; its history time is checked against the real monotonic clock.
        The client's clock is compared with the interval it was read in, not with one
        moment: on a loaded machine the answer can take long to come back."""
        assert d.popen is not None and d.popen.stdin and d.popen.stdout
        before, wall_before = time.monotonic_ns() - t0, time.time_ns()
        d.popen.stdin.write(b"\n")
        d.popen.stdin.flush()
        op = json.loads(d.popen.stdout.readline())
        after, wall_after = time.monotonic_ns() - t0, time.time_ns()
        assert before <= op["time"] <= after, (before, op["time"], after)
        return op["value"]["wall_ns"], wall_before, wall_after

    def ahead_by(ms: float) -> tuple[bool, tuple[int, int, int]]:
        """The client's clock is `ms` ahead (within 50 ms and the time it was read in)."""
        wall, lo, hi = sample = probe()
        return wall - hi - 50e6 <= ms * 1e6 <= wall - lo + 50e6, sample

    try:
        ok, sample = ahead_by(0)
        assert ok, sample
        bump = rig.nemesis("clock-bump", clock_targets="clients", clock_offset_ms=3_600_000)
        bump.candidates = ["c0"]  # type: ignore[attr-defined]
        assert bump.start(random.Random(0))["targets"] == ["c0"]
        try:
            ok, sample = ahead_by(3_600_000)  # an hour ahead, while history times stay true
            assert ok, sample
        finally:
            bump.stop()
        fast = rig.nemesis("clock-rate", clock_targets="clients", clock_rate=10.0)
        fast.candidates = ["c0"]  # type: ignore[attr-defined]
        fast.start(random.Random(0))
        try:
            w0, lo0, hi0 = probe()
            time.sleep(0.5)
            w1, lo1, hi1 = probe()
            # 10x as far as the real clock went between the two reads (bounded by
            # the intervals they were made in), within 10 % and 50 ms
            fake, least, most = w1 - w0, lo1 - hi0, hi1 - lo0
            assert 9 * least - 50e6 <= fake <= 11 * most + 50e6, (fake, least, most)
        finally:
            fast.stop()
        ok, sample = ahead_by(0)
        assert ok, ("the client's clock was not reset", sample)
    finally:
        d.popen.stdin.close()
        d.wait(5)
        rig.ctx_prepared.pop("lockcheck.nemesis.clock:prepare")


@pytest.mark.usefixtures("faked_redis")
def test_a_killed_faked_server_leaves_no_clock_files_and_restarts_faked(rig: Rig) -> None:
    from lockcheck.cluster.faketime import runs_libfaketime, shm_files

    nem = rig.nemesis("kill")
    before = {n.name: rig.db.servers[n.name].daemon.pid  # type: ignore[union-attr]
              for n in rig.cluster.nodes}
    assert all(all(f.exists() for f in shm_files(p)) for p in before.values())
    value = nem.start(random.Random(3))
    try:
        for n in value["targets"]:
            assert not any(f.exists() for f in shm_files(before[n])), \
                "SIGKILL left libfaketime's files for a PID that will be reused"
    finally:
        nem.stop()
    for n in value["targets"]:
        pid = rig.db.servers[n].daemon.pid  # type: ignore[union-attr]
        assert pid != before[n] and runs_libfaketime(pid), "restarted without its fake clock"
        assert rig.redis(n).ping()
