"""The hidden-grants checker on hand-made histories, and against a brute-force oracle."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.checker.analyze import analyze
from lockcheck.checker.api import CheckOptions, options_for
from lockcheck.checker.hidden_grants import check_hidden_grants

from .histories import H

COUNTS = CheckOptions(extra={"backend": "dynamodb", "fence_counts_grants": True})


def check(h: H, opts: CheckOptions = COUNTS) -> dict[str, Any]:
    return check_hidden_grants(h.ops(), opts)


def test_consecutive_fences_are_valid() -> None:
    h = H().acquire(0, "k", 1, 0, 10).acquire(1, "k", 2, 20, 30).acquire(0, "k", 3, 40, 50)
    r = check(h)
    assert r["valid"] is True and r["hidden_grant_count"] == 0 and r["gaps"] == []
    assert r["granted_fences"] == 3


def test_a_gap_explained_by_an_acquire_whose_outcome_is_unknown_is_valid() -> None:
    h = (H().acquire(0, "k", 1, 0, 10)
         .acquire(1, "k", None, 12, 40, result="info")  # may have got fence 2
         .acquire(2, "k", 3, 50, 60))
    r = check(h)
    assert r["valid"] is True and r["explained_by_info"] == 1


def test_an_unexplained_gap_is_invalid_and_names_the_failed_acquire() -> None:
    h = (H().acquire(0, "k", 1, 0, 10)
         .acquire(1, "k", None, 12, 40, result="fail")  # told busy: got fence 2
         .acquire(2, "k", 3, 50, 60)
         .acquire(3, "other", None, 12, 40, result="fail"))  # another name: no suspect
    r = check(h)
    assert r["valid"] is False and r["hidden_grant_count"] == 1
    (gap,) = r["gaps"]
    assert gap["key"] == "k" and gap["missing"] == [2] and gap["between"] == [1, 3]
    assert [a["process"] for a in gap["failed_acquires"]] == [1]
    assert gap["failed_acquire_count"] == 1 and gap["failed_errors"] == ["busy"]
    assert "fence 2" in r["summary"] and "'k'" in r["summary"]


def test_a_fail_outside_the_window_is_not_a_suspect() -> None:
    h = (H().acquire(0, "k", 1, 0, 10)
         .acquire(1, "k", None, 100, 110, result="fail")  # after fence 3's grant
         .acquire(2, "k", 3, 50, 60))
    (gap,) = check(h)["gaps"]
    assert gap["failed_acquires"] == []


def test_an_info_invoked_after_the_grant_above_the_gap_does_not_explain_it() -> None:
    h = (H().acquire(0, "k", 1, 0, 10).acquire(2, "k", 3, 50, 60)
         .acquire(1, "k", None, 70, 90, result="info"))
    r = check(h)
    assert r["valid"] is False and r["gaps"][0]["missing"] == [2]


def test_one_info_explains_one_missing_fence_only() -> None:
    h = (H().acquire(0, "k", 1, 0, 10)
         .acquire(1, "k", None, 12, 40, result="info")
         .acquire(2, "k", 4, 50, 60))
    r = check(h)
    assert r["valid"] is False and r["hidden_grant_count"] == 1
    assert r["explained_by_info"] == 1 and r["gaps"][0]["unexplained"] == 1


def test_fences_missing_before_the_first_grant_count() -> None:
    h = H().acquire(1, "k", None, 0, 5, result="fail").acquire(0, "k", 2, 10, 20)
    r = check(h)
    assert r["valid"] is False and r["gaps"][0]["missing"] == [1]
    assert r["gaps"][0]["between"] == [None, 2]


def test_a_repeated_or_regressing_fence_is_not_this_checkers_business() -> None:
    # a counter that went back (the fencing checker reports it); no number is missing
    h = (H().acquire(0, "k", 1, 0, 10).acquire(1, "k", 2, 20, 30)
         .acquire(2, "k", 1, 40, 50).acquire(0, "k", 2, 60, 70))
    r = check(h)
    assert r["valid"] is True and r["hidden_grant_count"] == 0


def test_a_backend_without_the_promise_abstains() -> None:
    h = H().acquire(0, "k", 1, 0, 10).acquire(1, "k", 5, 20, 30)
    for opts in (CheckOptions(), CheckOptions(extra={"backend": "etcd",
                                                     "fence_counts_grants": False})):
        r = check(h, opts)
        assert r["valid"] == "unknown" and r["nothing_checked"] and r["applicable"] is False


def test_no_fenced_grant_abstains() -> None:
    r = check(H().acquire(0, "k", None, 0, 10))
    assert r["valid"] == "unknown" and r["nothing_checked"]


def test_the_promise_comes_from_the_backend_table() -> None:
    assert options_for({"backend": "dynamodb"}).extra["fence_counts_grants"] is True
    assert options_for({"backend": "dynamodb-retries"}).extra["fence_counts_grants"] is True
    assert options_for({"backend": "postgres"}).extra["fence_counts_grants"] is True
    assert options_for({"backend": "etcd"}).extra["fence_counts_grants"] is False
    assert options_for({"backend": "redis"}).extra["fence_counts_grants"] is False
    # the user's own client keeps none of the backend's promises
    own = options_for({"backend": "dynamodb", "client": {"name": "mine"}})
    assert own.extra["fence_counts_grants"] is False
    assert own.extra["own_client"] is True
    assert options_for({}).extra == {}


def test_a_hidden_grant_makes_a_run_invalid_and_others_abstain() -> None:
    h = (H().acquire(0, "k", 1, 0, 10).release(0, "k", 1, 11, 12)
         .acquire(1, "k", None, 12, 40, result="fail")
         .acquire(2, "k", 3, 50, 60).release(2, "k", 3, 61, 62))
    for workload in ("mutex", "fenced"):
        test = {"backend": "dynamodb", "workload": workload}
        r = analyze(h.ops(), test, metrics=False)
        assert "hidden-grants" in r["checkers"]
        assert r["valid"] is False and "hidden-grants" in r["summary"], r["summary"]
    r = analyze(h.ops(), {"backend": "etcd", "workload": "mutex"}, metrics=False)
    assert r["checkers"]["hidden-grants"]["valid"] == "unknown"
    assert r["valid"] is True, r["summary"]


# -- against a brute-force oracle ------------------------------------------------------------


def _oracle(granted: dict[int, int], infos: list[int]) -> int:
    """The fewest missing fences left unexplained, by trying every assignment: fence m
    may be explained by an info invoked before the completion of the grant just above
    m, each info at most once."""
    top = max(granted)
    missing = [m for m in range(1, top) if m not in granted]

    def deadline(m: int) -> int:
        return granted[min(f for f in granted if f > m)]

    def best(i: int, free: frozenset[int]) -> int:
        if i == len(missing):
            return 0
        options = [best(i + 1, free)]  # leave missing[i] unexplained
        for j in free:
            if infos[j] < deadline(missing[i]):
                options.append(1 + best(i + 1, free - {j}))
        return max(options)

    return len(missing) - best(0, frozenset(range(len(infos))))


@settings(max_examples=300, deadline=None)
@given(
    fences=st.sets(st.integers(1, 9), min_size=1, max_size=6),
    infos=st.lists(st.integers(0, 200), max_size=5),
    data=st.data(),
)
def test_the_count_matches_a_brute_force_oracle(fences: set[int], infos: list[int],
                                                data: st.DataObject) -> None:
    times = sorted(data.draw(st.lists(st.integers(1, 200), min_size=len(fences),
                                      max_size=len(fences), unique=True)))
    granted = dict(zip(sorted(fences), times, strict=True))  # fences grow with time
    h = H()
    for p, (f, t) in enumerate(granted.items()):
        h.acquire(p, "k", f, t - 1, t)
    for q, t in enumerate(infos):
        h.acquire(100 + q, "k", None, t, t + 500, result="info")
    r = check(h)
    want = _oracle(granted, infos)
    assert r["hidden_grant_count"] == want
    assert r["valid"] is (want == 0)
