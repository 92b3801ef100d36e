"""The settlement checker on hand-built histories: doubles, possible doubles, the layers
that stopped a second run, the store's final count as the ground truth."""

from __future__ import annotations

from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.settlement import check_settlement
from lockcheck.checker.verdict import run_verdict
from tests.checker.histories import H

K = "settle:m0:2026-09-16"
K2 = "settle:m1:2026-09-16"


def settle(h: H, p: int, key: str, fence: int, t: int, result: str | None,
           error: str | None = None) -> H:
    h.op(p, "invoke", "settle", key, {"fence": fence}, t)
    if result is not None:
        h.op(p, result, "settle", key, {"fence": fence}, t + 5, error=error)
    return h


def read(h: H, p: int, key: str, status: str, t: int) -> H:
    h.op(p, "invoke", "read", key, {}, t)
    return h.op(p, "ok", "read", key, {"status": status, "fence": 0}, t + 2)


def final(h: H, counts: dict[str, int], t: int) -> H:
    return h.op("resource", "event", "final-state", None, {"payments": counts}, t)


def check(h: H) -> dict[str, Any]:
    return check_settlement(h.ops(), CheckOptions(workload="settlement"))


def test_one_payment_per_day_is_valid_and_counts_the_layers() -> None:
    h = H()
    read(h, 0, K, "pending", 10)
    settle(h, 0, K, 1, 20, "ok")
    settle(h, 1, K, 2, 30, "fail", "stale-fence")  # hypothetically stale: the fence
    settle(h, 2, K2, 1, 40, "ok")
    settle(h, 3, K2, 2, 50, "fail", "duplicate-payment")
    read(h, 4, K, "paid", 60)
    r = check(h)
    assert r["valid"] is True, r
    assert r["stopped"] == {"fence": 1, "idempotency": 1, "already-paid": 1, "row-lock": 0,
                            "version": 0, "other": 0}
    assert "row lock" not in r["summary"] and "version" not in r["summary"]
    assert r["merchant_days_settled"] == 2 and r["double_settlement_count"] == 0
    assert "at most once (2 settled)" in r["summary"]


def test_two_ok_settlements_of_one_day_are_a_double() -> None:
    h = H()
    settle(h, 0, K, 1, 20, "ok")
    settle(h, 5, K, 2, 30, "ok")
    r = check(h)
    assert r["valid"] is False
    d = r["double_settlements"][0]
    assert d["key"] == K and d["payments"] == 2
    assert [s["process"] for s in d["settles"]] == [0, 5]
    valid, why = run_verdict("settlement", {"settlement": r})
    assert valid is False and "settled more than once" in why


def test_an_unknown_commit_beside_an_ok_is_unknown_without_the_store() -> None:
    h = H()
    settle(h, 0, K, 1, 20, "info")
    settle(h, 5, K, 2, 30, "ok")
    r = check(h)
    assert r["valid"] == "unknown" and r["possible_doubles"][0]["key"] == K


def test_the_stores_count_settles_what_the_history_left_open() -> None:
    for counts, expected in (({K: 1}, True), ({K: 2}, False)):
        h = H()
        settle(h, 0, K, 1, 20, "info")
        settle(h, 5, K, 2, 30, "ok")
        final(h, counts, 100)
        r = check(h)
        assert r["valid"] is expected, (counts, r)
        assert r["ground_truth"] == "store"


def test_the_store_finds_a_double_the_history_missed() -> None:
    """An info settle that did commit: only the store's count shows the second one."""
    h = H()
    settle(h, 0, K, 1, 20, None)  # no completion: the run was cut short
    settle(h, 5, K, 2, 30, "ok")
    final(h, {K: 2, K2: 0}, 100)
    r = check(h)
    assert r["valid"] is False and r["double_settlements"][0]["payments"] == 2


def test_nothing_attempted_is_unknown() -> None:
    h = H()
    read(h, 0, K, "paid", 10)
    r = check(h)
    assert r["valid"] == "unknown" and r["nothing_checked"]
    valid, why = run_verdict("settlement", {"settlement": r})
    assert valid == "unknown" and "no settlement was attempted" in why


def test_the_databases_own_layers_are_counted_apart() -> None:
    # a read that took the row's lock and found the day paid: the row lock stopped it
    # (it waited for the run before it to commit); an update on an old version, and a
    # settle whose read had lost its row lock, were refused by the database
    h = H()
    read(h, 0, K, "pending", 10)
    settle(h, 0, K, 1, 20, "ok")
    h.op(1, "invoke", "read", K, {}, 30)
    h.op(1, "ok", "read", K, {"status": "paid", "fence": 1, "row_locked": True}, 32)
    settle(h, 2, K, 3, 40, "fail", "stale-version")
    settle(h, 3, K, 4, 50, "fail", "row-lock-lost")
    read(h, 4, K, "paid", 60)
    r = check(h)
    assert r["valid"] is True, r
    assert r["stopped"] == {"fence": 0, "idempotency": 0, "already-paid": 1, "row-lock": 2,
                            "version": 1, "other": 0}
    assert r["summary"].endswith("by the row lock 2, by the version check 1")
