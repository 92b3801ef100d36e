"""The brief's metrics on hand-built histories whose answers are known."""

from __future__ import annotations

from typing import Any

import pytest

from lockcheck.checker.analyze import analyze
from lockcheck.results.metrics import compute_metrics, distribution
from tests.checker.histories import H

MS = 1_000_000  # every acquire and renew below has a TTL of 1000 ms
TEST: dict[str, Any] = {"workload": "mutex", "ttl_ms": 1000, "clock_drift": 0.0}


def test_latency_contention_and_hold_times() -> None:
    ops = (
        H()
        .acquire(0, "k", 1, 0, 2 * MS)  # granted in 2 ms
        .section(0, "k", 1, 2 * MS, 102 * MS)  # held 100 ms
        .release(0, "k", 1, 103 * MS, 104 * MS)
        .acquire(1, "k", None, 10 * MS, 11 * MS, result="fail")  # busy
        .acquire(1, "k", None, 20 * MS, 21 * MS, result="fail")  # busy
        .acquire(1, "k", 2, 200 * MS, 204 * MS)  # granted in 4 ms
        .section(1, "k", 2, 204 * MS, 504 * MS)  # held 300 ms
        .release(1, "k", 2, 505 * MS, 506 * MS)
        .ops()
    )
    m = compute_metrics(ops, TEST)
    a = m["acquire"]
    assert (a["attempts"], a["ok"], a["busy"], a["failed"], a["info"]) == (4, 2, 2, 0, 0)
    assert a["attempts_per_grant"] == 2.0 and a["busy_share"] == 0.5
    lat = m["acquire_latency_ms"]
    assert (lat["count"], lat["p50"], lat["max"]) == (2, 3.0, 4.0)
    assert m["attempt_latency_ms"]["count"] == 4
    hold = m["hold_ms"]
    assert (hold["count"], hold["p50"], hold["max"], hold["open"]) == (2, 200.0, 300.0, 0)
    assert m["exit_reasons"] == {"done": 2}
    assert m["expiries_while_working"]["outlived_lease"] == 0


def test_a_blocking_wait_that_ran_out_while_another_held_the_key_is_busy() -> None:
    wait = "no grant in time (timeout); lease revoked"  # etcd's blocking acquire
    ops = (
        H()
        .acquire(0, "k", 1, 0, 2 * MS)
        .section(0, "k", 1, 2 * MS, 302 * MS)
        .release(0, "k", 1, 303 * MS, 304 * MS)
        # waits while 0 holds the key: busy, an answer
        .acquire(1, "k", None, 10 * MS, 250 * MS, result="fail", error=wait)
        # the same wait with nobody holding the key: the service did not answer
        .acquire(1, "k", None, 400 * MS, 600 * MS, result="fail", error=wait)
        .ops()
    )
    a = compute_metrics(ops, TEST)["acquire"]
    assert (a["attempts"], a["ok"], a["busy"], a["failed"]) == (3, 1, 1, 1)
    overall = compute_metrics(ops, TEST)["availability"]["overall"]
    assert overall["answered"] == round(2 / 3, 4)


def test_percentiles_interpolate_between_ranks() -> None:
    d = distribution(list(range(1, 101)))
    assert (d["count"], d["p50"], d["p95"], d["p99"], d["max"], d["mean"]) == (
        100, 50.5, 95.05, 99.01, 100.0, 50.5)
    assert distribution([])["p50"] is None


def test_renewal_failures() -> None:
    ops = (
        H()
        .acquire(0, "k", 1, 0, 1 * MS)
        .enter(0, "k", 1, 1 * MS)
        .renew(0, "k", 1, 300 * MS, 301 * MS)
        .renew(0, "k", 1, 600 * MS, 601 * MS, result="info")
        .renew(0, "k", 1, 900 * MS, 901 * MS, result="fail")  # not-owner
        .exit(0, "k", 1, 902 * MS, "not-owner")
        .ops()
    )
    r = compute_metrics(ops, TEST)["renewals"]
    assert (r["attempts"], r["ok"], r["not_owner"], r["failed"], r["info"]) == (3, 1, 1, 0, 1)
    assert r["failure_rate"] == pytest.approx(0.6667)
    e = compute_metrics(ops, TEST)["expiries_while_working"]
    assert e["not_owner_exits"] == 1 and e["lease_expired_exits"] == 0


def test_expiries_while_working() -> None:
    ops = (
        H()
        # A: renewed at 300 ms (lease until 1300 ms), still inside at 1500 ms: paused
        .acquire(0, "a", 1, 0, 1 * MS, ttl_ms=1000)
        .enter(0, "a", 1, 1 * MS)
        .renew(0, "a", 1, 300 * MS, 301 * MS, ttl_ms=1000)
        .exit(0, "a", 1, 1500 * MS, "done")
        # B: lease until 3000 ms; the renew invoked at 2900 ms comes back at 3100 ms
        # (100 ms without a valid lease), pushing it to 3900 ms; it stops at 3200 ms
        .acquire(1, "b", 1, 2000 * MS, 2001 * MS, ttl_ms=1000)
        .enter(1, "b", 1, 2001 * MS)
        .renew(1, "b", 1, 2900 * MS, 3100 * MS, ttl_ms=1000)
        .exit(1, "b", 1, 3200 * MS, "lease-expired")
        # C: well inside its lease
        .acquire(2, "c", 1, 5000 * MS, 5001 * MS, ttl_ms=1000)
        .section(2, "c", 1, 5001 * MS, 5500 * MS)
        .ops()
    )
    e = compute_metrics(ops, TEST)["expiries_while_working"]
    assert e["lease_expired_exits"] == 1
    assert e["outlived_lease"] == 2
    assert e["outlived_by_exit_reason"] == {"done": 1, "lease-expired": 1}
    by_key = {x["key"]: x for x in e["examples"]}
    assert by_key["a"]["overrun_ms"] == 200.0 and by_key["a"]["lease_ran_out"] == 1300 * MS
    assert by_key["b"]["overrun_ms"] == 100.0 and by_key["b"]["lease_ran_out"] == 3000 * MS
    assert e["overrun_ms"]["max"] == 200.0


def test_a_holder_that_went_on_after_a_refused_renewal_is_counted() -> None:
    ops = (
        H()
        # A: the renewal at 300 ms is refused, yet it writes and renews again before leaving
        .acquire(0, "a", 1, 0, 1 * MS, ttl_ms=1000)
        .enter(0, "a", 1, 1 * MS)
        .renew(0, "a", 1, 300 * MS, 301 * MS, result="fail")  # not-owner
        .write(0, "a", 1, 400 * MS, 401 * MS)
        .renew(0, "a", 1, 600 * MS, 601 * MS, result="fail")
        .exit(0, "a", 1, 700 * MS, "done")
        # B: refused, and it leaves at once (its release is not work)
        .acquire(1, "b", 1, 2000 * MS, 2001 * MS, ttl_ms=1000)
        .enter(1, "b", 1, 2001 * MS)
        .renew(1, "b", 1, 2300 * MS, 2301 * MS, result="fail")
        .exit(1, "b", 1, 2302 * MS, "not-owner")
        .release(1, "b", 1, 2303 * MS, 2304 * MS, result="fail")
        # C: a renewal that failed for another reason is not a refusal
        .acquire(2, "c", 1, 5000 * MS, 5001 * MS, ttl_ms=1000)
        .enter(2, "c", 1, 5001 * MS)
        .renew(2, "c", 1, 5300 * MS, 5301 * MS, result="fail", error="connection refused")
        .write(2, "c", 1, 5400 * MS, 5401 * MS)
        .exit(2, "c", 1, 5500 * MS, "done")
        .ops()
    )
    e = compute_metrics(ops, TEST)["expiries_while_working"]
    assert e["worked_after_refusal"] == 1, e
    [x] = e["worked_after_refusal_examples"]
    assert (x["key"], x["refused"], x["records_after"], x["kept_ms"]) == ("a", 301 * MS, 2, 399.0)


def test_clock_drift_shortens_the_lease_clock() -> None:
    ops = H().acquire(0, "k", 1, 0, 1 * MS, ttl_ms=1000).section(0, "k", 1, 1 * MS, 995 * MS).ops()
    assert compute_metrics(ops, TEST)["expiries_while_working"]["outlived_lease"] == 0
    drifty = {**TEST, "clock_drift": 0.01}  # 1000 ms * 0.99 = 990 ms < 995 ms
    e = compute_metrics(ops, drifty)["expiries_while_working"]
    assert e["outlived_lease"] == 1 and e["examples"][0]["overrun_ms"] == 5.0


def test_availability_overall_under_each_fault_and_without() -> None:
    ops = (
        H()
        .acquire(0, "k", 1, 500 * MS, 501 * MS)
        .release(0, "k", 1, 600 * MS, 601 * MS)
        .nemesis("kill", 999 * MS, 1000 * MS, {"nodes": ["n1"]})
        .acquire(1, "k", None, 1200 * MS, 1201 * MS, result="fail", error="connection refused")
        .acquire(2, "k", None, 1500 * MS, 1750 * MS, result="info")
        .nemesis("restart", 1999 * MS, 2000 * MS, {"nodes": ["n1"]})
        .acquire(3, "k", 2, 2500 * MS, 2501 * MS)
        .acquire(4, "k", None, 3000 * MS, 3001 * MS, result="fail")  # busy
        .ops()
    )
    av = compute_metrics(ops, TEST)["availability"]
    assert av["overall"]["attempts"] == 5 and av["overall"]["share"] == 0.4
    kill = av["faults"]["kill"]
    assert (kill["attempts"], kill["ok"], kill["share"], kill["errors"], kill["info"]) == (
        2, 0, 0.0, 1, 1)
    assert kill["seconds"] == 1.0 and kill["windows"] == 1 and kill["answered"] == 0.0
    nf = av["no_fault"]
    assert (nf["attempts"], nf["ok"], nf["busy"], nf["answered"]) == (3, 2, 1, 1.0)
    assert nf["share"] == pytest.approx(0.6667)
    # the history spans 0.5 s .. 3.001 s, one second of it under the kill
    assert av["overall"]["seconds"] == 2.501 and nf["seconds"] == 1.501


def test_overlapping_faults_each_get_their_window() -> None:
    ops = (
        H()
        .nemesis("start-partition", 0, 1000 * MS,
                 {"fault": "partition-majority", "targets": ["n1", "n2"]})
        .nemesis("pause-client", 1900 * MS, 2000 * MS, {"fault": "client-pause",
                                                          "targets": ["c1"]})
        .acquire(0, "k", 1, 2100 * MS, 2101 * MS)  # under both
        .nemesis("resume-client", 2400 * MS, 2500 * MS, {"fault": "client-pause"})
        .acquire(1, "k", None, 2800 * MS, 2801 * MS, result="fail")  # partition only
        .nemesis("stop-partition", 2900 * MS, 3000 * MS, {"fault": "partition-majority"})
        .acquire(2, "k", 2, 3500 * MS, 3501 * MS)  # no fault
        .ops()
    )
    av = compute_metrics(ops, TEST)["availability"]
    assert av["faults"]["partition-majority"]["attempts"] == 2
    assert av["faults"]["partition-majority"]["seconds"] == 2.0
    assert av["faults"]["client-pause"]["attempts"] == 1
    assert av["faults"]["client-pause"]["seconds"] == 0.5
    assert av["no_fault"]["attempts"] == 1


def test_analyze_puts_metrics_in_results() -> None:
    ops = H().acquire(0, "k", 1, 0, MS).section(0, "k", 1, MS, 5 * MS).ops()
    r = analyze(ops, {"workload": "mutex", "ttl_ms": 1000})
    assert r["metrics"]["acquire"]["ok"] == 1 and r["metrics"]["hold_ms"]["p50"] == 4.0


def test_empty_history() -> None:
    m = compute_metrics([], TEST)
    assert m["acquire"]["attempts"] == 0 and m["acquire"]["attempts_per_grant"] is None
    assert m["availability"]["overall"]["share"] is None
