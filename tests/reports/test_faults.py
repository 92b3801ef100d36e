"""Fault windows from nemesis records: old and new shapes, overlaps, unknown faults."""

from __future__ import annotations

from lockcheck.results.faults import fault_windows, merged
from tests.checker.histories import H


def test_legacy_pairs_by_f() -> None:
    ops = (
        H()
        .nemesis("start-partition", 5, 10, {"sides": [["n1", "c0"], ["n2", "c1"]],
                                             "kind": "halves"})
        .nemesis("stop-partition", 25, 30, {"healed": ["n1", "n2"]})
        .nemesis("kill", 35, 40, {"nodes": ["n1"]})
        .nemesis("restart", 45, 50, {"nodes": ["n1"]})
        .nemesis("pause", 55, 60, {"nodes": ["n2"]})
        .ops()
    )
    ws = fault_windows(ops)
    assert [(w.fault, w.start, w.end, w.closed) for w in ws] == [
        ("partition", 10, 30, True), ("kill", 40, 50, True), ("pause", 60, 60, False)]
    assert ws[0].targets == ("n1", "c0", "n2", "c1")
    assert ws[0].detail == "n1 c0 | n2 c1, kind halves"
    assert ws[1].targets == ("n1",)


def test_new_shape_pairs_by_fault_name_and_overlaps() -> None:
    ops = (
        H()
        .nemesis("kill", 0, 10, {"fault": "kill-primary", "targets": ["n2"]})
        .nemesis("start-partition", 11, 20, {"fault": "partition-ring",
                                              "targets": ["n1", "n2", "n3"]})
        .nemesis("restart", 29, 30, {"fault": "kill-primary", "targets": ["n2"]})
        .nemesis("stop-partition", 39, 40, {"fault": "partition-ring"})
        .ops()
    )
    ws = fault_windows(ops)
    assert [(w.fault, w.start, w.end) for w in ws] == [
        ("kill-primary", 10, 30), ("partition-ring", 20, 40)]
    assert merged(ws) == [(10, 40)]


def test_unknown_faults_never_crash() -> None:
    ops = (
        H()
        .nemesis("start-loss", 0, 10, {"targets": ["n1"], "share": 0.3})
        .nemesis("stop-loss", 19, 20, None)
        .nemesis("strobe-clock", 25, 30, {"fault": "clock-strobe", "targets": ["n3"]})
        .nemesis("unstrobe-clock", 35, 40, {"fault": "clock-strobe"})
        .nemesis("bump", 45, 50, [1, 2, 3])
        .nemesis("stop-delay", 55, 60, None)  # a stop with nothing open
        .ops()
    )
    ws = fault_windows(ops)
    assert [(w.fault, w.start, w.end) for w in ws] == [
        ("loss", 10, 20), ("clock-strobe", 30, 40), ("bump", 50, 50)]
    assert ws[0].detail == "n1, share 0.3" and ws[2].detail == "[1, 2, 3]"


def test_a_failed_start_opens_no_window() -> None:
    ops = (
        H()
        .nemesis("pause-client", 0, 10, {"fault": "client-pause", "targets": [],
                                         "error": "no worker held a lock"})
        .nemesis("kill", 20, 30, {"fault": "kill", "targets": ["n1"], "nodes": ["n1"]})
        .nemesis("restart", 39, 40, {"fault": "kill", "targets": ["n1"], "nodes": ["n1"]})
        .op(0, "event", "enter", "k", {"fence": 1}, 1000)
        .ops()
    )
    assert [(w.fault, w.start, w.end) for w in fault_windows(ops)] == [
        ("client-pause", 10, 10), ("kill", 30, 40)]
