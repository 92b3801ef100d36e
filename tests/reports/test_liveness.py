"""The liveness metrics of the transfer workload in the run report and in `compare`."""

from __future__ import annotations

from lockcheck.results.cells import CellView, Run, apply_results, workload_label
from lockcheck.results.liveness import liveness_metrics
from lockcheck.results.metrics import compute_metrics
from lockcheck.results.report import _metrics_table
from tests.checker.histories import H
from tests.checker.test_deadlock import MS, crossed, end, waited


def deadlocked_history() -> H:
    h = crossed(H(), 0)
    h.acquire(1, "x", 2, 1000 * MS, 1000 * MS + 5)
    waited(h, 1, 0, "x", 1000 * MS + 6)
    waited(h, 0, 0, "y", 1000 * MS + 50, "wait-limit")
    end(h, 0, 0, ["x", "y"], 1000 * MS + 80, "wait-limit")
    end(h, 1, 0, ["y", "x"], 1000 * MS + 90, "lease-expired")
    return h


def test_metrics_carry_throughput_and_time_in_deadlock() -> None:
    m = compute_metrics(deadlocked_history().ops(), {"ttl_ms": 500})
    live = m["liveness"]
    assert live["cycles"] == 1 and live["deadlock_s"] == 1.0
    assert live["completed"] == 0 and live["not_completed"] == 2
    assert live["broken_by"] == {"expiry": 1}
    html = _metrics_table(m)
    assert "1 wait-for cycle(s); 1 s in deadlock" in html and "broken by: expiry 1" in html


def test_a_history_of_one_lock_per_operation_has_none() -> None:
    ops = H().acquire(0, "k", 1, 0, 10).enter(0, "k", 1, 11).exit(0, "k", 1, 20).ops()
    assert liveness_metrics(ops) is None
    assert "liveness" not in compute_metrics(ops, {"ttl_ms": 500})
    assert "wait-for cycle" not in _metrics_table(compute_metrics(ops, {"ttl_ms": 500}))


def test_compare_shows_throughput_and_deadlocked_runs_and_keeps_orders_apart() -> None:
    assert workload_label({"workload": "transfer", "lock_order": "random",
                           "locks_per_op": 2}) == "transfer (random order, 2 locks)"
    assert workload_label({"workload": "transfer", "lock_scope": "coarse"}) == \
        "transfer (one coarse lock)"
    runs = []
    for cycles, tput in ((3, 4.0), (0, 6.0)):
        r = Run(backend="redis", workload="transfer (random order, 2 locks)",
                nemesis="none", status="unsafe")
        apply_results(r, {"valid": cycles == 0, "metrics": {"liveness": {
            "throughput_per_s": tput, "cycles": cycles, "deadlock_s": 1.5 * cycles}}})
        runs.append(r)
    lines = CellView(runs).metric_lines("none")
    assert "5.0 ops/s; deadlocked in 1 of 2 run(s), 2.25 s lost (median)" in lines
