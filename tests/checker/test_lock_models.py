"""Hand-written histories for the `mutex` and `fenced-mutex` models, the fast path and
the `linearizable` checker (one test per kind of violation, crashed ops, limits)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from lockcheck.checker.api import CheckOptions, check_safe
from lockcheck.checker.fastpath import fast_check
from lockcheck.checker.linearizable import check_linearizable, lock_operations
from lockcheck.checker.porcupine import UNKNOWN, CheckResult, Operation, check_operations
from lockcheck.checker.porcupine.lock_models import (
    LockInput,
    LockOutput,
    fenced_mutex,
    mutex,
)
from lockcheck.history import Op

from .histories import H

INF = math.inf


def acq(c: int, call: float, ret: float, fence: int | None = None, key: str = "k") -> Operation:
    out: Any = UNKNOWN if ret == INF else LockOutput(fence)
    return Operation(c, LockInput("acquire", c, key), call, out, ret)


def rel(c: int, call: float, ret: float, fence: int | None = None, key: str = "k") -> Operation:
    out: Any = UNKNOWN if ret == INF else LockOutput(None)
    return Operation(c, LockInput("release", c, key, fence), call, out, ret)


def ren(c: int, call: float, ret: float, fence: int | None = None, key: str = "k") -> Operation:
    out: Any = UNKNOWN if ret == INF else LockOutput(None)
    return Operation(c, LockInput("renew", c, key, fence), call, out, ret)


def ok(model: Any, *ops: Operation) -> bool:
    res = check_operations(model, list(ops))
    assert res is not CheckResult.UNKNOWN
    return res is CheckResult.OK


# ------------------------------------------------------------------ mutex


def test_mutex_sequential_acquire_release() -> None:
    assert ok(mutex, acq(0, 0, 1), rel(0, 2, 3), acq(1, 4, 5), rel(1, 6, 7))


def test_mutex_two_holders_is_illegal() -> None:
    assert not ok(mutex, acq(0, 0, 1), acq(1, 2, 3))


def test_mutex_overlapping_release_and_acquire_can_order_either_way() -> None:
    assert ok(mutex, acq(0, 0, 1), rel(0, 2, 6), acq(1, 3, 5))


def test_mutex_release_by_non_holder_is_illegal() -> None:
    """Knossos's mutex would accept this; ours is owner-aware."""
    assert not ok(mutex, acq(0, 0, 1), rel(1, 2, 3))


def test_mutex_release_of_free_lock_is_illegal() -> None:
    assert not ok(mutex, rel(0, 0, 1))


def test_mutex_renew_needs_holder() -> None:
    assert ok(mutex, acq(0, 0, 1), ren(0, 2, 3), rel(0, 4, 5))
    assert not ok(mutex, acq(0, 0, 1), ren(1, 2, 3))
    assert not ok(mutex, acq(0, 0, 1), rel(0, 2, 3), ren(0, 4, 5))


def test_mutex_crashed_acquire_may_not_have_happened() -> None:
    assert ok(mutex, acq(0, 0, INF), acq(1, 2, 3))


def test_mutex_crashed_acquire_may_have_happened() -> None:
    # 0's release can only be legal if its crashed acquire took effect
    assert ok(mutex, acq(0, 0, INF), rel(0, 2, 3), acq(1, 4, 5))


def test_mutex_crashed_acquire_cannot_act_before_its_call() -> None:
    assert not ok(mutex, rel(0, 0, 1), acq(0, 2, INF))


def test_mutex_crashed_release_may_have_freed_the_lock() -> None:
    assert ok(mutex, acq(0, 0, 1), rel(0, 2, INF), acq(1, 4, 5))


def test_mutex_lease_expiry_is_not_modelled() -> None:
    """With a TTL service a holder may lose the lock without releasing: `mutex`
    calls that illegal, `fenced-mutex` accepts it (given increasing fences)."""
    hist = [acq(0, 0, 1, fence=1), acq(1, 10, 11, fence=2)]
    assert not ok(mutex, *hist)
    assert ok(fenced_mutex, *hist)


def test_mutex_keys_are_independent() -> None:
    assert ok(mutex, acq(0, 0, 1, key="a"), acq(1, 2, 3, key="b"))
    assert not ok(mutex, acq(0, 0, 1, key="a"), acq(1, 2, 3, key="a"), acq(2, 2, 3, key="b"))


# ------------------------------------------------------------------ fenced mutex


def test_fenced_grants_in_fence_order() -> None:
    assert ok(fenced_mutex, acq(0, 0, 1, 1), acq(1, 2, 3, 2), acq(0, 4, 5, 7))


def test_fenced_fence_going_backwards_in_real_time_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 5), acq(1, 2, 3, 4))


def test_fenced_concurrent_grants_may_have_either_order() -> None:
    assert ok(fenced_mutex, acq(0, 0, 5, 5), acq(1, 2, 6, 4))


def test_fenced_touching_intervals_are_concurrent() -> None:
    assert ok(fenced_mutex, acq(0, 0, 2, 5), acq(1, 2, 3, 4))
    assert not ok(fenced_mutex, acq(0, 0, 2, 5), acq(1, 3, 4, 4))


def test_fenced_duplicate_fence_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 5, 3), acq(1, 1, 6, 3))


def test_fenced_release_by_non_holder_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 1), rel(1, 2, 3, 1))


def test_fenced_release_of_old_lease_after_new_grant_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 1), acq(1, 2, 3, 2), rel(0, 4, 5, 1))
    # ...but fine if the release may have come first
    assert ok(fenced_mutex, acq(0, 0, 1, 1), acq(1, 2, 5, 2), rel(0, 4, 6, 1))


def test_fenced_release_must_name_the_current_lease() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 1), acq(0, 2, 3, 2), rel(0, 4, 5, 1))
    assert ok(fenced_mutex, acq(0, 0, 1, 1), acq(0, 2, 3, 2), rel(0, 4, 5, 2))


def test_fenced_double_release_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 1), rel(0, 2, 3, 1), rel(0, 4, 5, 1))


def test_fenced_renew_after_release_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 1), rel(0, 2, 3, 1), ren(0, 4, 5, 1))
    assert ok(fenced_mutex, acq(0, 0, 1, 1), ren(0, 2, 3, 1), rel(0, 4, 5, 1))


def test_fenced_renew_after_takeover_is_illegal() -> None:
    assert not ok(fenced_mutex, acq(0, 0, 1, 1), acq(1, 2, 3, 2), ren(0, 4, 5, 1))


def test_fenced_expiry_without_release_is_allowed() -> None:
    assert ok(fenced_mutex, acq(0, 0, 1, 1), ren(0, 2, 3, 1), acq(1, 10, 11, 2), rel(1, 12, 13, 2))


def test_fenced_acquire_without_fence_is_unordered() -> None:
    assert ok(fenced_mutex, acq(0, 0, 1, None), acq(1, 2, 3, None), rel(1, 4, 5, None))


def test_fenced_crashed_acquire_consumes_a_fence() -> None:
    # 0's crashed acquire took effect (its release proves it), so fence 3 was granted
    # to it: a later grant of 3 or less is illegal, 4 is fine.
    assert ok(fenced_mutex, acq(0, 0, INF), rel(0, 2, 3, 3), acq(1, 4, 5, 4))
    assert not ok(fenced_mutex, acq(0, 0, INF), rel(0, 2, 3, 3), acq(1, 4, 5, 3))


def test_fenced_crashed_acquire_cannot_get_a_fence_below_the_floor() -> None:
    # fence 9 was granted before 0 even asked, so 0 cannot hold lease 7
    assert not ok(fenced_mutex, acq(1, 0, 1, 9), acq(0, 2, INF), rel(0, 3, 4, 7))
    assert ok(fenced_mutex, acq(1, 0, 1, 9), acq(0, 2, INF), rel(0, 3, 4, 10))


def test_fenced_crashed_acquire_needs_a_free_integer_fence() -> None:
    # 0's lease must have a fence in (1, 2): there is none
    assert not ok(
        fenced_mutex, acq(1, 0, 1, 1), acq(0, 2, INF), rel(0, 3, 4, None), acq(2, 5, 6, 2)
    )
    assert ok(fenced_mutex, acq(1, 0, 1, 1), acq(0, 2, INF), rel(0, 3, 4, None), acq(2, 5, 6, 3))


def test_fenced_crashed_release_and_renew_are_optional() -> None:
    # 1's crashed renew and release name a lease it never held: no point of any order
    # makes them legal, so the history is linearizable only because a crashed op may
    # never take effect (were crashed ops required, it would not be)
    assert ok(fenced_mutex, acq(0, 0, 1, 1), ren(1, 2, INF, 1), rel(1, 3, INF, 1),
              ren(0, 4, 5, 1), rel(0, 6, 7, 1))
    # 0's own crashed release may take effect only after its later renew ok (or never)
    assert ok(fenced_mutex, acq(0, 0, 1, 1), rel(0, 2, INF, 1), ren(0, 3, INF, 1), ren(0, 4, 5, 1))


def test_mutex_crashed_ops_that_cannot_take_effect_are_left_out() -> None:
    # 1 never holds the lock: its crashed release and renew, and its crashed acquire
    # while 0 holds to the end, fit nowhere; they are left out
    assert ok(mutex, acq(0, 0, 1), rel(1, 2, INF), ren(1, 3, INF), acq(1, 4, INF),
              ren(0, 5, 6))


# ------------------------------------------------------------------ fast path


def test_fast_path_applies_with_distinct_fences() -> None:
    v = fast_check([acq(0, 0, 1, 1), ren(0, 2, 3, 1), rel(0, 4, 5, 1), acq(1, 3, 6, 2)])
    assert v.result is CheckResult.OK


def test_fast_path_explains_fence_inversion() -> None:
    v = fast_check([acq(0, 0, 1, 5), acq(1, 2, 3, 4)])
    assert v.result is CheckResult.ILLEGAL
    assert "fence 4 is below fence 5" in v.reason
    assert "acquire(0) -> fence 5 completed at 1 before acquire(1) -> fence 4 was invoked" in (
        v.reason
    )
    assert len(v.witness) == 2


@pytest.mark.parametrize(
    ("ops", "words"),
    [
        ([acq(0, 0, 1, 1), acq(1, 2, 3, 1)], "granted twice"),
        ([acq(0, 0, 1, 1), rel(0, 2, 3, 1), rel(0, 4, 5, 1)], "released twice"),
        ([acq(0, 0, 1, 1), rel(0, 2, 3, 1), ren(0, 4, 5, 1)], "renewed after it had been released"),
        ([acq(0, 0, 1, 1), acq(1, 2, 3, 2), rel(0, 4, 5, 1)], "no order of the grants"),
        ([rel(0, 0, 1, 1), acq(0, 2, 3, 1)], "by no acquire invoked before that"),
        ([acq(0, 0, 1, 1), rel(1, 2, 3, 1)], "by no acquire invoked before that"),
        ([acq(0, 0, 1, 1), rel(0, 2, 3, 2)], "names fence 2"),
    ],
)
def test_fast_path_violation_kinds(ops: list[Operation], words: str) -> None:
    v = fast_check(ops)
    assert v.result is CheckResult.ILLEGAL
    assert words in v.reason
    assert check_operations(fenced_mutex, ops) is CheckResult.ILLEGAL


@pytest.mark.parametrize(
    "ops",
    [
        [acq(0, 0, 1, None), rel(0, 2, 3), acq(1, 2.5, 4, None)],  # no fences
        [acq(0, 0, 1, 1), rel(0, 2, 3, None), acq(1, 4, 5, 2)],  # release names no fence
        [acq(0, 0, 1, None), ren(0, 2, 3), acq(1, 4, 5, None), acq(0, 6, 7), rel(0, 8, 9)],
    ],
)
@pytest.mark.parametrize("model", ["mutex", "fenced-mutex"])
def test_fast_path_applies_without_fences(ops: list[Operation], model: str) -> None:
    v = fast_check(ops, model)
    search = check_operations(mutex if model == "mutex" else fenced_mutex, ops)
    assert v.result is search, v.reason


@pytest.mark.parametrize(
    "ops",
    [
        [acq(0, 0, INF), rel(0, 2, 3, 3)],  # a crashed acquire may be what it releases
        [acq(0, 0, 5, 1), rel(0, 2, 3, 1)],  # the release overlaps its own acquire
        [acq(0, 0, 4, 1), acq(0, 2, 6, 2), rel(0, 8, 9, 2)],  # overlapping grants to one client
    ],
)
def test_fast_path_declines(ops: list[Operation]) -> None:
    v = fast_check(ops)
    assert not v.applies and v.reason


def test_mutex_fast_path_needs_a_release_before_the_next_grant() -> None:
    never = [acq(0, 0, 1), acq(1, 2, 3)]
    v = fast_check(never, "mutex")
    assert v.result is CheckResult.ILLEGAL and "never released" in v.reason
    crashed = [acq(0, 0, 1), rel(0, 2, INF), acq(1, 3, 4)]  # the crashed release freed it
    assert fast_check(crashed, "mutex").result is CheckResult.OK
    late = [acq(0, 0, 1), acq(1, 2, 3), rel(0, 4, INF)]  # ... but only if it came in time
    assert fast_check(late, "mutex").result is CheckResult.ILLEGAL
    for ops in (never, crashed, late):
        assert fast_check(ops, "mutex").result is check_operations(mutex, ops)


# ------------------------------------------------------------------ the lockcheck checker


def _check(ops: list[Op], **extra: Any) -> dict[str, Any]:
    return check_safe("linearizable", check_linearizable, ops, CheckOptions(extra=extra))


def test_adapter_drops_fail_and_crashed_renew_and_keeps_info_open() -> None:
    ops = (
        H()
        .acquire(0, "k", 1, 10, 20)
        .acquire(1, "k", None, 12, 22, result="fail")
        .renew(0, "k", 1, 30, 35, result="info")
        .renew(0, "k", 1, 36, 41)
        .release(0, "k", 1, 50, 60, result="info")
        .acquire(2, "k", None, 70, result=None)  # no completion: the run was cut short
        .write(0, "k", 1, 32, 33, seq=1)
        .ops()
    )
    conv = lock_operations(ops)
    assert [(o.input.f, o.return_time) for o in conv] == [
        ("acquire", 20),
        ("renew", 41),
        ("release", INF),
        ("acquire", INF),
    ]
    assert conv[1].input.fence == 1
    assert conv[0].output == LockOutput(1)


def test_checker_valid_history_uses_fast_path() -> None:
    ops = (
        H()
        .acquire(0, "a", 1, 10, 20)
        .renew(0, "a", 1, 30, 40)
        .release(0, "a", 1, 50, 60)
        .acquire(1, "a", 2, 55, 70)
        .acquire(2, "b", 1, 10, 20)
        .ops()
    )
    r = _check(ops)
    assert r["valid"] is True
    assert r["path"] == "fast"
    assert r["keys"]["a"]["result"] == "ok"


def test_checker_reports_the_illegal_key_fast_and_search() -> None:
    ops = H().acquire(0, "a", 1, 10, 20).acquire(2, "b", 5, 10, 20).acquire(1, "b", 4, 30, 40).ops()
    for fast in (True, False):
        r = _check(ops, fast_path=fast)
        assert r["valid"] is False
        assert r["key"] == "b"
        assert r["keys"]["b"]["path"] == ("fast" if fast else "search")
        assert "fence" in r["explanation"]
    searched = _check(ops, fast_path=False)
    assert searched["keys"]["b"]["longest_partial_linearization"] == 1
    assert searched["explanation"].startswith("key 'b': not linearizable")


def test_checker_decides_without_fences_and_falls_back_when_it_must() -> None:
    ops = H().acquire(0, "k", None, 10, 20).acquire(1, "k", None, 30, 40).ops()
    r = _check(ops)
    assert (r["valid"], r["path"]) == (True, "fast")
    assert (_check(ops, model="mutex")["valid"], r["path"]) == (False, "fast")
    # process 0 keeps going after a crashed acquire (not Jepsen-shaped): search
    odd = H().acquire(0, "k", None, 10, 20, result="info").release(0, "k", None, 30, 40).ops()
    r = _check(odd, model="mutex")
    assert (r["valid"], r["path"]) == (True, "search")
    assert "crashed acquire" in r["keys"]["k"]["fast_path_skipped"]


def test_checker_unknown_model() -> None:
    assert _check([], model="nope")["valid"] == "unknown"


def _hard_history(n: int = 14) -> list[Op]:
    """Many crashed acquires by distinct clients, then an impossible end: the search has
    to try every subset of them before it can say illegal."""
    h = H()
    for p in range(n):
        h.acquire(p, "k", None, 1 + p, 50 + p, result="info")
        h.release(p, "k", None, 100 + p, 150 + p, result="info")
    h.acquire(99, "k", None, 200, 210).acquire(98, "k", None, 220, 230)
    return h.ops()


def test_checker_cache_cap_gives_unknown_never_ok() -> None:
    r = _check(_hard_history(), model="mutex", max_cache=50)
    assert r["valid"] == "unknown"
    assert "cache" in r["note"]
    assert r["keys"]["k"]["result"] == "unknown"


def test_checker_timeout_gives_unknown_never_ok() -> None:
    ops = _hard_history(22)
    r = check_safe(
        "linearizable",
        check_linearizable,
        ops,
        CheckOptions(timeout_s=0.05, extra={"model": "mutex", "max_cache": 10**9}),
    )
    assert r["valid"] == "unknown"
    assert "timeout" in r["note"]


def test_checker_writes_html_or_says_why(tmp_path: Path) -> None:
    ops = H().acquire(0, "k/1", 5, 10, 20).acquire(1, "k/1", 4, 30, 40).ops()
    r = check_safe(
        "linearizable", check_linearizable, ops, CheckOptions(html_dir=tmp_path / "html")
    )
    assert r["valid"] is False
    files = r.get("html", [])
    if files:
        assert Path(files[0]).read_text().lstrip().lower().startswith("<!doctype html")
        assert "/" not in Path(files[0]).name.replace("k_1", "")
    else:
        assert "html_note" in r["illegal"][0]


def test_html_for_a_fast_path_verdict_draws_only_the_witness_leases(tmp_path: Path) -> None:
    h = H()
    t = 0
    for n in range(1, 60):
        p = n % 3
        h.acquire(p, "k", n, t, t + 5).renew(p, "k", n, t + 6, t + 7)
        h.release(p, "k", n, t + 8, t + 9)
        t += 10
    # fence 100 granted, then fence 99 granted later: a fence-order bug
    h.acquire(0, "k", 100, t, t + 5).release(0, "k", 100, t + 6, t + 7)
    h.acquire(1, "k", 99, t + 10, t + 15)
    r = check_safe("linearizable", check_linearizable, h.ops(), CheckOptions(html_dir=tmp_path))
    assert r["valid"] is False and r["path"] == "fast"
    item = r["illegal"][0]
    # the grants of fences 100 (acquire, release) and 99 (acquire)
    assert item["html_window_ops"] == 3
    assert r["html"] and Path(r["html"][0]).is_file()


def _lease_history(release_at: int) -> list[Op]:
    """The new history format: grants name a lease token; process 0 times out on a renew
    inside its critical section, retires, and its worker releases as process 5."""
    h = H(concurrency=5)
    h.op(0, "invoke", "acquire", "k", {"ttl_ms": 100}, 10)
    h.op(0, "ok", "acquire", "k", {"fence": 1, "lease": "t-a"}, 20)
    h.op(0, "invoke", "renew", "k", {"ttl_ms": 100, "fence": 1, "lease": "t-a"}, 30)
    h.op(0, "info", "renew", "k", None, 40)
    h.op(5, "invoke", "release", "k", {"fence": None, "lease": "t-a"}, release_at)
    h.op(5, "ok", "release", "k", {"fence": None, "lease": "t-a"}, release_at + 5)
    h.op(1, "invoke", "acquire", "k", {"ttl_ms": 100}, 60)
    h.op(1, "ok", "acquire", "k", {"fence": 2, "lease": "t-b"}, 70)
    return h.ops()


@pytest.mark.parametrize("model", ["mutex", "fenced-mutex"])
def test_lease_token_names_the_owner(model: str) -> None:
    ops = _lease_history(release_at=45)
    conv = lock_operations(ops)
    release = next(o for o in conv if o.input.f == "release")
    assert (release.client_id, release.input.client, release.input.fence) == (5, 0, 1)
    assert _check(ops, model=model)["valid"] is True
    assert _check(ops, model=model, fast_path=False)["valid"] is True
    # released after process 1 was granted the lock: the old lease was no longer held
    late = _lease_history(release_at=80)
    assert _check(late, model=model)["valid"] is False
    assert _check(late, model=model, fast_path=False)["valid"] is False


def test_without_a_lease_token_a_release_is_its_own_process() -> None:
    ops = [o for o in _lease_history(release_at=45)]
    for o in ops:
        if isinstance(o.value, dict):
            o.value = {k: v for k, v in o.value.items() if k != "lease"}
    # process 5 never acquired: its release cannot be legal
    assert _check(ops, model="mutex")["valid"] is False
