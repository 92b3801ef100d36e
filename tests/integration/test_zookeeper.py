"""ZooKeeper findings, real ensembles in network namespaces, through the `lockcheck` command.

The four runs start two at a time (module fixture) and several tests look at each:

* `zookeeper-no-listener` under `client-pause` with long critical sections: the holder
  is paused past its session timeout, its znode goes, another client is granted the
  lock, and after SIGCONT the paused client carries on (kazoo's `is_acquired` is still
  True) while the other one holds it;
* the default `zookeeper` client, same run: it stops its critical section the moment
  it resumes (its lease clock ran out, or SUSPENDED told it);
* `zookeeper-no-listener` with the `fenced` workload: the stale holder's write carries a
  lower czxid than the new holder's and the resource refuses it;
* the default client under `partition`: the side without a quorum never grants;
* an ensemble that stops granting while every member is alive (the 3.8.0 wedge of
  docs/findings.md, too rare to wait for: here every member is frozen with SIGSTOP
  mid-run, which looks the same from a client: ports open, nothing answers) is
  reported as not recovered, not as safe and well.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lockcheck.checker.intervals import Section, critical_sections
from lockcheck.history import Op, pair_ops, read_history
from tests.conftest import proc_cmdline, proc_start
from tests.integration.test_redlock import run_all

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

TTL_NS = 1000 * 1_000_000  # the default --ttl-ms
PAUSE_RUN = ("--nemesis", "client-pause", "--hold-ms", "5000-7000", "--time-limit", "12",
             "--nemesis-interval", "0.5")
RUNS: dict[str, tuple[str, ...]] = {
    "no_listener_pause": ("--backend", "zookeeper-no-listener", *PAUSE_RUN),
    "default_pause": ("--backend", "zookeeper", *PAUSE_RUN),
    "no_listener_fenced": ("--backend", "zookeeper-no-listener", "--workload", "fenced",
                           "--nemesis", "client-pause", "--pause-ms", "3000",
                           "--time-limit", "12", "--nemesis-interval", "0.5"),
    "default_partition": ("--backend", "zookeeper", "--nemesis", "partition",
                          "--time-limit", "12", "--nemesis-interval", "2.5"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    """Every run of this module, two at a time (each has its own cluster: four
    ensembles of three JVMs at once on two cores time their clients out); afterwards
    nothing of them may be left."""
    yield from run_all(module_cli, RUNS, at_once=2)


def ops_of(r: Any) -> list[Op]:
    return read_history(r.run_dir / "history.jsonl")


@pytest.fixture(scope="module")
def pauses(runs: dict[str, Any]) -> dict[str, list[tuple[Op, Op, Section]]]:
    """Per run: (pause op, resume op, the paused holder's critical section)."""
    out = {}
    for name in ("no_listener_pause", "default_pause", "no_listener_fenced"):
        ops = ops_of(runs[name])
        nem = [o for o in ops if o.process == "nemesis" and o.type == "info"]
        starts = [o for o in nem if o.f == "pause-client" and "skipped" not in o.value]
        stops = [o for o in nem if o.f == "resume-client"]
        sections = critical_sections(ops)
        found = []
        for start in starts:
            stop = next(o for o in stops if o.time > start.time)
            victim = next(s for s in sections if s.process == start.value["process"]
                          and s.key == start.value["key"] and s.start <= start.time <= s.end)
            found.append((start, stop, victim))
        out[name] = found
    return out


def lease_violations(r: Any) -> list[dict[str, Any]]:
    """lease-safety's grants made while another lease was provably valid. A release
    sent under the holder's next process id (after an `info`) names its lease and
    counts as the holder giving it up, so a retired holder is no excuse."""
    ls: dict[str, Any] = r.results()["checkers"]["lease-safety"]
    assert ls["violation_count"] == len(ls["violations"])  # none left unreported
    violations: list[dict[str, Any]] = ls["violations"]
    return violations


def others_during(sections: list[Section], victim: Section, start: int, end: int
                  ) -> Iterator[Section]:
    """Sections of other processes on the victim's key that overlap [start, end]."""
    for s in sections:
        if (s.key == victim.key and s.process != victim.process
                and s.start < end and s.end > start):
            yield s


def test_no_listener_client_keeps_working_after_resume_while_another_holds(
        runs: dict[str, Any], pauses: dict[str, list[tuple[Op, Op, Section]]]) -> None:
    """Finding `zookeeper-no-listener` (docs/findings.md): after the resume its critical
    section goes on, and another client holds the same lock at the same time."""
    r = runs["no_listener_pause"]
    sections = critical_sections(ops_of(r))
    stale = []
    for _start, stop, victim in pauses["no_listener_pause"]:
        if victim.end - stop.time > 300_000_000:  # still working 0.3 s after SIGCONT
            rivals = list(others_during(sections, victim, stop.time, victim.end))
            if rivals:
                stale.append((victim, rivals))
    assert stale, [(v.process, v.key, v.end - s.time) for _, s, v in
                   pauses["no_listener_pause"]]
    for victim, _ in stale:
        assert victim.exit_reason == "done"  # it never learned it had lost the lock
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False
    assert r.code == 1


def test_default_client_stops_its_section_when_it_resumes(
        runs: dict[str, Any], pauses: dict[str, list[tuple[Op, Op, Section]]]) -> None:
    r = runs["default_pause"]
    sections = critical_sections(ops_of(r))
    long_pauses = [(a, b, v) for a, b, v in pauses["default_pause"]
                   if b.time - a.time >= TTL_NS]
    assert long_pauses, "no pause lasted a session timeout"
    taken_over = 0
    for start, stop, victim in long_pauses:
        # its lease clock ran out, SUSPENDED told it, or the renewal it was paused in
        # failed with the connection when it woke: each one ends the section
        assert victim.exit_reason in ("lease-expired", "not-owner", "indefinite"), victim
        assert victim.end - stop.time < 500_000_000, (victim.end - stop.time) / 1e9
        taken_over += any(others_during(sections, victim, start.time, stop.time))
    assert taken_over, "no other client was granted a paused holder's lock"
    # the overlap is the pause itself; the service granted nothing early
    assert lease_violations(r) == []


def test_czxid_fences_refuse_the_stale_writer(runs: dict[str, Any]) -> None:
    r = runs["no_listener_fenced"]
    assert r.code == 1, r.explain()  # the lock failed (invalid); the resource held
    res = r.results()
    fe = res["checkers"]["fencing"]
    assert fe["resource_valid"] is True
    assert fe["stale_accepted_count"] == 0 and fe["interleaved_count"] == 0
    assert fe["saves_stale_holder"] > 0, fe
    assert fe["duplicate_fence_count"] == 0 and fe["regression_count"] == 0
    assert res["checkers"]["mutual-exclusion"]["valid"] is False  # the lock itself failed
    assert res["summary"].startswith("the lock failed, the resource held")


def test_the_minority_side_of_a_partition_never_grants(runs: dict[str, Any]) -> None:
    """ZooKeeper's quorum: a client that can reach only a minority of the ensemble gets
    no lock while the partition lasts, and no lease is granted twice."""
    r = runs["default_partition"]
    res = r.results()
    ops = ops_of(r)
    assert lease_violations(r) == []
    nem = [o for o in ops if o.process == "nemesis"]
    starts = [o for o in nem if o.f == "start-partition" and o.type == "info"]
    assert starts, "no partition was started"
    acquires = [(p.invoke, p.complete) for p in pair_ops(ops)
                if p.invoke.f == "acquire" and p.complete is not None]
    tried = 0
    for start in starts:
        heal = next(o for o in nem if o.f == "stop-partition" and o.time > start.time)
        a, b = start.value["sides"]
        minority = min(a, b, key=lambda side: sum(h.startswith("n") for h in side))
        workers = {int(h[1:]) for h in minority if h.startswith("c")}
        # sent after every drop rule was in place, answered before the heal began
        inside = [(i, c) for i, c in acquires if i.worker in workers
                  and i.time > start.time and c.time < heal.time]
        tried += len(inside)
        assert not [i for i, c in inside if c.type == "ok"], start.value
    assert tried > 0, "no client on a minority side tried to take a lock"
    assert res["recovery"]["valid"] is True


# -- an ensemble that stops granting (liveness) ----------------------------------------

WEDGE = ("--backend", "zookeeper", "--nemesis", "none", "--time-limit", "6", "--quiet", "1",
         "--recover-s", "3")


def granted_yet(p: Any) -> bool:
    return any('"type": "ok", "f": "acquire"' in (d / "history.jsonl").read_text()
               for d in p._new_run_dirs() if (d / "history.jsonl").exists())


def freeze_ensemble(p: Any, frozen: list[tuple[int, int | None]]) -> None:
    """SIGSTOP every ZooKeeper server of this test's own run once a lock has been
    granted, and keep them stopped until lockcheck has exited (its teardown SIGKILLs
    them)."""
    trace = p.wait_running(timeout=90)
    p.wait_for(lambda: granted_yet(p), 60, "a first grant")
    time.sleep(0.5)
    for pid in list(trace.pids):
        if "QuorumPeerMain" in (proc_cmdline(pid) or ""):
            frozen.append((pid, proc_start(pid)))
            os.kill(pid, signal.SIGSTOP)
    while p.popen.poll() is None:
        time.sleep(0.1)
    for pid, start in frozen:  # only if it is still the same process
        if proc_start(pid) == start:
            os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def wedged(module_cli: Any) -> tuple[Any, list[tuple[int, int | None]]]:
    """The frozen-ensemble run, on its own: three more JVMs beside the others would
    slow every ensemble's start past its readiness timeout on a loaded machine."""
    p = module_cli.start("test", *WEDGE)
    frozen: list[tuple[int, int | None]] = []
    t = threading.Thread(target=freeze_ensemble, args=(p, frozen), daemon=True)
    t.start()
    r = p.wait(timeout=150)
    t.join(timeout=10)
    module_cli.assert_no_leftovers(r.test_json()["run_id"])
    return r, frozen


def test_an_ensemble_that_stops_granting_is_reported_as_not_recovered(
        wedged: tuple[Any, list[tuple[int, int | None]]]) -> None:
    """Z6 as lockcheck reports it: every lock named unrecovered, on screen and in
    results.json, beside a safety verdict that the silence does not fool."""
    r, frozen = wedged
    assert len(frozen) == 3, frozen  # the whole ensemble
    res = r.results()
    rec = res["recovery"]
    assert rec["valid"] is False, rec
    assert rec["summary"].startswith("NOT RECOVERED: k0, k1, k2")
    assert all(k["acquired_after_s"] is None for k in rec["keys"].values())
    assert "recovery: NOT RECOVERED" in r.stdout + r.stderr
    assert any(e.startswith("recovery: NOT RECOVERED") for e in res["errors"])
    assert res["checkers"]["mutual-exclusion"]["valid"] is True
    assert r.code == 0, r.explain()  # the safety verdict; liveness is reported beside it
    # the workers were granted locks before the freeze
    assert [o for o in ops_of(r) if o.f == "acquire" and o.type == "ok"]
