"""The porcupine engine on small histories with known answers.

Besides hand-built cases, random small histories are compared with a brute-force
oracle that tries every order allowed by real time.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import math
import random
import re
import time
from collections.abc import Sequence
from typing import Any

import pytest

from lockcheck.checker.porcupine import (
    UNKNOWN,
    CheckResult,
    Event,
    Model,
    Operation,
    check_events,
    check_events_verbose,
    check_operations,
    check_operations_verbose,
    events_to_operations,
    nondeterministic,
    visualize,
)
from lockcheck.checker.porcupine.models import cas_register, kv, register

OK, ILLEGAL, UNK = CheckResult.OK, CheckResult.ILLEGAL, CheckResult.UNKNOWN
INF = math.inf


def R(c: int, t0: float, t1: float, out: Any) -> Operation:
    return Operation(c, ("read", None), t0, out, t1)


def W(c: int, t0: float, t1: float, v: Any) -> Operation:
    return Operation(c, ("write", v), t0, None, t1)


def CAS(c: int, t0: float, t1: float, old: Any, new: Any, ok: Any) -> Operation:
    return Operation(c, ("cas", (old, new)), t0, ok, t1)


def to_events(ops: Sequence[Operation]) -> list[Event]:
    """Events in real-time order, calls before returns on equal times."""
    marks: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        marks.append((op.call, 0, i))
        if op.return_time != INF:
            marks.append((op.return_time, 1, i))
    marks.sort()
    out = []
    for _, kind, i in marks:
        op = ops[i]
        if kind == 0:
            out.append(Event(op.client_id, "call", op.input, i))
        else:
            out.append(Event(op.client_id, "return", op.output, i))
    return out


def brute_force(model: Model[Any, Any, Any], ops: Sequence[Operation]) -> bool:
    """Is there an order of (all required + some crashed) ops respecting real time?"""
    required = [i for i, op in enumerate(ops) if op.return_time != INF]
    crashed = [i for i, op in enumerate(ops) if op.return_time == INF]
    for r in range(len(crashed) + 1):
        for extra in itertools.combinations(crashed, r):
            chosen = required + list(extra)
            for order in itertools.permutations(chosen):
                if not all(
                    not (ops[b].return_time < ops[a].call)
                    for x, a in enumerate(order)
                    for b in order[x + 1 :]
                ):
                    continue
                state = model.init()
                for i in order:
                    op = ops[i]
                    out = UNKNOWN if op.return_time == INF else op.output
                    ok, state = model.step(state, op.input, out)
                    if not ok:
                        break
                else:
                    return True
    return False


# --- hand-built registers ----------------------------------------------------------


def test_empty_history_is_ok() -> None:
    assert check_operations(register(), []) is OK
    assert check_events(register(), []) is OK


def test_sequential_register() -> None:
    ok = [W(0, 0, 10, 1), R(1, 20, 30, 1), W(0, 40, 50, 2), R(1, 60, 70, 2)]
    assert check_operations(register(), ok) is OK
    stale = [W(0, 0, 10, 1), W(0, 20, 30, 2), R(1, 40, 50, 1)]
    assert check_operations(register(), stale) is ILLEGAL


def test_concurrent_reads_readme_example() -> None:
    # write 100 overlaps two reads; one sees 100, the later one must not see 0 again
    ops = [
        Operation(0, ("write", 100), 0, None, 100),
        Operation(1, ("read", None), 25, 100, 75),
        Operation(2, ("read", None), 30, 0, 60),
    ]
    assert check_operations(register(0), ops) is OK
    ops2 = [
        Operation(0, ("write", 200), 0, None, 100),
        Operation(1, ("read", None), 10, 200, 30),
        Operation(2, ("read", None), 40, 0, 90),
    ]
    assert check_operations(register(0), ops2) is ILLEGAL


def test_closed_intervals_touching_ops_are_concurrent() -> None:
    # the read returns at 10, exactly when the write is called: they are concurrent
    ops = [W(0, 10, 20, 1), R(1, 0, 10, 1)]
    assert check_operations(register(0), ops) is OK
    ops = [W(0, 11, 20, 1), R(1, 0, 10, 1)]
    assert check_operations(register(0), ops) is ILLEGAL


def test_zero_duration_ops() -> None:
    ops = [W(0, 5, 5, 1), R(1, 5, 5, 1), R(2, 6, 6, 1)]
    assert check_operations(register(0), ops) is OK
    assert check_operations(register(0), [*ops, R(3, 7, 7, 0)]) is ILLEGAL


def test_cas_register() -> None:
    m = cas_register(0)
    assert check_operations(m, [CAS(0, 0, 1, 0, 5, True), R(1, 2, 3, 5)]) is OK
    assert check_operations(m, [CAS(0, 0, 1, 0, 5, False)]) is ILLEGAL
    assert check_operations(m, [CAS(0, 0, 1, 3, 5, False), R(1, 2, 3, 0)]) is OK
    assert check_operations(m, [CAS(0, 0, 1, 3, 5, True)]) is ILLEGAL


def test_unknown_output_matches_anything() -> None:
    ops = [W(0, 0, 1, 1), R(1, 2, 3, UNKNOWN)]
    assert check_operations(register(0), ops) is OK


# --- crashed operations --------------------------------------------------------------


def test_crashed_write_may_take_effect() -> None:
    ops = [W(0, 0, INF, 7), R(1, 10, 20, 7)]
    assert check_operations(register(0), ops) is OK


def test_crashed_write_may_not_take_effect() -> None:
    ops = [W(0, 0, INF, 7), R(1, 10, 20, 0), R(1, 30, 40, 0)]
    assert check_operations(register(0), ops) is OK


def test_crashed_write_cannot_take_effect_before_its_call() -> None:
    ops = [R(1, 0, 5, 7), W(0, 10, INF, 7)]
    assert check_operations(register(0), ops) is ILLEGAL


def test_crashed_write_takes_effect_once() -> None:
    # 7 then 0 then 7 again would need the crashed write twice
    ops = [W(0, 0, INF, 7), R(1, 10, 20, 7), W(2, 30, 40, 0), R(1, 50, 60, 7)]
    assert check_operations(register(0), ops) is ILLEGAL


def test_crashed_ops_get_unknown_output() -> None:
    seen: list[Any] = []

    def step(s: int, inp: str, out: Any) -> tuple[bool, int]:
        seen.append(out)
        return True, s

    m: Model[int, str, Any] = Model(init=lambda: 0, step=step)
    ops = [Operation(0, "x", 0, "recorded", INF), Operation(1, "y", 1, "ignored?", 2)]
    assert check_operations(m, ops) is OK
    assert UNKNOWN in seen and "recorded" not in seen


def test_crashed_op_that_the_model_rejects_is_simply_left_out() -> None:
    # a crashed cas(1, 2) can never succeed from 0; it is optional, so the history is ok
    m = cas_register(0)
    ops = [CAS(0, 0, INF, 1, 2, True), R(1, 5, 6, 0)]

    def strict_step(s: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        if out is UNKNOWN and inp[0] == "cas":
            return s == inp[1][0], inp[1][1]
        return m.step(s, inp, out)

    strict: Model[Any, Any, Any] = Model(init=lambda: 0, step=strict_step)
    assert check_operations(strict, ops) is OK


def test_only_crashed_ops() -> None:
    assert check_operations(register(0), [W(0, 0, INF, 1), W(1, 1, INF, 2)]) is OK


# --- kv and partitions ---------------------------------------------------------------


def kvop(c: int, t0: float, t1: float, f: str, k: str, v: Any, out: Any = None) -> Operation:
    return Operation(c, (f, k, v), t0, out, t1)


def test_kv_partitioned_and_not() -> None:
    ops = [
        kvop(0, 0, 10, "put", "a", "x"),
        kvop(1, 5, 15, "append", "b", "y"),
        kvop(2, 20, 30, "get", "a", None, "x"),
        kvop(0, 20, 30, "append", "a", "z"),
        kvop(1, 40, 50, "get", "a", None, "xz"),
        kvop(2, 40, 50, "get", "b", None, "y"),
        kvop(2, 60, 70, "get", "c", None, ""),
    ]
    for m in (kv(), kv(partitioned=False)):
        assert check_operations(m, ops) is OK
        assert check_events(m, to_events(ops)) is OK
        bad = [*ops, kvop(3, 80, 90, "get", "b", None, "")]
        assert check_operations(m, bad) is ILLEGAL
        assert check_events(m, to_events(bad)) is ILLEGAL


def test_partition_events_keeps_calls_with_returns() -> None:
    ops = [kvop(0, 0, 10, "put", "a", "1"), kvop(1, 1, 2, "get", "b", None, "")]
    parts = kv().partition_events(to_events(ops))  # type: ignore[misc]
    assert sorted(len(p) for p in parts) == [2, 2]


def _hard_key(n: int, key: str = "hard") -> list[Operation]:
    """n concurrent appends and a read no order can produce: factorial search (the put
    alongside keeps the read from ruling an order out before the put is placed)."""
    ops = [kvop(i, 0, 100, "append", key, f"<{i}>") for i in range(n)]
    ops.append(kvop(n, 0, 100, "get", key, None, "never"))
    ops.append(kvop(n + 1, 0, 100, "put", key, "p"))
    return ops


def test_hard_partition_does_not_starve_an_illegal_one() -> None:
    easy_bad = [kvop(90, 0, 1, "put", "z", "1"), kvop(91, 2, 3, "get", "z", None, "2")]
    for ops in (_hard_key(12) + easy_bad, easy_bad + _hard_key(12)):
        t0 = time.monotonic()
        assert check_operations(kv(), ops, timeout=30) is ILLEGAL
        assert time.monotonic() - t0 < 3
        res, info = check_operations_verbose(kv(), ops, timeout=30)
        assert res is ILLEGAL
        assert {p.result for p in info.partitions} == {ILLEGAL, UNK}


def test_timeout_gives_unknown() -> None:
    t0 = time.monotonic()
    assert check_operations(kv(), _hard_key(12), timeout=0.3) is UNK
    assert time.monotonic() - t0 < 2
    res, info = check_operations_verbose(kv(), _hard_key(12), timeout=0.3)
    assert res is UNK and "timeout" in info.note
    # what was reached is kept: the longest partial linearizations so far
    (part,) = info.partitions
    assert part.result is UNK and "timeout" in part.note
    assert max(len(p) for p in part.partial_linearizations) >= 10
    assert "Partition 0" not in info.explain(kv())  # only illegal partitions are explained
    assert check_events(kv(), to_events(_hard_key(12)), timeout=0.3) is UNK


def test_timeout_never_gives_ok_for_an_unfinished_check() -> None:
    easy_ok = [kvop(98, 0, 1, "put", "easy", "1"), kvop(99, 2, 3, "get", "easy", None, "1")]
    assert check_operations(kv(), _hard_key(12) + easy_ok, timeout=0.2) is UNK
    res, info = check_operations_verbose(kv(), easy_ok + _hard_key(12), timeout=0.2)
    assert res is UNK
    assert sorted(p.result for p in info.partitions) == sorted([OK, UNK])


def test_cache_cap_gives_unknown() -> None:
    res, info = check_operations_verbose(kv(), _hard_key(12), max_cache=5000)
    assert res is UNK and "cache" in info.note
    assert info.cache_entries <= 5000
    assert check_operations(kv(), _hard_key(12), max_cache=0) is UNK
    # a cap big enough for an easy history does not change the answer
    ops = [W(0, 0, 10, 1), R(1, 20, 30, 1)]
    assert check_operations(register(0), ops, max_cache=2) is OK
    assert check_operations(register(0), ops, max_cache=1) is UNK
    # nothing to memoize: no need for any cache
    assert check_operations(register(0), [], max_cache=0) is OK
    assert check_operations(register(0), [W(0, 0, INF, 1)], max_cache=0) is OK


# --- events API ----------------------------------------------------------------------


def test_events_to_operations() -> None:
    evs = [
        Event(0, "call", ("write", 1), 7),
        Event(1, "call", ("read", None), 8),
        Event(0, "return", None, 7),
        Event(1, "return", 1, 8),
        Event(2, "call", ("write", 2), 9),
    ]
    ops = events_to_operations(evs)
    assert ops == [
        Operation(0, ("write", 1), 0, None, 2),
        Operation(1, ("read", None), 1, 1, 3),
        Operation(2, ("write", 2), 4, UNKNOWN, INF),
    ]
    with pytest.raises(ValueError):
        events_to_operations([Event(0, "return", None, 1)])
    with pytest.raises(ValueError):
        events_to_operations([Event(0, "call", None, 1), Event(0, "call", None, 1)])


def test_bad_operation_times() -> None:
    with pytest.raises(ValueError):
        check_operations(register(), [W(0, 10, 5, 1)])


# --- models --------------------------------------------------------------------------


def test_unhashable_states_need_a_key() -> None:
    def step(s: list[int], inp: int, out: Any) -> tuple[bool, list[int]]:
        new = [*s, inp]
        return (out is UNKNOWN or out == sum(new)), new

    ops = [Operation(0, 1, 0, 1, 1), Operation(1, 2, 2, 3, 3)]
    with pytest.raises(TypeError):
        check_operations(Model(init=list, step=step), ops)
    assert check_operations(Model(init=list, step=step, key=tuple), ops) is OK
    m2 = Model(init=list, step=step, equal=lambda a, b: a == b, hash=lambda s: len(s))
    assert check_operations(m2, ops) is OK
    with pytest.raises(ValueError):
        Model(init=list, step=step, equal=lambda a, b: a == b)


def test_nondeterministic_model() -> None:
    # a register whose write may be lost: after write(v) the value is v or unchanged
    def step(s: int, inp: tuple[str, Any], out: Any) -> list[int]:
        f, v = inp
        if f == "write":
            return [s, v]
        return [s] if out is UNKNOWN or out == s else []

    m = nondeterministic(init=lambda: [0], step=step)
    assert check_operations(m, [W(0, 0, 1, 5), R(0, 2, 3, 0)]) is OK
    assert check_operations(m, [W(0, 0, 1, 5), R(0, 2, 3, 5)]) is OK
    assert check_operations(m, [W(0, 0, 1, 5), R(0, 2, 3, 4)]) is ILLEGAL
    assert check_operations(m, [W(0, 0, 1, 5), R(0, 2, 3, 5), R(1, 4, 5, 0)]) is ILLEGAL


# --- verbose info, explanation and visualization ------------------------------------


def test_verbose_info_and_explain() -> None:
    m = register(0)
    ops = [W(0, 0, 10, 1), W(1, 20, 30, 2), R(2, 40, 50, 1), R(0, 60, 70, 2)]
    res, info = check_operations_verbose(m, ops)
    assert res is ILLEGAL
    (part,) = info.partitions
    assert part.result is ILLEGAL
    longest = max(part.partial_linearizations, key=len)
    assert list(longest) == [0, 1]
    assert info.partial_linearizations_operations()[0][0] == [ops[0], ops[1]]
    text = info.explain(m)
    assert "read() -> 1" in text and "partition 0" in text

    res, info = check_operations_verbose(m, ops[:2])
    assert res is OK
    assert info.partitions[0].partial_linearizations == ((0, 1),)


def test_visualize_writes_self_contained_html(tmp_path: Any) -> None:
    m = cas_register(0)
    ops = [CAS(0, 0, 10, 0, 1, True), R(1, 5, 20, 0), W(2, 3, INF, 4), R(1, 30, 40, 2)]
    res, info = check_operations_verbose(m, ops)
    assert res is ILLEGAL
    buf = io.StringIO()
    visualize(m, info, buf)
    html = buf.getvalue()
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html
    # nothing is fetched: no src/href to a URL, no imports
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)
    assert "@import" not in html and "<link" not in html
    assert "cas(0, 1)" in html
    path = tmp_path / "out.html"
    visualize(m, info, path)
    assert path.read_text() == html
    visualize(m, info, str(tmp_path / "out2.html"))
    assert (tmp_path / "out2.html").exists()


def test_visualize_caps_big_histories(tmp_path: Any) -> None:
    ops = []
    for i in range(3000):
        ops.append(W(i % 5, 10 * i, 10 * i + 15, i))
    ops.append(R(0, 10 * 3000, 10 * 3000 + 1, -1))
    m = register(0)
    res, info = check_operations_verbose(m, ops)
    assert res is ILLEGAL
    buf = io.StringIO()
    visualize(m, info, buf)
    assert len(buf.getvalue()) < 1_500_000
    assert "not shown" in buf.getvalue()


# --- random histories against the brute-force oracle --------------------------------


def _random_history(rng: random.Random, model_name: str) -> list[Operation]:
    n = rng.randint(1, 6)
    ops = []
    for c in range(n):
        t0 = rng.randint(0, 12)
        t1 = INF if rng.random() < 0.2 else t0 + rng.randint(0, 6)
        kind = rng.choice(["read", "write", "cas"] if model_name == "cas" else ["read", "write"])
        v = rng.randint(0, 2)
        if kind == "read":
            ops.append(R(c, t0, t1, rng.choice([0, 1, 2, v, UNKNOWN])))
        elif kind == "write":
            ops.append(W(c, t0, t1, v))
        else:
            ops.append(CAS(c, t0, t1, rng.randint(0, 2), v, rng.random() < 0.5))
    return ops


@pytest.mark.parametrize("hints", ["none", "read_only", "read_only+read_value"])
@pytest.mark.parametrize("model_name", ["register", "cas"])
def test_random_histories_match_brute_force(model_name: str, hints: str) -> None:
    rng = random.Random(f"porcupine-{model_name}-{hints}")
    m = register(0) if model_name == "register" else cas_register(0)
    if hints == "none":
        m = dataclasses.replace(m, read_only=None, read_value=None)
    elif hints == "read_only":
        m = dataclasses.replace(m, read_value=None)
    counts = {OK: 0, ILLEGAL: 0}
    for _ in range(600):
        ops = _random_history(rng, model_name)
        want = OK if brute_force(m, ops) else ILLEGAL
        assert check_operations(m, ops) is want, ops
        assert check_events(m, to_events(ops)) is want, ops
        assert check_events_verbose(m, to_events(ops))[0] is want, ops
        res, info = check_operations_verbose(m, ops)
        assert res is want
        if want is OK:
            (lin,) = info.partitions[0].partial_linearizations
            assert set(lin) >= {i for i, op in enumerate(ops) if op.return_time != INF}
        counts[want] += 1
    assert counts[OK] > 50 and counts[ILLEGAL] > 50


def test_random_kv_histories_match_brute_force() -> None:
    rng = random.Random("porcupine-kv")
    oracle = kv(partitioned=False)
    counts = {OK: 0, ILLEGAL: 0}
    for _ in range(400):
        ops = []
        for c in range(rng.randint(1, 6)):
            t0 = rng.randint(0, 10)
            t1 = INF if rng.random() < 0.15 else t0 + rng.randint(0, 5)
            key = rng.choice("ab")
            f = rng.choice(["get", "get", "put", "append"])
            if f == "get":
                out = rng.choice(["", "x", "y", "xy", "yx", UNKNOWN])
                ops.append(kvop(c, t0, t1, "get", key, None, out))
            else:
                ops.append(kvop(c, t0, t1, f, key, rng.choice("xy")))
        want = OK if brute_force(oracle, ops) else ILLEGAL
        for m in (kv(), oracle, dataclasses.replace(kv(), read_only=None, read_value=None)):
            assert check_operations(m, ops) is want, ops
            assert check_events(m, to_events(ops)) is want, ops
        counts[want] += 1
    assert counts[OK] > 50 and counts[ILLEGAL] > 50


def test_long_kv_history_without_puts_scales_linearly() -> None:
    # 60,000 ops on one key, appends and gets, no put: the search on threads looks at
    # the gets near the front of the history only, not at all the gets to its end
    ops = []
    for i in range(60_000):
        f, value, out = ("get", None, "") if i % 3 == 2 else ("append", "", None)
        ops.append(kvop(i % 3, 10 * i, 10 * i + 15, f, "k", value, out))
    t0 = time.monotonic()
    assert check_operations(kv(), ops, timeout=60) is OK
    assert time.monotonic() - t0 < 5  # about 0.2 s; 11 s with the search walking to the end


def test_long_history_scales_linearly() -> None:
    # 30,000 ops, 3 clients overlapping their neighbours; a quadratic bitset would take
    # many seconds here
    ops = []
    for i in range(30_000):
        t = 10 * i
        if i % 3 == 2:
            ops.append(R(i % 3, t, t + 15, i - 1))
        else:
            ops.append(W(i % 3, t, t + 15, i))
    t0 = time.monotonic()
    assert check_operations(register(-1), ops, timeout=60) is OK
    bad = [*ops, R(0, 10 * 30_000 + 100, 10 * 30_000 + 101, 12345)]
    assert check_operations(register(-1), bad, timeout=60) is ILLEGAL
    crashed = [W(0, 5, INF, -7), *ops]  # a crashed op pending through all of it
    assert check_operations(register(-1), crashed, timeout=60) is OK
    assert time.monotonic() - t0 < 10
