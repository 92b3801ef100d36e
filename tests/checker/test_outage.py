"""The outage checker: nothing may be granted while every server is down."""

from __future__ import annotations

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.outage import check_outage, outage_windows
from lockcheck.history import Op
from tests.checker.histories import H

MS = 1_000_000


def outage(h: H, start: int, stop: int | None) -> H:
    h.op("nemesis", "invoke", "start-outage", None, None, start)
    h.op("nemesis", "info", "start-outage", None, {"fault": "outage", "nodes": ["n1"]},
         start + 5 * MS)
    if stop is not None:
        h.op("nemesis", "invoke", "stop-outage", None, None, stop)
        h.op("nemesis", "info", "stop-outage", None, {"fault": "outage"}, stop + 50 * MS)
    return h


def check(ops: list[Op]) -> dict:  # type: ignore[type-arg]
    return check_outage(ops, CheckOptions())


def test_a_run_without_an_outage_abstains() -> None:
    r = check(H().acquire(0, "k", 1, 0, 1 * MS).ops())
    assert r["valid"] == "unknown" and r["nothing_checked"] == "no outage in this run"


def test_a_grant_while_every_server_is_down_is_a_violation() -> None:
    h = outage(H(), 1000 * MS, 3000 * MS)
    h.acquire(0, "k", 1, 900 * MS, 1004 * MS)  # sent before the kill was done: not judged
    h.acquire(1, "k", None, 1200 * MS, 1201 * MS, result="fail", error="connection refused")
    h.acquire(2, "k", None, 1300 * MS, 1800 * MS, result="info")
    h.acquire(3, "k", 7, 1500 * MS, 1502 * MS)  # made up: nobody could grant it
    h.acquire(4, "k", 8, 2900 * MS, 3100 * MS)  # answered after the restart began
    r = check(h.ops())
    assert r["valid"] is False, r
    assert r["acquires"] == {"attempts": 4, "granted": 1, "failed": 1, "unknown": 1,
                             "blocked": 1}
    [g] = r["granted_without_a_server"]
    assert (g["process"], g["key"], g["ok_ns"]) == (3, "k", 1502 * MS)
    assert r["summary"].startswith("1 acquire(s) granted while every server was down")
    assert r["fail_ms_median"] == 1.0


def test_clients_that_fail_or_wait_keep_it_valid() -> None:
    h = outage(H(), 1000 * MS, 3000 * MS)
    h.acquire(1, "k", None, 1200 * MS, 1201 * MS, result="fail", error="connection refused")
    h.acquire(2, "k", 3, 1300 * MS, 3200 * MS)  # blocked until the servers were back
    r = check(h.ops())
    assert r["valid"] is True, r
    assert "nothing was granted while every server was down" in r["summary"]


def test_an_outage_the_history_ends_in_runs_to_its_end() -> None:
    h = outage(H(), 1000 * MS, None)
    h.acquire(1, "k", 2, 1500 * MS, 1600 * MS)
    ops = h.ops()
    assert outage_windows(ops)[0].end == 1600 * MS + 1
    assert check(ops)["valid"] is False


def test_an_outage_nobody_tried_to_lock_in_tested_nothing() -> None:
    h = outage(H(), 1000 * MS, 3000 * MS)
    h.acquire(0, "k", 1, 3500 * MS, 3501 * MS)
    r = check(h.ops())
    assert r["valid"] == "unknown" and "no acquire was attempted" in r["nothing_checked"]
