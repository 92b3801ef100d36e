from __future__ import annotations

from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.fencing import check_fencing

from .histories import H

OPTS = CheckOptions(workload="fenced")


def check(h: H) -> dict[str, Any]:
    return check_fencing(h.ops(), OPTS)


def holder(h: H, p: int, key: str, fence: int | None, t: int) -> H:
    """acquire (ok at t) + enter; the caller adds writes and the exit."""
    return h.acquire(p, key, fence, t - 5, t).enter(p, key, fence, t + 1)


# -- no fences, no writes ------------------------------------------------------------------


def test_no_fences_and_no_writes_is_unknown_with_a_note() -> None:
    h = H().acquire(0, "k", None, 0, 10).section(0, "k", None, 11, 20).release(0, "k", None, 21, 30)
    r = check(h)
    assert r["valid"] == "unknown" and r["resource_valid"] == "unknown"
    assert "nothing to check" in r["note"] and r["nothing_checked"]
    assert r["acquisitions"] == 1 and r["fenced_acquisitions"] == 0


def test_empty_history() -> None:
    r = check(H())
    assert r["valid"] == "unknown" and r["nothing_checked"]


# -- fence tokens ----------------------------------------------------------------------------


def test_unique_increasing_fences_are_valid() -> None:
    h = H().acquire(0, "k", 1, 0, 10).acquire(1, "k", 2, 20, 30).acquire(2, "j", 1, 5, 15)
    r = check(h)
    assert r["valid"] is True
    assert "note" not in r
    assert r["acquisitions"] == r["fenced_acquisitions"] == 3
    assert r["duplicate_fences"] == [] and r["regression_count"] == 0


def test_duplicate_fence_is_a_violation_but_not_of_the_resource() -> None:
    h = H().acquire(0, "k", 7, 0, 10).acquire(1, "k", 7, 20, 30)
    r = check(h)
    assert r["valid"] is False
    assert r["resource_valid"] is True
    assert r["duplicate_fence_count"] == 1
    assert r["duplicate_fences"] == [
        {
            "key": "k",
            "fence": 7,
            "processes": [0, 1],
            "times": [10, 30],
            "invoke_times": [0, 20],
        }
    ]


def test_same_fence_on_different_keys_is_fine() -> None:
    r = check(H().acquire(0, "a", 1, 0, 10).acquire(1, "b", 1, 20, 30))
    assert r["valid"] is True


def test_regression_without_duplicate_is_reported_not_a_violation() -> None:
    # a restarted Redis that lost its counter: 5, 6, then 2
    h = H().acquire(0, "k", 5, 0, 10).acquire(1, "k", 6, 20, 30).acquire(2, "k", 2, 40, 50)
    r = check(h)
    assert r["valid"] is True
    assert r["regression_count"] == 1
    assert r["regressions"] == [
        {
            "key": "k",
            "fence": 2,
            "previous_max": 6,
            "previous_process": 1,
            "process": 2,
            "time": 50,
        }
    ]


def test_regression_into_an_old_fence_is_also_a_duplicate() -> None:
    h = H().acquire(0, "k", 1, 0, 10).acquire(1, "k", 2, 20, 30).acquire(2, "k", 1, 40, 50)
    r = check(h)
    assert r["valid"] is False
    assert (r["duplicate_fence_count"], r["regression_count"]) == (1, 1)


def test_tokens_are_ordered_by_completion_time() -> None:
    # invoked in order 0, 1 but completed 1 then 0: no regression 2 -> 1 by invoke order
    h = H().acquire(0, "k", 2, 0, 50).acquire(1, "k", 1, 10, 20)
    r = check(h)
    assert r["regression_count"] == 0


def test_failed_and_unknown_acquires_are_ignored() -> None:
    h = (
        H()
        .acquire(0, "k", 1, 0, 10)
        .acquire(1, "k", None, 5, 15, result="fail")
        .acquire(2, "k", None, 6, None, result=None)  # no completion at all
        .acquire(3, "k", None, 7, 30, result="info")
    )
    r = check(h)
    assert r["acquisitions"] == 1
    assert r["valid"] is True


# -- resource writes ---------------------------------------------------------------------------


def test_fenced_resource_rejects_the_stale_holder_a_save() -> None:
    h = H()
    holder(h, 0, "k", 1, 10).write(0, "k", 1, 20, 25, seq=1)
    holder(h, 1, "k", 2, 30).write(1, "k", 2, 40, 45, seq=2, max_fence=1)
    # process 0 wakes up from a pause and writes with its old fence
    h.write(0, "k", 1, 50, 55, seq=3, max_fence=2, result="rejected")
    h.exit(0, "k", 1, 60, "not-owner").exit(1, "k", 2, 70)
    r = check(h)
    assert r["valid"] is True and r["resource_valid"] is True
    assert (r["accepted"], r["rejected"], r["saves"]) == (2, 1, 1)
    assert r["save_examples"] == [
        {"key": "k", "process": 0, "fence": 1, "seq": 3, "time": 55, "max_accepted": 2}
    ]
    assert r["interleaved_writes"] == []
    assert r["max_fence_mismatches"] == 0
    assert (r["saves_stale_holder"], r["saves_regressed_fence"]) == (1, 0)


def test_a_current_holder_refused_after_a_fence_regression_is_told_apart() -> None:
    # a lock server restarted empty: its counter starts again at 1, below what the
    # resource accepted; the new holder is nobody's stale holder, but is refused
    h = H()
    h.section(0, "k", 7, 0, 30).write(0, "k", 7, 10, 20, seq=1)
    h.section(1, "k", 1, 40, 80).write(1, "k", 1, 50, 60, seq=2, max_fence=7,
                                       result="rejected")
    r = check(h)
    assert r["resource_valid"] is True
    assert (r["saves"], r["saves_stale_holder"], r["saves_regressed_fence"]) == (1, 0, 1)


def test_unfenced_resource_accepting_a_stale_write_is_a_violation() -> None:
    h = H()
    holder(h, 0, "k", 1, 10).write(0, "k", 1, 20, 25, seq=1)
    holder(h, 1, "k", 2, 30).write(1, "k", 2, 40, 45, seq=2, max_fence=1)
    h.write(0, "k", 1, 50, 55, seq=3, max_fence=2)  # accepted: stale
    h.exit(0, "k", 1, 60, "not-owner").exit(1, "k", 2, 70)
    r = check(h)
    assert r["valid"] is False and r["resource_valid"] is False
    assert r["stale_accepted_count"] == 1
    assert r["stale_accepted"] == [
        {
            "key": "k",
            "process": 0,
            "fence": 1,
            "seq": 3,
            "time": 55,
            "max_accepted": 2,
            "max_accepted_by": {"process": 1, "fence": 2, "seq": 2, "time": 45},
        }
    ]
    # the older holder also wrote after the newer one inside overlapping sections
    assert r["interleaved_count"] == 1
    assert r["interleaved_write_count"] == 1


def test_equal_fence_accepted_twice_is_stale() -> None:
    h = H().write(0, "k", 3, 0, 10, seq=1).write(1, "k", 3, 20, 30, seq=2, max_fence=3)
    r = check(h)
    assert r["stale_accepted_count"] == 1
    assert r["resource_valid"] is False


def test_writes_ordered_by_seq_not_completion_time() -> None:
    # fence 2's write was applied first (seq 1) but its reply arrived last
    h = H().write(1, "k", 2, 0, 100, seq=1).write(0, "k", 1, 10, 20, seq=2, max_fence=2)
    r = check(h)
    assert r["stale_accepted_count"] == 1
    assert r["stale_accepted"][0]["fence"] == 1
    assert r["keys_ordered_by_time"] == []


def test_missing_seq_falls_back_to_completion_time() -> None:
    h = H().write(1, "k", 2, 0, 100).write(0, "k", 1, 10, 20)
    r = check(h)
    assert r["stale_accepted_count"] == 0  # by completion time fence 1 came first
    assert r["keys_ordered_by_time"] == ["k"]


def test_reported_max_fence_is_not_trusted() -> None:
    # the resource claims nothing was accepted before; fence 2 was accepted at seq 1
    h = H().write(1, "k", 2, 0, 10, seq=1).write(0, "k", 1, 20, 30, seq=2, max_fence=None)
    r = check(h)
    assert r["stale_accepted_count"] == 1
    assert r["max_fence_mismatches"] == 1


def test_info_and_failed_writes() -> None:
    h = (
        H()
        .write(0, "k", 1, 0, 10, seq=1)
        .write(0, "k", 1, 20, 30, result="info")
        .write(0, "k", 1, 40, None, result=None)  # the run ended first
        .write(0, "k", 1, 50, 60, result="fail")  # connection refused: never applied
        .write(1, "k", 2, 70, 80, seq=2, max_fence=1)
    )
    r = check(h)
    assert r["valid"] is True
    assert (r["accepted"], r["rejected"], r["unknown_writes"], r["failed_writes"]) == (2, 0, 2, 1)


def test_rejection_above_the_max_is_unexplained_not_a_save() -> None:
    h = H().write(0, "k", 1, 0, 10, seq=1).write(1, "k", 5, 20, 30, seq=2, result="rejected")
    r = check(h)
    assert r["valid"] is True
    assert (r["saves"], r["unexplained_rejections"]) == (0, 1)


def test_no_fence_backend_against_a_fenced_resource_is_all_rejected() -> None:
    h = H().section(0, "k", None, 0, 20).write(0, "k", None, 5, 10, seq=1, result="rejected")
    r = check(h)
    assert r["valid"] is True
    assert (r["rejected"], r["unfenced_rejections"], r["saves"]) == (1, 1, 0)
    assert r["unexplained_rejections"] == 0
    assert "note" not in r


def test_no_fence_backend_against_an_unfenced_resource_without_overlap() -> None:
    h = H().section(0, "k", None, 0, 20).write(0, "k", None, 5, 10, seq=1)
    h.section(1, "k", None, 30, 40).write(1, "k", None, 31, 35, seq=2)
    r = check(h)
    assert r["valid"] is True
    assert (r["accepted"], r["stale_accepted_count"], r["fenced_acquisitions"]) == (2, 0, 0)


def test_unfenced_write_after_a_fenced_one_is_stale() -> None:
    h = H().write(0, "k", 4, 0, 10, seq=1).write(1, "k", None, 20, 30, seq=2, max_fence=4)
    assert check(h)["stale_accepted_count"] == 1


def test_keys_have_their_own_max() -> None:
    h = H().write(0, "a", 5, 0, 10, seq=1).write(1, "b", 1, 20, 30, seq=1)
    assert check(h)["valid"] is True


def test_stale_examples_capped_and_counted() -> None:
    h = H().write(0, "k", 1000, 0, 1, seq=1)
    for i in range(150):
        h.write(1, "k", i, 10 + 10 * i, 15 + 10 * i, seq=2 + i, max_fence=1000)
    r = check(h)
    assert r["stale_accepted_count"] == 150
    assert len(r["stale_accepted"]) == 100


# -- interleaved writes (holder-based lost update) -------------------------------------------


def no_fence_overlap(older_writes_at: list[tuple[int, int]]) -> H:
    """No fences, unfenced resource. Process 0 holds [10, 100]; process 1 holds [50, 150]
    and writes at seq 2 (t=60). Process 0 writes once at seq 1 (t=20) and then at the
    given (time, seq)s."""
    h = H()
    h.acquire(0, "k", None, 0, 5).enter(0, "k", None, 10)
    h.write(0, "k", None, 20, 25, seq=1)
    h.acquire(1, "k", None, 40, 45).enter(1, "k", None, 50)
    h.write(1, "k", None, 60, 65, seq=2)
    for t, seq in older_writes_at:
        h.write(0, "k", None, t, t + 5, seq=seq)
    h.exit(0, "k", None, 100, "lease-expired").exit(1, "k", None, 150)
    return h


def test_older_holder_writing_after_the_newer_is_interleaved() -> None:
    r = check(no_fence_overlap([(70, 3), (80, 4)]))
    assert r["valid"] is False and r["resource_valid"] is False
    assert r["stale_accepted_count"] == 0  # nothing to compare without fences
    assert r["interleaved_count"] == 1
    assert r["interleaved_write_count"] == 2
    [v] = r["interleaved_writes"]
    assert v["processes"] == [0, 1]
    assert v["fences"] == [None, None]
    assert v["seqs"] == [3, 2]
    assert v["late_writes"] == 2
    assert v["overlap"] == [50, 100]
    assert v["older_write"] == {"process": 0, "fence": None, "seq": 3, "time": 75}


def test_overlap_without_late_older_writes_is_fine() -> None:
    r = check(no_fence_overlap([]))
    assert r["valid"] is True
    assert r["interleaved_count"] == 0
    assert "note" not in r


def test_older_write_applied_before_the_newer_one_is_fine() -> None:
    # process 0's second write was invoked at t=55 (inside both sections), applied first
    h = no_fence_overlap([])
    h.write(0, "k", None, 55, 58, seq=0)
    assert check(h)["valid"] is True


def test_sequential_holders_never_interleave() -> None:
    h = H()
    h.section(0, "k", None, 10, 30).write(0, "k", None, 20, 25, seq=2)
    h.section(1, "k", None, 40, 60).write(1, "k", None, 45, 50, seq=1)  # seq order odd but
    r = check(h)  # the sections do not overlap: not this checker's business
    assert r["interleaved_count"] == 0


def test_writes_outside_any_section_are_counted() -> None:
    h = H().section(0, "k", None, 10, 20).write(0, "k", None, 30, 35, seq=1)
    r = check(h)
    assert r["writes_outside_sections"] == 1
    assert r["valid"] is True


def test_late_writes_counted_once_across_several_newer_holders() -> None:
    h = H()
    h.enter(0, "k", None, 0)
    h.enter(1, "k", None, 10).write(1, "k", None, 11, 12, seq=1).exit(1, "k", None, 20)
    h.enter(2, "k", None, 30).write(2, "k", None, 31, 32, seq=2).exit(2, "k", None, 40)
    h.write(0, "k", None, 50, 55, seq=3).exit(0, "k", None, 60)
    r = check(h)
    assert r["interleaved_count"] == 2
    assert r["interleaved_write_count"] == 1


def test_rejected_writes_do_not_interleave() -> None:
    h = no_fence_overlap([])
    h.write(0, "k", None, 70, 75, seq=3, result="rejected")
    r = check(h)
    assert r["interleaved_count"] == 0
