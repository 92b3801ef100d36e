"""Property tests: the lock models against a brute-force oracle, and the fast path
against the search.

The oracle is written from the *literal* specification, not from the models: it tries
every real-time-consistent order of the operations, lets each crashed operation either
never happen or happen at any point after its call, gives a crashed acquire that took
effect every possible fence, and (for the lease lock) lets the holder's lease expire
at any moment as an explicit step. The models do none of that (they never expire a
lease and guess crashed fences lazily), so agreement tests those shortcuts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lockcheck.checker.fastpath import fast_check
from lockcheck.checker.linearizable import by_key, check_lock_operations
from lockcheck.checker.porcupine import UNKNOWN, CheckResult, Operation, check_operations
from lockcheck.checker.porcupine.lock_models import (
    LockInput,
    LockOutput,
    fenced_mutex,
    mutex,
)

EXAMPLES = 1000
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)

# ------------------------------------------------------------------ the oracle

KeyState = tuple[Hashable, Any, Any]  # holder, holder's fence, highest fence granted


def _matches(hfence: Any, named: Any) -> bool:
    return hfence is None or named is None or hfence == named


def _moves(model: str, state: KeyState, op: Operation, fences: range) -> Iterator[KeyState]:
    """Successor states of `state` when `op` takes effect now (none: illegal)."""
    holder, hfence, top = state
    inp: LockInput = op.input
    crashed = op.return_time == math.inf
    if inp.f == "acquire":
        if holder is not None:  # only a free lock can be granted (leases expire explicitly)
            return
        if model == "mutex":
            yield (inp.client, None, top)
            return
        if crashed:
            choices: list[Any] = [g for g in fences if top is None or g > top]
        else:
            choices = [op.output.fence]
        for g in choices:
            if g is None:
                yield (inp.client, None, top)
            elif top is None or g > top:
                yield (inp.client, g, g)
        return
    owns = holder is not None and holder == inp.client
    if model == "fenced-mutex":
        owns = owns and _matches(hfence, inp.fence)
    if not owns:
        return
    if inp.f == "renew":
        yield state
    elif inp.f == "release":
        yield (None, None, top)


def oracle(model: str, ops: list[Operation]) -> bool:
    """Is there a legal sequential execution? (exhaustive; all keys at once)"""
    n = len(ops)
    keys = sorted({op.input.key for op in ops}, key=str)
    kidx = {k: i for i, k in enumerate(keys)}
    named = [op.output.fence for op in ops if isinstance(op.output, LockOutput)]
    named += [op.input.fence for op in ops]
    ints = [f for f in named if isinstance(f, int)]
    fences = range(-1, (max(ints) if ints else 0) + 2)
    must = frozenset(i for i, op in enumerate(ops) if op.return_time != math.inf)
    start: tuple[KeyState, ...] = tuple((None, None, None) for _ in keys)
    seen: set[tuple[frozenset[int], tuple[KeyState, ...]]] = set()

    def dfs(done: frozenset[int], states: tuple[KeyState, ...]) -> bool:
        if must <= done:
            return True
        if (done, states) in seen:
            return False
        seen.add((done, states))
        if model == "fenced-mutex":  # a lease may expire at any moment
            for k, (holder, _hf, top) in enumerate(states):
                if holder is not None:
                    nxt = (*states[:k], (None, None, top), *states[k + 1 :])
                    if dfs(done, nxt):
                        return True
        for i in range(n):
            if i in done:
                continue
            op = ops[i]
            if any(j not in done and ops[j].return_time < op.call for j in range(n)):
                continue  # something that completed before this op began is still pending
            k = kidx[op.input.key]
            for s in _moves(model, states[k], op, fences):
                if dfs(done | {i}, (*states[:k], s, *states[k + 1 :])):
                    return True
        return False

    return dfs(frozenset(), start)


# ------------------------------------------------------------------ histories


def gen_history(
    rng: random.Random,
    *,
    fenced: bool,
    max_ops: int = 7,
    keys: int | None = None,
    fence_gaps: bool = True,
    none_fences: bool = True,
    swap_rate: float = 0.15,
) -> list[Operation]:
    """A small history: a simulated lock run (with expiry when fenced), crashed ops,
    sloppy timing, and sometimes a bug (a refused op recorded as ok, a wrong fence)."""
    n_keys = keys if keys is not None else rng.choice([1, 1, 2])
    names = ["a", "b"][:n_keys]
    n_clients = rng.randint(1, 3)
    state: dict[str, list[Any]] = {k: [None, None] for k in names}
    counter = dict.fromkeys(names, 0)
    bug_rate = rng.choice([0.0, 0.15, 0.4, 0.6])
    ops: list[Operation] = []
    for i in range(rng.randint(1, max_ops)):
        lp = 10 * i + rng.randint(0, 9)
        k = rng.choice(names)
        c = rng.randrange(n_clients)
        holder, hf = state[k]
        if fenced and holder is not None and rng.random() < 0.3:
            holder, hf = state[k] = [None, None]
        f = rng.choice(["acquire", "acquire", "acquire", "release", "release", "renew"])
        crashed = rng.random() < 0.2
        happened = not crashed or rng.random() < 0.5
        fence: Any = None
        if f == "acquire":
            ok = holder is None
            if ok and happened:
                counter[k] += rng.choice([1, 1, 2]) if fence_gaps else 1
                fence = counter[k] if fenced else None
                if fenced and none_fences and rng.random() < 0.05:
                    fence = None
                state[k] = [c, fence]
            elif fenced:
                fence = counter[k] + rng.choice([0, 1, -1])
            named = None
        else:
            ok = holder == c
            named = hf if ok else rng.randint(0, counter[k] + 1)
            if not fenced or (none_fences and rng.random() < 0.05):
                named = None
            if ok and happened and f == "release":
                state[k] = [None, None]
        if not ok and not crashed and rng.random() >= bug_rate:
            continue  # a definite failure: dropped
        if not crashed and rng.random() < bug_rate / 2:
            if f == "acquire" and fenced:
                fence = rng.randint(0, counter[k] + 1)
            elif f != "acquire":
                c = rng.randrange(n_clients)
        call = lp - rng.randint(0, 12)
        ret = math.inf if crashed else lp + rng.randint(0, 12)
        output = UNKNOWN if crashed else LockOutput(fence if f == "acquire" else None)
        ops.append(Operation(c, LockInput(f, c, k, named), call, output, ret))  # type: ignore[arg-type]
    if fenced and rng.random() < swap_rate:
        ops = _swap_fences(rng, ops)
    return ops


def _swap_fences(rng: random.Random, ops: list[Operation]) -> list[Operation]:
    """Swap the fences of two ok acquires (and of the renews/releases naming them)."""
    grants = [
        op.output.fence
        for op in ops
        if op.input.f == "acquire" and isinstance(op.output, LockOutput)
    ]
    grants = [g for g in grants if g is not None]
    if len(grants) < 2:
        return ops
    a, b = rng.sample(grants, 2)
    swap = {a: b, b: a}
    out = []
    for op in ops:
        inp, output = op.input, op.output
        if isinstance(output, LockOutput) and output.fence in swap:
            output = LockOutput(swap[output.fence])
        if inp.fence in swap:
            inp = LockInput(inp.f, inp.client, inp.key, swap[inp.fence])
        out.append(Operation(op.client_id, inp, op.call, output, op.return_time))
    return out


def search(model_name: str, ops: list[Operation]) -> CheckResult:
    model = mutex if model_name == "mutex" else fenced_mutex
    return check_operations(model, ops)


def _show(ops: list[Operation]) -> str:
    return "\n".join(f"  [{op.call}, {op.return_time}] {op.input} -> {op.output}" for op in ops)


# ------------------------------------------------------------------ properties


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_mutex_matches_oracle(rng: random.Random) -> None:
    ops = gen_history(rng, fenced=False)
    expected = oracle("mutex", ops)
    event(f"linearizable={expected}")
    got = search("mutex", ops)
    assert got is not CheckResult.UNKNOWN
    assert (got is CheckResult.OK) == expected, _show(ops)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_fenced_mutex_matches_oracle(rng: random.Random) -> None:
    ops = gen_history(rng, fenced=True)
    expected = oracle("fenced-mutex", ops)
    event(f"linearizable={expected}")
    got = search("fenced-mutex", ops)
    assert got is not CheckResult.UNKNOWN
    assert (got is CheckResult.OK) == expected, _show(ops)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_fast_path_matches_search(rng: random.Random) -> None:
    ops = gen_history(rng, fenced=True, max_ops=rng.choice([6, 10, 14]), keys=1, swap_rate=0.4)
    fast = fast_check(ops)
    event(f"fast path applies={fast.applies}")
    slow = search("fenced-mutex", ops)
    assert slow is not CheckResult.UNKNOWN
    if fast.applies:
        event(f"verdict={fast.result}")
        assert fast.result is slow, f"{fast.reason}\n{_show(ops)}"
        if len(ops) <= 8:
            assert (fast.result is CheckResult.OK) == oracle("fenced-mutex", ops)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_checker_paths_agree(rng: random.Random) -> None:
    """The whole checker (several keys): fast path on or off gives the same verdict."""
    ops = gen_history(rng, fenced=True, max_ops=10, keys=2)
    on = check_lock_operations(ops, model_name="fenced-mutex")
    off = check_lock_operations(ops, model_name="fenced-mutex", use_fast_path=False)
    assert on["valid"] == off["valid"], _show(ops)
    assert on["valid"] in ((True, False) if ops else ("unknown",))


# ------------------------------------------------------------------ the generator is useful


@pytest.mark.parametrize("fenced", [False, True])
def test_generator_mixes_verdicts_and_crashes(fenced: bool) -> None:
    rng = random.Random(20240611)
    model = "fenced-mutex" if fenced else "mutex"
    verdicts = {True: 0, False: 0}
    crashed = fast_applies = 0
    for _ in range(300):
        ops = gen_history(rng, fenced=fenced)
        verdicts[oracle(model, ops)] += 1
        crashed += any(op.return_time == math.inf for op in ops)
        if fenced:
            fast_applies += all(fast_check(h).applies for h in by_key(ops).values())
    assert verdicts[True] > 60 and verdicts[False] > 60, verdicts
    assert crashed > 60
    if fenced:
        assert fast_applies > 100


# ------------------------------------------------------------------ Jepsen-shaped histories


def gen_jepsen(
    rng: random.Random, *, model: str, fences: bool, named: bool, max_ops: int = 8
) -> list[Operation]:
    """A small history as Jepsen and lockcheck clients make them: each worker has one op
    in flight, a crashed op (any kind) retires its process id, a worker that crashed
    inside a critical section releases under its new id naming its lease (the owner is
    the old id), fences grow with gaps (or are absent), releases name their fence (or
    not). The simulated service applies each op at one instant, with lease expiry for
    `fenced-mutex` (and sometimes for `mutex`, which then sees violations), and
    sometimes lies (a refusal recorded as ok, a stale fence)."""
    workers = rng.randint(1, 3)
    proc = list(range(workers))
    owner: list[int | None] = [None] * workers  # the process whose lease the worker holds
    held: list[Any] = [None] * workers  # the fence it believes it holds (or True)
    free_at = [0] * workers
    next_id = workers
    holder: int | None = None
    hfence: Any = None
    counter = 0
    bug = rng.choice([0.0, 0.3, 0.6, 0.9])
    # a TTL service checked against `mutex` (no expiry) is another way to be invalid
    expiry = 0.25 if model == "fenced-mutex" else rng.choice([0.0, 0.0, 0.2])
    ops: list[Operation] = []
    now = 0
    for _ in range(rng.randint(3, max_ops)):
        w = rng.randrange(workers)
        now += rng.randint(1, 4)
        if free_at[w] >= now:
            continue  # that worker is still busy
        call = max(free_at[w] + 1, now - rng.randint(0, 8))
        ret = now + rng.randint(0, 8)
        free_at[w] = ret
        if holder is not None and rng.random() < expiry:
            holder = hfence = None  # the lease expired
        if held[w] is None:
            f = "release" if rng.random() < 0.1 else "acquire"
        else:
            f = rng.choice(["renew", "renew", "release"])
        me = owner[w] if owner[w] is not None else proc[w]
        crashed = rng.random() < 0.2
        happened = not crashed or rng.random() < 0.5
        out_fence: Any = None
        if f == "acquire":
            ok = holder is None
            if ok and happened:
                counter += rng.choice([1, 1, 2])
                hfence = counter if fences else None
                holder = me
            out_fence = hfence if ok else (counter if fences else None)
        else:
            ok = holder == me and held[w] is not None
            if ok and happened and f == "release":
                holder = hfence = None
        if not ok and not crashed:
            if rng.random() >= bug:
                continue  # a definite failure: no effect, dropped
            if f == "acquire" and fences and rng.random() < 0.5:
                out_fence = rng.randint(0, counter + 1)  # a stale fence
        name = held[w] if named and isinstance(held[w], int) else None
        inp = LockInput(f, me, "k", None if f == "acquire" else name)  # type: ignore[arg-type]
        output: Any = UNKNOWN if crashed else LockOutput(out_fence if f == "acquire" else None)
        ops.append(Operation(proc[w], inp, call, output, math.inf if crashed else ret))
        if crashed:
            proc[w] = next_id  # retired; the worker goes on under a new id
            next_id += 1
            if f == "renew":
                owner[w] = me  # still inside: it will release the old lease
            else:
                owner[w] = held[w] = None
            free_at[w] = ret + 1
        elif f == "acquire":
            held[w] = out_fence if fences and out_fence is not None else True
            owner[w] = None
        elif f == "release":
            held[w] = owner[w] = None
    return ops


JEPSEN_SHAPES = [
    pytest.param(m, fences, named, id=f"{m}-{'fences' if fences else 'nofences'}"
                 f"{'-named' if named else ''}")
    for m in ("mutex", "fenced-mutex")
    for fences, named in ((False, False), (True, False), (True, True))
]


@pytest.mark.parametrize(("model", "fences", "named"), JEPSEN_SHAPES)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_fast_path_decides_jepsen_histories_as_the_oracle(
    model: str, fences: bool, named: bool, rng: random.Random
) -> None:
    ops = gen_jepsen(rng, model=model, fences=fences, named=named)
    fast = fast_check(ops, model)
    assert fast.applies, f"{fast.reason}\n{_show(ops)}"  # Jepsen-shaped: always decided
    expected = oracle(model, ops)
    event(f"linearizable={expected}")
    event(f"crashed ops={sum(o.return_time == math.inf for o in ops) > 0}")
    assert (fast.result is CheckResult.OK) == expected, f"{fast.reason}\n{_show(ops)}"
    if not expected:
        # the drawn window is illegal for the same reason
        assert search(model, list(fast.window)) is CheckResult.ILLEGAL, _show(list(fast.window))


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_mutex_fast_path_matches_search_or_declines(rng: random.Random) -> None:
    ops = gen_history(rng, fenced=False, max_ops=rng.choice([6, 10, 14]), keys=1)
    fast = fast_check(ops, "mutex")
    event(f"fast path applies={fast.applies}")
    if fast.applies:
        assert fast.result is search("mutex", ops), f"{fast.reason}\n{_show(ops)}"


@pytest.mark.parametrize(("model", "fences", "named"), JEPSEN_SHAPES)
def test_jepsen_generator_mixes_verdicts_and_crashes(model: str, fences: bool, named: bool) -> None:
    rng = random.Random(20261201)
    verdicts = {True: 0, False: 0}
    crashed = moved = 0
    for _ in range(300):
        ops = gen_jepsen(rng, model=model, fences=fences, named=named)
        verdicts[oracle(model, ops)] += 1
        crashed += any(op.return_time == math.inf for op in ops)
        moved += any(op.client_id != op.input.client for op in ops)
    assert verdicts[True] > 60 and verdicts[False] > 25, verdicts
    assert crashed > 60 and moved > 3, (crashed, moved)
