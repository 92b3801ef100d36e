from __future__ import annotations

from typing import Any

from lockcheck.checker.api import CheckOptions, check_safe
from lockcheck.checker.fencing import check_fencing
from lockcheck.checker.mutual_exclusion import check_mutual_exclusion
from lockcheck.checker.verdict import run_verdict

from .histories import H


def me(violations: int = 0, keys: int = 1, sections: int = 10) -> dict[str, Any]:
    return {
        "valid": violations == 0,
        "sections": sections,
        "violation_count": violations,
        "violations": [],
        "keys": {f"k{i}": 1 for i in range(keys)} if violations else {},
    }


def fe(
    stale: int = 0,
    interleaved: int = 0,
    dups: int = 0,
    saves: int = 0,
    accepted: int = 10,
    fenced: int = 5,
) -> dict[str, Any]:
    resource_valid = stale == 0 and interleaved == 0
    return {
        "valid": resource_valid and dups == 0,
        "resource_valid": resource_valid,
        "stale_accepted_count": stale,
        "interleaved_count": 1 if interleaved else 0,
        "interleaved_write_count": interleaved,
        "duplicate_fence_count": dups,
        "saves": saves,
        "accepted": accepted,
        "regression_count": 0,
        "fenced_acquisitions": fenced,
    }


UNKNOWN = {"valid": "unknown", "error": "ValueError: boom"}


# -- mutex ---------------------------------------------------------------------------------


def test_mutex_valid() -> None:
    valid, text = run_verdict("mutex", {"mutual-exclusion": me(), "fencing": fe(accepted=0)})
    assert valid is True
    assert text == (
        "mutual exclusion held: 10 critical sections, no overlaps; "
        "fence tokens unique (0 regressions)"
    )


def test_mutex_violated() -> None:
    valid, text = run_verdict(
        "mutex", {"mutual-exclusion": me(violations=3, keys=2), "fencing": fe()}
    )
    assert valid is False
    assert text == "mutual exclusion violated: 3 overlapping critical sections on 2 keys"


def test_mutex_singular() -> None:
    _, text = run_verdict("mutex", {"mutual-exclusion": me(violations=1, keys=1)})
    assert text == "mutual exclusion violated: 1 overlapping critical section on 1 key"


def test_mutex_duplicate_fences_fail_the_lock() -> None:
    valid, text = run_verdict("mutex", {"mutual-exclusion": me(), "fencing": fe(dups=2)})
    assert valid is False
    assert text == "fencing violated: 2 duplicate fence tokens granted"


def test_mutex_unknown_unless_something_is_false() -> None:
    valid, text = run_verdict("mutex", {"mutual-exclusion": me(), "fencing": UNKNOWN})
    assert valid == "unknown"
    assert text == "unknown: fencing: ValueError: boom"
    valid, _ = run_verdict("mutex", {"mutual-exclusion": me(violations=1), "fencing": UNKNOWN})
    assert valid is False


def test_mutex_every_checker_decides() -> None:
    valid, text = run_verdict("mutex", {"mutual-exclusion": me(), "lease-safety": {"valid": False}})
    assert valid is False
    assert text == "lease-safety failed"


def test_no_results_is_unknown() -> None:
    assert run_verdict("mutex", {})[0] == "unknown"
    assert run_verdict("fenced", {})[0] == "unknown"


# -- fenced --------------------------------------------------------------------------------


def test_fenced_lock_failed_resource_held() -> None:
    # overlaps are a failure of the lock even where the fence kept the resource safe
    valid, text = run_verdict(
        "fenced",
        {"mutual-exclusion": me(violations=3, keys=1), "fencing": fe(saves=41, dups=1)},
    )
    assert valid is False
    assert text == (
        "the lock failed, the resource held: mutual exclusion violated: 3 overlapping "
        "critical sections on 1 key; 0 stale writes accepted, 41 saves (writes refused "
        "from a holder that had lost the lock); 1 duplicate fence token granted"
    )


def test_fenced_lease_safety_or_linearizability_failing_is_a_lock_failure() -> None:
    for name in ("lease-safety", "linearizable"):
        valid, text = run_verdict("fenced", {"mutual-exclusion": me(), "fencing": fe(saves=1),
                                             name: {"valid": False}})
        assert valid is False and text.startswith("the lock failed, the resource held: "
                                                  f"{name} failed"), text


def test_fenced_safe_without_overlaps() -> None:
    valid, text = run_verdict("fenced", {"mutual-exclusion": me(), "fencing": fe(saves=1)})
    assert valid is True
    assert text == (
        "resource safe: 0 stale writes accepted, 1 save (writes refused from a holder that "
        "had lost the lock); no overlapping critical sections"
    )


def test_fence_regressions_are_not_saves() -> None:
    f = {**fe(saves=223), "saves_stale_holder": 0, "saves_regressed_fence": 223}
    valid, text = run_verdict("fenced", {"mutual-exclusion": me(violations=2), "fencing": f})
    assert valid is False
    assert "0 saves" in text and "223 fence regressions" in text
    assert "fence went backwards" in text


def test_fenced_corrupted_by_interleaving() -> None:
    valid, text = run_verdict(
        "fenced", {"mutual-exclusion": me(violations=2, keys=1), "fencing": fe(interleaved=5)}
    )
    assert valid is False
    assert text == (
        "the lock and the resource failed: mutual exclusion violated: 2 overlapping "
        "critical sections on 1 key; resource corrupted: 5 writes accepted from an "
        "overlapping older holder"
    )


def test_fenced_corrupted_by_stale_writes() -> None:
    valid, text = run_verdict("fenced", {"fencing": fe(stale=4, interleaved=1)})
    assert valid is False
    assert text == (
        "the resource failed: resource corrupted: 1 write accepted from an overlapping "
        "older holder; 4 stale writes accepted (fence not above the highest)"
    )


def test_fenced_without_fencing_result() -> None:
    valid, text = run_verdict("fenced", {"mutual-exclusion": me()})
    assert valid == "unknown"
    assert "no fencing result" in text
    valid, text = run_verdict("fenced", {"mutual-exclusion": me(violations=1)})
    assert valid is False and text.startswith("the lock failed (the resource was not checked)")


def test_fenced_with_a_crashed_fencing_checker() -> None:
    valid, _ = run_verdict("fenced", {"mutual-exclusion": me(), "fencing": UNKNOWN})
    assert valid == "unknown"
    valid, _ = run_verdict("fenced", {"mutual-exclusion": me(violations=1), "fencing": UNKNOWN})
    assert valid is False


def test_fenced_without_a_fence_says_the_resource_cannot_refuse() -> None:
    nf = {**fe(accepted=0, fenced=0), "unfenced_rejections": 12}
    valid, text = run_verdict("fenced", {"mutual-exclusion": me(violations=2), "fencing": nf})
    assert valid is False
    assert text.startswith("the lock failed; no fence: the resource cannot refuse")
    valid, text = run_verdict("fenced", {"mutual-exclusion": me(), "fencing": nf})
    assert valid is True and "no fence: the resource cannot refuse" in text
    assert "unknown" not in text


def test_fenced_another_checker_unknown_does_not_decide() -> None:
    # the resource is on trial: a lock-level checker that timed out changes nothing
    assert run_verdict("fenced", {"fencing": fe(), "lease-safety": UNKNOWN})[0] is True
    assert run_verdict("fenced", {"fencing": fe(stale=1), "lease-safety": UNKNOWN})[0] is False


def test_fenced_a_checker_of_the_resource_false_beside_a_safe_resource() -> None:
    assert run_verdict("fenced", {"fencing": fe(), "lock-set": {"valid": False}})[0] is True


def test_fenced_without_writes_is_unknown_not_safe() -> None:
    valid, text = run_verdict("fenced", {"fencing": fe(accepted=0)})
    assert valid == "unknown"
    assert "no write reached the resource" in text


def test_a_checker_with_nothing_to_check_abstains() -> None:
    idle = {"valid": "unknown", "nothing_checked": "no fence tokens"}
    assert run_verdict("mutex", {"mutual-exclusion": me(), "fencing": idle})[0] is True
    assert run_verdict("mutex", {"mutual-exclusion": me(violations=1), "fencing": idle})[0] is False
    valid, text = run_verdict("mutex", {"fencing": idle})
    assert valid == "unknown" and "nothing was checked" in text


# -- end to end on a real history ----------------------------------------------------------


def test_end_to_end_paused_holder_saved_by_the_fence() -> None:
    h = H()
    h.acquire(0, "k", 1, 0, 5).enter(0, "k", 1, 6).write(0, "k", 1, 10, 15, seq=1)
    # process 0 pauses; its lease expires; process 1 takes over
    h.acquire(1, "k", 2, 50, 55).enter(1, "k", 2, 56).write(1, "k", 2, 60, 65, seq=2, max_fence=1)
    h.write(0, "k", 1, 70, 75, seq=3, max_fence=2, result="rejected")
    h.exit(0, "k", 1, 80, "not-owner").exit(1, "k", 2, 90)
    ops, opts = h.ops(), CheckOptions(workload="fenced")
    results = {
        "mutual-exclusion": check_safe("mutual-exclusion", check_mutual_exclusion, ops, opts),
        "fencing": check_safe("fencing", check_fencing, ops, opts),
    }
    assert results["mutual-exclusion"]["valid"] is False
    valid, text = run_verdict("fenced", results)
    assert valid is False
    assert text == (
        "the lock failed, the resource held: mutual exclusion violated: 1 overlapping "
        "critical section on 1 key; 0 stale writes accepted, 1 save (writes refused from a "
        "holder that had lost the lock)"
    )
    assert run_verdict("mutex", results)[0] is False


# -- the workloads' rules --------------------------------------------------------------------


def test_each_workload_names_its_rule_and_default_checkers() -> None:
    """The verdict comes from the rule the workload entry names, and a history without
    checkers in its test.json runs the workload's own list."""
    from lockcheck.checker.registry import DEFAULT_CHECKERS
    from lockcheck.registry import load
    from lockcheck.workloads.registry import WORKLOADS

    lost = {"mutual-exclusion": me(violations=1), "fencing": fe(saves=1),
            "lock-set": {"valid": True, "summary": "every add survived"},
            "settlement": {"valid": True, "summary": "each merchant-day settled once"},
            "leadership": {"valid": True, "summary": "one leader at a time"}}
    expect = {"lock": False, "lock+resource": False, "resource": True}
    for name, w in WORKLOADS.items():
        assert DEFAULT_CHECKERS[name] == list(w.checkers)
        assert run_verdict(name, lost) == load(w.verdict)(lost)
        assert run_verdict(name, lost)[0] is expect[w.on_trial], name
    valid, text = run_verdict("no-such-workload", lost)
    assert valid is False and "unknown workload 'no-such-workload'" in text
