"""The leadership metrics in the run report and in `compare` (results/leadership.py)."""

from __future__ import annotations

from lockcheck.results.cells import CellView, Run, apply_results, workload_label
from lockcheck.results.metrics import compute_metrics
from lockcheck.results.report import _metrics_table
from tests.checker.histories import H
from tests.checker.test_leadership import paused_leader


def test_metrics_and_report_carry_leadership_and_stale_actions() -> None:
    m = compute_metrics(paused_leader(accepted=True).ops(), {"ttl_ms": 1000,
                                                             "workload": "leader"})
    lead = m["leadership"]
    assert lead["leaders"] == 2 and lead["leadership_changes"] == 1
    assert lead["stale_accepted"] == 1 and lead["stale_refused"] == 0
    html = _metrics_table(m)
    assert "1 change(s) of leader" in html and "1 accepted, 0 refused" in html


def test_a_history_without_actions_has_none() -> None:
    ops = H().acquire(0, "k", 1, 0, 10).enter(0, "k", 1, 11).exit(0, "k", 1, 20).ops()
    assert "leadership" not in compute_metrics(ops, {"ttl_ms": 500})


def test_compare_shows_leadership_and_keeps_the_stores_apart() -> None:
    assert workload_label({"workload": "leader", "resource": "unfenced"}) == \
        "leader (unfenced resource)"
    assert workload_label({"workload": "leader", "resource": "fenced"}) == "leader"
    runs = []
    for changes, refused in ((2, 2), (4, 1)):
        r = Run(backend="redis", workload="leader", nemesis="client-pause", status="safe")
        apply_results(r, {"valid": True, "metrics": {"leadership": {
            "leadership_changes": changes, "leaderless_ms": 5.0, "stale_accepted": 0,
            "stale_refused": refused}}})
        runs.append(r)
    lines = CellView(runs).metric_lines("client-pause")
    assert ("leader changes 3, 5 ms without a leader (median); stale actions 0 accepted, "
            "3 refused in 2 run(s)") in lines


def test_the_timeline_marks_an_accepted_deposed_action_only() -> None:
    from lockcheck.checker.api import CheckOptions
    from lockcheck.checker.leadership import check_leadership
    from lockcheck.results.timeline import timeline_data

    for accepted, marked in ((True, 1), (False, 0)):
        ops = paused_leader(accepted=accepted).ops()
        le = check_leadership(ops, CheckOptions(workload="leader", ttl_ms=1000))
        viols = timeline_data(ops, {"checkers": {"leadership": le}}, [], {})["viols"]
        deposed = [v for v in viols if v["kind"] == "deposed-leader"]
        assert len(deposed) == marked
        if marked:
            assert len(deposed[0]["secs"]) == 2 and "term 1" in deposed[0]["text"]
