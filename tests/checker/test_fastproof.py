"""The column proof of a lock key (`fastproof.proves_ok`) against the exact decision
(`fastpath.fast_check`, itself tested against a brute-force oracle): a key it proves
is one the decision finds linearizable, and it proves most valid keys, or it would
save nothing."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lockcheck.checker.fastpath import ACQUIRE, RELEASE, RENEW, fast_check
from lockcheck.checker.fastproof import proves_ok
from lockcheck.checker.porcupine import CheckResult, Operation
from lockcheck.checker.porcupine.lock_models import LockInput, LockOutput
from tests.checker.test_lock_models_properties import (
    JEPSEN_SHAPES,
    gen_history,
    gen_jepsen,
    oracle,
)

FEWER = settings(max_examples=300, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])
CODES = {"acquire": ACQUIRE, "renew": RENEW, "release": RELEASE}


def proves(ops: list[Operation], model: str) -> bool:
    """`proves_ok` on the columns of one key's operations."""
    ids: dict[Any, int] = {}
    crashed = np.array([o.return_time == math.inf for o in ops], dtype=bool)
    fences = [o.output.fence if isinstance(o.output, LockOutput) and o.input.f == "acquire"
              else None for o in ops]
    named = [o.input.fence for o in ops]
    return proves_ok(
        np.array([CODES[o.input.f] for o in ops], dtype=np.int64),
        np.array([ids.setdefault(o.input.client, len(ids)) for o in ops], dtype=np.int64),
        np.array([o.call for o in ops], dtype=np.int64),
        np.array([0 if c else o.return_time for o, c in zip(ops, crashed, strict=True)],
                 dtype=np.int64),
        crashed,
        np.array([f or 0 for f in fences], dtype=np.int64),
        np.array([f is not None for f in fences], dtype=bool),
        np.array([n or 0 for n in named], dtype=np.int64),
        np.array([n is not None for n in named], dtype=bool),
        model == "fenced-mutex")


def _agrees(ops: list[Operation], model: str) -> bool:
    proved = proves(ops, model)
    event(f"proved={proved}")
    if proved:
        exact = fast_check(ops, model)
        assert exact.result is CheckResult.OK, exact.reason
        if len(ops) <= 8:
            assert oracle(model, ops)
    return proved


@FEWER
@given(st.randoms(use_true_random=False), st.sampled_from(["mutex", "fenced-mutex"]))
def test_a_proved_key_is_linearizable(rng: random.Random, model: str) -> None:
    ops = gen_history(rng, fenced=model == "fenced-mutex", max_ops=rng.choice([6, 10, 14]),
                      keys=1, swap_rate=0.4)
    _agrees(ops, model)


@pytest.mark.parametrize(("model", "fences", "named"), JEPSEN_SHAPES)
@FEWER
@given(rng=st.randoms(use_true_random=False))
def test_a_proved_jepsen_history_is_linearizable(model: str, fences: bool, named: bool,
                                                 rng: random.Random) -> None:
    _agrees(gen_jepsen(rng, model=model, fences=fences, named=named, max_ops=14), model)


@pytest.mark.parametrize(("model", "fences", "named"), JEPSEN_SHAPES)
def test_most_valid_histories_are_proved(model: str, fences: bool, named: bool) -> None:
    rng = random.Random(20261203)
    valid = proved = 0
    for _ in range(400):
        ops = gen_jepsen(rng, model=model, fences=fences, named=named, max_ops=14)
        if fast_check(ops, model).result is CheckResult.OK:
            valid += 1
            proved += proves(ops, model)
    assert valid > 50
    assert proved >= 0.8 * valid, (proved, valid)


def op(f: str, client: int, call: int, ret: float, fence: int | None = None,
       named: int | None = None) -> Operation:
    out: Any = LockOutput(fence) if ret != math.inf else None
    return Operation(client, LockInput(f, client, "k", named), call, out, ret)  # type: ignore[arg-type]


@pytest.mark.parametrize(("model", "ops"), [
    ("mutex", [op("acquire", 1, 0, 1), op("release", 1, 2, 3), op("renew", 1, 4, 5)]),
    ("fenced-mutex", [op("acquire", 1, 0, 1, 5), op("acquire", 2, 2, 3, 5)]),
    ("fenced-mutex", [op("acquire", 1, 0, 1, 5), op("renew", 1, 2, 3, named=4)]),
    ("mutex", [op("acquire", 1, 0, 1), op("release", 1, 2, 3), op("release", 1, 4, 5)]),
    ("mutex", [op("acquire", 1, 0, 1), op("acquire", 2, 2, 3)]),  # never released
    ("mutex", [op("renew", 1, 0, 1), op("acquire", 1, 2, 3)]),  # a renew before any grant
])
def test_what_the_exact_decision_refuses_is_not_proved(model: str, ops: list[Operation]) -> None:
    assert fast_check(ops, model).result is CheckResult.ILLEGAL
    assert not proves(ops, model)


@pytest.mark.parametrize(("model", "ops"), [
    # a crashed acquire of the releasing client may have been its grant
    ("mutex", [op("acquire", 1, 0, 1), op("acquire", 1, 2, math.inf), op("release", 1, 4, 5)]),
    ("mutex", [op("acquire", 1, 0, 5), op("release", 1, 3, 6)]),  # before or after its grant?
    # two grants of one client in flight at once: which one does the release close?
    ("fenced-mutex", [op("acquire", 1, 0, 5, 1), op("acquire", 1, 1, 6, 2),
                      op("release", 1, 7, 8)]),
])
def test_what_the_exact_decision_declines_is_not_proved(model: str, ops: list[Operation]) -> None:
    assert fast_check(ops, model).result is None
    assert not proves(ops, model)
