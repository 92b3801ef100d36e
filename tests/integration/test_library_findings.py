"""L1-L5 of docs/findings.md: lock libraries, unmodified, through `--client`.

* L1 python-redis-lock under `client-pause`: a holder paused past its key's expiry
  overlaps the holders after it (INVALID);
* L2 python-redis-lock with `auto_renewal` under `partition`: the library's renewal
  thread dies on a timed-out `extend()` (the traceback in the worker's log is its
  only trace), and an overlap, when there is one, is a holder the partition cut off;
* L3 portalocker's `RedisLock` with its fence, `--workload fenced`, `client-pause`:
  the resource accepts no stale write, and an overlap is a paused holder's;
* L4 redlock-py with one master killed: a grant on a quorum with an error is
  reported as a failure and kept, so its key is refused ("busy") for a TTL, while
  the checkers stay valid;
* L5 PALs under `failover`: a holder whose session was terminated goes on working
  beside the next holder (INVALID).
* O2 tooz on Redis under `outage`: a holder's heartbeat hangs through the outage,
  past its lease, and the restarted (empty) Redis grants its lock to another client
  meanwhile (INVALID);
* L7-L9, the Consul lock libraries, by `lockcheck client-check` (about 25-35 s each, one
  run, no timing to wait for): consullock's release by a holder whose session expired
  frees the current holder's lock; consul-lock's reports success and frees nothing;
  consulock's lock is still held 3x TTL after its holder went silent (a one-day session).

Each finding's command, as the findings give it, runs with its seed, one run at a
time; a run that does not show its finding is made again, up to three runs in all,
and the first that shows it is examined: a fault must find a holder and a rival must
ask in time, and on a loaded machine a window can pass unused. A run that showed
nothing is named in the failure.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest

from lockcheck.history import Op, read_history
from tests.integration.detect import first_showing

from .test_aimed_faults import windows

# up to three runs that include client workers slow to start on a loaded machine
pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns, pytest.mark.detection,
              pytest.mark.timeout(600)]

RUNS: dict[str, tuple[str, ...]] = {
    "L1": ("--backend", "redis", "--client", "python-redis-lock", "--nemesis", "client-pause",
           "--keys", "1", "--time-limit", "12", "--nemesis-interval", "1", "--seed", "1"),
    "L2": ("--backend", "redis", "--client", "python-redis-lock-auto-renewal",
           "--nemesis", "partition", "--hold-ms", "1500-3000", "--time-limit", "15",
           "--nemesis-interval", "2", "--seed", "1"),
    "L3": ("--backend", "redis", "--client", "portalocker", "--workload", "fenced",
           "--nemesis", "client-pause", "--keys", "1", "--time-limit", "12",
           "--nemesis-interval", "1", "--pause-ms", "2000", "--seed", "1"),
    "L4": ("--backend", "redlock", "--client", "redlock-py", "--nemesis", "kill",
           "--kill-targets", "one", "--restart-delay-ms", "1000", "--time-limit", "12",
           "--nemesis-interval", "1", "--seed", "1"),
    "L5": ("--backend", "postgres", "--client", "pals", "--nemesis", "failover",
           "--hold-ms", "300-800", "--time-limit", "25", "--nemesis-interval", "1.5",
           "--seed", "1"),
    "O2": ("--backend", "redis", "--client", "tooz", "--nemesis", "outage",
           "--time-limit", "12", "--nemesis-interval", "2", "--seed", "1"),
}


def ops_of(r: Any) -> list[Op]:
    return read_history(r.run_dir / "history.jsonl")


def checkers(r: Any) -> dict[str, Any]:
    res: dict[str, Any] = r.results()["checkers"]
    return res


def overlapped(r: Any) -> bool:
    return r.code == 1 and checkers(r)["mutual-exclusion"]["valid"] is False


def pauses(ops: list[Op]) -> list[tuple[Op, int]]:
    """Each pause that stopped a holder, with the time it was resumed."""
    return windows(ops, "pause-client", "resume-client")


def paused_holder(v: dict[str, Any], ops: list[Op]) -> bool:
    """One of an overlap's two was stopped inside the section that overlaps, and the
    other entered after that pause began."""
    for i in (0, 1):
        (start, end), rival_start = v["sections"][i], v["sections"][1 - i][0]
        for p, _ in pauses(ops):
            if (p.value["process"] == v["processes"][i] and p.value["key"] == v["key"]
                    and start <= p.time <= end and rival_start >= p.time):
                return True
    return False


def stalled_holder(v: dict[str, Any], ops: list[Op], ttl_ms: int) -> bool:
    """One of an overlap's two recorded nothing for longer than its TTL, from inside
    its section until the other entered: its process was stopped (by the machine, not
    the nemesis), so it could not renew, and its key expired. A stall of every process
    for over a second happened once on a loaded machine, in two runs at once."""
    for i in (0, 1):
        (start, _), rival_start = v["sections"][i], v["sections"][1 - i][0]
        times = sorted(o.time for o in ops if o.process == v["processes"][i]
                       and o.time >= start)
        upto = [t for t in times if t < rival_start] + [t for t in times
                                                         if t >= rival_start][:1]
        if any(b - a > ttl_ms * 1_000_000 for a, b in pairwise(upto)):
            return True
    return False


def renewal_thread_timeouts(r: Any) -> list[str]:
    """Worker logs with the traceback of python-redis-lock's renewal thread ended by a
    timed-out `extend()`."""
    out = []
    for log in sorted((r.run_dir / "workers").glob("c*.log")):
        text = log.read_text(errors="replace")
        if "_lock_renewer" in text and "lock.extend(" in text and \
                "redis.exceptions.TimeoutError: Timeout reading from socket" in text:
            out.append(log.name)
    return out


def cut_off_holder(v: dict[str, Any], ops: list[Op]) -> bool:
    """One of an overlap's two was inside when a partition cut its client off from a
    server, the overlap began once that partition was in place, and nothing told that
    holder (it left with `done`)."""
    for i in (0, 1):
        host, (start, _) = f"c{v['workers'][i]}", v["sections"][i]
        for cut, healed in windows(ops, "start-partition", "stop-partition"):
            dropped = cut.value["grudge"].get(host, [])
            if (any(h.startswith("n") for h in dropped) and start < healed
                    and v["start"] >= cut.time and v["exit_reasons"][i] == "done"):
                return True
    return False


def kept_failures(ops: list[Op], ttl_ms: int) -> list[tuple[Op, int, int]]:
    """Acquires reported failed ("failed: ...") whose key was then refused as busy
    until a TTL after the attempt: (the failed completion, the busy refusals, the ns
    from the attempt to the key's next grant)."""
    out = []
    invoked: dict[Any, Op] = {}
    acquires = [o for o in ops if o.f == "acquire" and o.key is not None]
    for n, o in enumerate(acquires):
        if o.type == "invoke":
            invoked[o.process] = o
        if not (o.type == "fail" and (o.error or "").startswith("failed:")):
            continue
        later = acquires[n + 1:]
        granted = next((x for x in later if x.key == o.key and x.type == "ok"), None)
        if granted is None:
            continue
        busy = sum(1 for x in later if x.key == o.key and x.type == "fail"
                   and x.error == "busy" and x.time < granted.time)
        kept = granted.time - invoked[o.process].time
        if busy and kept >= ttl_ms * 1_000_000:
            out.append((o, busy, kept))
    return out


def terminated_holder(v: dict[str, Any], ops: list[Op]) -> bool:
    """The earlier of an overlap's two left with `done` (nothing told it), and a
    failover terminated sessions between its entry and the next holder's."""
    (start, _), rival_start = v["sections"][0], v["sections"][1][0]
    began = None
    for o in ops:
        if o.process != "nemesis" or o.f != "failover":
            continue
        if o.type == "invoke":
            began = o.time
        elif (o.value or {}).get("pids") and began is not None and \
                began < rival_start and o.time > start:
            return v["exit_reasons"][0] == "done"
    return False


DETECTS: dict[str, Callable[[Any], bool]] = {
    "L1": overlapped,
    "L2": lambda r: bool(renewal_thread_timeouts(r)),
    "L3": overlapped,
    "L4": lambda r: bool(kept_failures(ops_of(r), r.test_json()["ttl_ms"])),
    "L5": overlapped,
    "O2": overlapped,
}


def shown(module_cli: Any, name: str) -> Any:
    """The finding's first run that showed it (or its last)."""
    return first_showing(module_cli, RUNS[name], DETECTS[name], timeout=150)


def test_l1_python_redis_lock_paused_holder_overlaps_the_next(
        module_cli: Any) -> None:
    r = shown(module_cli, "L1")
    assert overlapped(r), (r.explain())
    me = checkers(r)["mutual-exclusion"]
    ops = ops_of(r)
    assert pauses(ops), "no pause stopped a holder"
    ttl = r.test_json()["ttl_ms"]
    lonely = [v for v in me["violations"]
              if not (paused_holder(v, ops) or stalled_holder(v, ops, ttl))]
    assert not lonely, lonely[:3]


def test_l2_auto_renewal_thread_dies_on_a_timed_out_extend(
        module_cli: Any) -> None:
    r = shown(module_cli, "L2")
    assert renewal_thread_timeouts(r), (r.explain())
    assert windows(ops_of(r), "start-partition", "stop-partition")
    me = checkers(r)["mutual-exclusion"]
    if me["valid"] is False:  # 2 of 5 runs: the lock expired under a holder cut off
        ops = ops_of(r)
        ttl = r.test_json()["ttl_ms"]
        lonely = [v for v in me["violations"]
                  if not (cut_off_holder(v, ops) or stalled_holder(v, ops, ttl))]
        assert not lonely, lonely[:3]


def test_l3_portalocker_fence_refuses_the_paused_holder(
        module_cli: Any) -> None:
    r = shown(module_cli, "L3")
    ops = ops_of(r)
    assert pauses(ops), ("no pause stopped a holder", r.explain())
    fe = checkers(r)["fencing"]
    assert fe["fenced_acquisitions"] > 0 and fe["accepted"] > 0, fe
    assert fe["resource_valid"] is True and fe["stale_accepted_count"] == 0, fe
    me = checkers(r)["mutual-exclusion"]
    if me["valid"] is False:  # 2 of 6 runs: the paused holder's section spans the takeover
        ttl = r.test_json()["ttl_ms"]
        lonely = [v for v in me["violations"]
                  if not (paused_holder(v, ops) or stalled_holder(v, ops, ttl))]
        assert not lonely, lonely[:3]


def test_l4_redlock_py_keeps_a_grant_it_reported_failed(
        module_cli: Any) -> None:
    r = shown(module_cli, "L4")
    ops = ops_of(r)
    kept = kept_failures(ops, r.test_json()["ttl_ms"])
    failed = [o for o in ops if o.type == "fail" and (o.error or "").startswith("failed:")]
    assert kept, ([o.to_json() for o in failed[:3]], r.explain())
    assert windows(ops, "kill", "restart")
    # nothing is held twice: lost availability, not safety
    assert r.code == 0, r.explain()
    c = checkers(r)
    assert c["mutual-exclusion"]["valid"] is True and c["lease-safety"]["valid"] is True


def test_l5_pals_terminated_session_holder_overlaps_the_next(
        module_cli: Any) -> None:
    r = shown(module_cli, "L5")
    assert overlapped(r), (r.explain())
    me = checkers(r)["mutual-exclusion"]
    ops = ops_of(r)
    lonely = [v for v in me["violations"] if not terminated_holder(v, ops)]
    assert not lonely, lonely[:3]


# -- the Consul lock libraries (L7-L9), on the consul backend's servers -------------------

def needs_consul() -> None:
    from lockcheck.db.consul import consul_binary
    from lockcheck.errors import BadInput

    try:
        consul_binary()
    except BadInput as e:
        pytest.skip(str(e))


def client_check_lines(r: Any) -> list[str]:
    return [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("  ")]


def test_l7_consullock_release_by_a_stale_holder_frees_the_next_holders_lock(
        module_cli: Any) -> None:
    needs_consul()
    r = module_cli("client-check", "consullock", "--backend", "consul", timeout=180)
    lines = client_check_lines(r)
    bad = [ln for ln in lines if ln.startswith("FAIL")]
    assert r.code == 1 and len(bad) == 1, r.explain()
    assert bad[0].startswith("FAIL  release by a non-owner (the expired holder): it FREED "
                             "the current holder's lock"), r.explain()
    # the rest of the contract holds: it is the release that is wrong
    assert any(ln.startswith("ok    the lease expires") for ln in lines), r.explain()
    assert any(ln.startswith("ok    a second client's acquire") for ln in lines), r.explain()


def test_l8_consul_lock_reports_a_stale_release_as_a_success_and_frees_nothing(
        module_cli: Any) -> None:
    needs_consul()
    r = module_cli("client-check", "consul-lock", "--backend", "consul", timeout=180)
    lines = client_check_lines(r)
    bad = [ln for ln in lines if ln.startswith("FAIL")]
    assert r.code == 1 and len(bad) == 1, r.explain()
    # the holder keeps its lock (its session is the one destroyed), but the caller
    # cannot learn that its own lock was gone
    assert bad[0].startswith("FAIL  release by a non-owner (the expired holder): reported "
                             "success; the lock stayed with its holder"), r.explain()
    assert any(ln.startswith("ok    the lease expires") for ln in lines), r.explain()


def test_l9_consulock_a_silent_holder_keeps_its_lock_past_any_session_ttl(
        module_cli: Any) -> None:
    """The fast form of L9: a holder that stops (no release) still holds the lock 3x the
    run's TTL later, which no 10 s session allows (the holder's session lives a day).
    The partition-holder run of findings.md is not here: telling it apart from a 10 s
    session needs a recovery phase past 2x TTL + lock-delay, over 50 s a run."""
    needs_consul()
    r = module_cli("client-check", "consulock", "--backend", "consul", timeout=180)
    lines = client_check_lines(r)
    assert r.code == 0 and not [ln for ln in lines if ln.startswith("FAIL")], r.explain()
    assert any(ln.startswith("note  the lease expires when its holder stops renewing: still "
                             "held 30000 ms after its holder stopped") for ln in lines), \
        r.explain()
    assert any(ln.startswith("ok    release: the lock is free again") for ln in lines), \
        r.explain()


def outages(ops: list[Op]) -> list[tuple[int, int]]:
    """Every server down: from the start's completion to the restarts' beginning (a
    server restarted may grant before the stop's completion is recorded)."""
    starts = [o.time for o in ops if o.process == "nemesis" and o.f == "start-outage"
              and o.type == "info"]
    stops = [o.time for o in ops if o.process == "nemesis" and o.f == "stop-outage"
             and o.type == "invoke"]
    return list(zip(starts, stops, strict=False))


def test_o2_tooz_holder_works_on_through_an_outage(module_cli: Any) -> None:
    r = shown(module_cli, "O2")
    assert overlapped(r), r.explain()
    ops = ops_of(r)
    spans = outages(ops)
    assert spans, "no outage"
    # every overlap is a holder that entered before an outage began and was still
    # inside after it ended (its heartbeat hung through it), beside one that entered
    # after the restart
    for v in checkers(r)["mutual-exclusion"]["violations"]:
        (held_from, held_to), (rival_from, _) = v["sections"][0], v["sections"][1]
        assert any(held_from < down and held_to > up and rival_from > up
                   for down, up in spans), v
    assert checkers(r)["outage"]["acquires"]["granted"] == 0
