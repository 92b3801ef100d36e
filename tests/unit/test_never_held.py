"""A history without one grant says why: a lock taken before the run, or a client that
cannot take a free lock (with its first error), never a bare "nothing was tested"."""

from __future__ import annotations

from lockcheck.checker.analyze import analyze
from lockcheck.checker.never_held import never_held
from lockcheck.history import Op


def acquire(process: int, t: float, typ: str, error: str | None) -> list[Op]:
    ns = int(t * 1e9)
    return [Op(process, "invoke", "acquire", "k0", {"ttl_ms": 1000}, ns),
            Op(process, typ, "acquire", "k0", None, ns + 1_000_000, error=error)]


def test_no_acquire_at_all() -> None:
    assert never_held([]) == "no acquire was ever attempted: nothing was tested"


def test_every_acquire_refused_as_held_says_the_lock_was_taken_before() -> None:
    ops = acquire(0, 0.1, "fail", "busy") + acquire(1, 0.2, "fail", "busy")
    why = never_held(ops)
    assert "all 2 acquires were refused as held" in why
    assert "taken before the run began" in why and "could not take" not in why


def test_a_client_that_cannot_take_a_free_lock_names_its_first_error() -> None:
    ops = (acquire(1, 0.5, "fail", "busy") + acquire(0, 1.25, "info", "timeout")
           + acquire(2, 2.0, "fail", "connection refused")
           + acquire(0, 3.0, "fail", "connection refused"))
    why = never_held(ops)
    assert why.startswith("the client could not take a free lock: none of 4 acquires")
    assert "connection refused 2" in why and "timeout 1" in why and "busy 1" in why
    assert "the first error: 'timeout' at 1.2 s (process 0)" in why


def test_an_acquire_without_a_reply_counts_as_unknown() -> None:
    ops = [Op(0, "invoke", "acquire", "k0", {"ttl_ms": 1000}, 5_000_000)]
    assert "'no reply before the run ended' at 0.0 s" in never_held(ops)


def test_the_run_verdict_carries_it_and_stays_unknown() -> None:
    ops = acquire(0, 1.0, "fail", "auth failed")
    for i, o in enumerate(ops):
        o.index = i
    out = analyze(ops, {"workload": "mutex"}, metrics=False)
    assert out["valid"] == "unknown"
    assert out["summary"].startswith("the client could not take a free lock")
