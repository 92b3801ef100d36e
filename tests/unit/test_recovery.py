"""The recovery check: which locks could be taken again once every fault was healed."""

from __future__ import annotations

from lockcheck.checker.recovery import check_recovery
from lockcheck.history import Op

TEST = {"recovery_worker": 5, "recovery_keys": ["k0", "k1"]}


def op(type_: str, key: str, t: int, worker: int = 5) -> Op:
    return Op(process=worker, type=type_, f="acquire", key=key, time=t, worker=worker)


def test_every_lock_taken_again() -> None:
    ops = [op("invoke", "k0", 1), op("ok", "k0", 2), op("invoke", "k1", 3), op("ok", "k1", 4)]
    r = check_recovery(ops, TEST, started=True)
    assert r["valid"] is True and r["keys"]["k1"]["attempts"] == 1


def test_a_lock_never_taken_again_is_named() -> None:
    ops = [op("invoke", "k0", 1), op("ok", "k0", 2), op("invoke", "k1", 3), op("fail", "k1", 4)]
    r = check_recovery(ops, TEST, started=True)
    assert r["valid"] is False and r["summary"].startswith("NOT RECOVERED: k1 ")


def test_a_started_worker_that_recorded_nothing_did_not_recover() -> None:
    """Its client never got going (a service that accepts connections and never
    answers): that is no lock taken again, not a phase that did not run."""
    others = [op("invoke", "k0", 1, worker=0), op("ok", "k0", 2, worker=0)]
    r = check_recovery(others, TEST, started=True)
    assert r["valid"] is False and r["summary"].startswith("NOT RECOVERED: k0, k1 ")
    assert r["keys"] == {k: {"acquired_after_s": None, "attempts": 0} for k in ("k0", "k1")}


def test_a_worker_that_was_never_started_is_unknown() -> None:
    r = check_recovery([op("ok", "k0", 2, worker=0)], TEST)
    assert r["valid"] == "unknown" and r["summary"] == "the recovery phase did not run"
