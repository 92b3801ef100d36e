"""The compiled search (`_csearch.c`) against the Python one: the same steps, so the
same verdict, the same linearization and the same number of cached configurations, on
Porcupine's and Knossos's corpora and on random histories with crashed ops."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import signal
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockcheck.checker.external import engine_operations, keyed
from lockcheck.checker.formats.jepsen_edn import read_jepsen_edn
from lockcheck.checker.formats.porcupine_logs import parse_etcd_log, parse_kv_log
from lockcheck.checker.porcupine import Event, Model, Operation, checker, events_to_operations
from lockcheck.checker.porcupine.lock_models import fenced_mutex, mutex
from lockcheck.checker.porcupine.model import UNKNOWN
from lockcheck.checker.porcupine.models import cas_register, kv, register

from .test_lock_models_properties import gen_history, gen_jepsen

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "testdata"
PORCUPINE, KNOSSOS = SHARED / "porcupine", SHARED / "jepsen-histories"
needs_compiled = pytest.mark.skipif(
    checker._csearch is None, reason="the compiled search was not built (no C compiler?)")
pytestmark = needs_compiled


LIMIT = 60_000  # pushes per partition: the hard partitions of kv/c50-bad never end


def _drive(gen: Generator[None, int, Any]) -> Any:
    pushes = 0
    try:
        next(gen)
        while pushes < LIMIT:
            gen.send(997)  # odd slices: resuming mid-walk must not change anything
            pushes += 997
    except StopIteration as stop:
        out = stop.value
        return out[0], out[1], out[3]
    gen.close()
    return "unfinished"


def both(model: Model[Any, Any, Any], history: Sequence[Operation]) -> None:
    parts = checker._split_operations(model, history)
    for part in parts:
        a = _drive(checker._search(checker._prepare(model, part), False, {}))
        b = _drive(checker._compiled_search(checker._prepare(model, part)))
        assert a == b


NO_PORCUPINE = (f"Porcupine's test corpus is not beside this clone ({PORCUPINE}); it ships "
                "in the project's shared/ folder only")


def _porcupine_cases() -> list[Any]:
    if not (PORCUPINE / "expected.json").exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_PORCUPINE))]
    names = [n for n, v in json.loads((PORCUPINE / "expected.json").read_text()).items()
             if v is not None]
    return [pytest.param(n, id=n, marks=[pytest.mark.slow] if n == "kv/c50-ok.txt" else [])
            for n in sorted(names)]


@pytest.mark.parametrize("name", _porcupine_cases())
def test_porcupine_corpus(name: str) -> None:
    if name.startswith("jepsen/"):
        both(cas_register(), events_to_operations(parse_etcd_log(PORCUPINE / name)))
    else:
        both(kv(), events_to_operations(parse_kv_log(PORCUPINE / name)))


def test_knossos_cas_register_corpus() -> None:
    if not (KNOSSOS / "expected.json").exists():
        pytest.skip(f"the Jepsen/Knossos history corpus is not beside this clone ({KNOSSOS}); "
                    "it ships in the project's shared/ folder only")
    for name, want in json.loads((KNOSSOS / "expected.json").read_text()).items():
        if want["model"] != "cas-register":
            continue
        ops = engine_operations(read_jepsen_edn(KNOSSOS / name), "cas-register",
                                nil_unknown=True)
        both(keyed(cas_register(want.get("initial"))), ops)


SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_random_lock_histories(rng: random.Random) -> None:
    both(fenced_mutex, gen_history(rng, fenced=True, max_ops=12))
    both(mutex, gen_history(rng, fenced=False, max_ops=12))
    both(mutex, gen_jepsen(rng, model="mutex", fences=False, named=False, max_ops=12))


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_random_register_histories(rng: random.Random) -> None:
    ops = []
    for i in range(rng.randint(1, 14)):
        call = rng.randint(0, 40)
        f = rng.choice(["read", "write", "write"])
        ret = math.inf if rng.random() < 0.2 else call + rng.randint(0, 10)
        inp = ("read", None) if f == "read" else ("write", rng.randint(0, 2))
        out = rng.choice([None, 0, 1, 2]) if f == "read" and ret != math.inf else None
        ops.append(Operation(i % 4, inp, call, out, ret))
    both(register(), ops)
    both(register(0), ops)


def _native_off(model: Model[Any, Any, Any], history: Sequence[Operation]) -> None:
    """The compiled search with the kv step in C and with the Python step: the same."""
    for part in checker._split_operations(model, history):
        prepared = checker._prepare(model, part)
        assert prepared.native, "kv's step is expected to run in C"
        a = _drive(checker._compiled_search(prepared))
        prepared.native = 0
        b = _drive(checker._compiled_search(prepared))
        assert a == b


def _random_kv_ops(rng: random.Random) -> list[Operation]:
    ops = []
    for i in range(rng.randint(1, 14)):
        call = rng.randint(0, 40)
        f = rng.choice(["get", "put", "append", "append"])
        ret = math.inf if rng.random() < 0.2 else call + rng.randint(0, 10)
        key = rng.choice(["a", "b"])
        value = None if f == "get" else rng.choice(["x", "y", "xy", ""])
        out = None
        if f == "get" and ret != math.inf:
            out = rng.choice(["", "x", "y", "xy", "yx", "xx"])
        ops.append(Operation(i % 4, (f, key, value), call, out, ret))
    return ops


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_random_kv_histories_native_step(rng: random.Random) -> None:
    ops = _random_kv_ops(rng)
    both(kv(), ops)
    _native_off(kv(), ops)


LONG = "0123456789abcdefghij"  # longer than the steps between kept prefix hashes


def _kv_execution(rng: random.Random) -> list[Operation]:
    """One key's ops as a real store would give them (each takes effect at a moment
    between its call and its return), some gets' outputs then garbled, some ops
    crashed: mostly linearizable, with near misses."""
    steps = []
    for i in range(rng.randint(1, 14)):
        call = rng.uniform(0, 20)
        at = call + rng.uniform(0, 6)
        f = rng.choice(["get", "get", "put", "append", "append", "append"])
        value = None if f == "get" else rng.choice(["a", "b", "ab", "", "ba", LONG])
        steps.append((at, i, f, value, call, at + rng.uniform(0, 6)))
    state = ""
    ops = []
    for _, i, f, value, call, ret in sorted(steps):
        out = state if f == "get" else None
        if f == "get" and rng.random() < 0.15:
            out = rng.choice(["a", "ab", "b", "", "aab", "ba", LONG + "a", "a" + LONG])
        state = value if f == "put" else state + value if f == "append" else state
        if rng.random() < 0.1:
            ret, out = math.inf, None
        ops.append(Operation(i % 5, (f, "k", value), call, out, ret))
    return ops


def _threads_search(part: checker._Part | checker._CPart, timeout: float = -1.0) -> Any:
    """The search as the plain check runs it (`run_all`, which leaves out configurations
    it proves to fail): (code, linearization), or None if unfinished."""
    search = checker._new_search(part)
    assert search.pure
    (out,), _, _ = checker._csearch.run_all([search], timeout, 1)
    return out and out[:2]


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_threads_leave_out_only_configurations_that_fail(rng: random.Random) -> None:
    # a get that no put can precede any more reads the state followed by appends: the
    # threads drop configurations whose state is no prefix of its output; the verdict
    # and the linearization found are still the Python search's
    model = kv()
    for ops in (_kv_execution(rng), _kv_execution(rng), _random_kv_ops(rng)):
        for part in checker._split_operations(model, ops):
            prepared = checker._prepare(model, part)
            if prepared.need:
                verdict, lin, _ = _drive(checker._search(prepared, False, {}))
                assert _threads_search(prepared) == (int(verdict is not checker._OK), lin)


@pytest.mark.parametrize("name", ["c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok",
                                  "c50-bad"])
def test_threads_like_the_search_on_the_kv_corpus(name: str) -> None:
    if not (PORCUPINE / "expected.json").exists():
        pytest.skip(NO_PORCUPINE)
    cparts = checker._event_parts(kv(), parse_kv_log(PORCUPINE / f"kv/{name}.txt"))
    assert cparts is not None
    compared = 0
    for part in cparts:
        want = _drive(checker._compiled_search(part))
        if want != "unfinished":  # c50-bad has partitions that never end
            assert _threads_search(part, 20.0) == (int(want[0] is not checker._OK), want[1])
            compared += 1
    assert compared >= 5


def test_native_kv_step_leaves_odd_ops_to_python() -> None:
    # an op the C step does not know goes to Python's step, which raises
    ops = [Operation(0, ("cas", "k", "x"), 0, None, 1)]
    with pytest.raises(ValueError, match="unknown operation"):
        _drive(checker._compiled_search(checker._prepare(kv(), ops)))


def _kv_events(rng: random.Random, pure: bool) -> list[Event]:
    """Random kv events over two keys, some calls never returning; with `pure` False
    some gets return None (not a str), which the search in pure C does not take."""
    events: list[Event] = []
    open_ids: list[int] = []
    for i in range(rng.randint(1, 16)):
        if open_ids and rng.random() < 0.5:
            j = open_ids.pop(rng.randrange(len(open_ids)))
            f = events[[ev.id for ev in events].index(j)].value[0]
            out = rng.choice(["", "x", "y", "xy", "yx"]) if f == "get" else None
            if f == "get" and not pure and rng.random() < 0.3:
                out = None
            events.append(Event(0, "return", out, j))
        f = rng.choice(["get", "put", "append", "append"])
        value = None if f == "get" else rng.choice(["x", "y", "xy", ""])
        events.append(Event(i % 4, "call", (f, rng.choice(["a", "b"]), value), i))
        open_ids.append(i)
    for j in list(open_ids):  # most return; the rest crashed
        if rng.random() < 0.7:
            f = events[[ev.id for ev in events].index(j)].value[0]
            events.append(Event(0, "return", "x" if f == "get" else None, j))
    return events


@SETTINGS
@given(st.randoms(use_true_random=False), st.booleans())
def test_events_prepared_in_one_pass_like_operations(rng: random.Random, pure: bool) -> None:
    # the plain check's one pass over the events gives the search what the general
    # path (events -> operations -> entries) gives it, and the same verdict
    model = kv()
    events = _kv_events(rng, pure)
    assert model.partition_events is not None
    for group in model.partition_events(events):
        lean = checker._prepare_events(model, group)
        full = checker._prepare(model, events_to_operations(group))
        assert lean is not None
        for name in ("match", "opi", "rid", "cid", "ro", "rv", "inputs", "outputs", "need",
                     "native"):
            assert getattr(lean, name) == getattr(full, name), name
    want = checker.check_events_verbose(model, events)[0]  # the Python search
    assert checker.check_events(model, events) is want
    assert checker.check_events(model, events, max_cache=10**9) is want  # one core


def _outcomes(make: Callable[[], list[Any]]) -> list[Any]:
    """The searches `make` gives, each run to its end by `Search.run`, then by `run_all`
    (None where there is no search)."""
    plain = [s and s.run(10**9) for s in make()]
    return plain + [s and checker._csearch.run_all([s], -1.0, 1)[0][0] for s in make()]


@SETTINGS
@given(st.randoms(use_true_random=False), st.booleans())
def test_kv_searches_made_in_c_like_in_python(rng: random.Random, pure: bool) -> None:
    # the shipped kv model's partitions made into searches in C, in one pass, are the
    # searches the Python path makes; None where that path makes one that is not pure
    events = _kv_events(rng, pure)
    cparts = checker._event_parts(kv(), events)
    assert cparts is not None
    for init in ("", "x"):
        parts = [dataclasses.replace(p, init=init) for p in cparts]

        def python(parts: list[checker._CPart] = parts) -> list[Any]:
            return [checker._new_search(p) if p.need else None for p in parts]

        def c(init: str = init) -> list[Any]:
            return checker._csearch.kv_searches(events, init, UNKNOWN)  # type: ignore[no-any-return]

        if not all(s is None or s.pure for s in python()):
            assert c() is None
            return
        assert all(s is None or s.pure for s in c())
        assert _outcomes(c) == _outcomes(python)


def test_kv_searches_leave_odd_events_to_python() -> None:
    call, ret = Event(0, "call", ("put", "a", "x"), 0), Event(0, "return", None, 0)
    odd = [
        [ret],  # a return without its call
        [call, call],  # a call open twice
        [call, Event(0, "done", None, 0)],  # no such kind
        [Event(0, "call", ("put", "a", "x"), "0")],  # an id that is no int
        [Event(0, "call", ("put", "a", "x"), -1)],
        [Event(0, "call", ["put", "a", "x"], 0)],  # an input that is no tuple
        [Event(0, "call", ("cas", "a", "x"), 0)],  # no such op
        [Event(0, "call", ("put", "a", 5), 0)],  # a value that is no str
        [Event(0, "call", ("get", "a", None), 0), Event(0, "return", 5, 0)],
        [Event(0, "call", ("put", ["a"], "x"), 0)],  # a key that is not hashable
    ]
    for events in odd:
        assert checker._csearch.kv_searches(events, "", UNKNOWN) is None, events
    assert checker._csearch.kv_searches([call, ret], 0, UNKNOWN) is None  # init no str
    with pytest.raises(KeyError):  # as before: the partitioning finds no call
        checker.check_events(kv(), [ret])
    with pytest.raises(ValueError, match="already open"):
        checker.check_events(kv(), [call, call])
    # ids that are strings take the Python path, to the same verdict
    named = [Event(0, "call", ("get", "a", None), "g"), Event(0, "return", "x", "g")]
    assert checker.check_events(kv(), named) is checker.CheckResult.ILLEGAL
    assert checker.check_events(kv(), [call, ret, *named]) is checker.CheckResult.OK


def test_malformed_events_take_the_general_path() -> None:
    model = kv(partitioned=False)  # kv's partitioning has its own KeyError
    with pytest.raises(ValueError, match="without a call"):
        checker.check_events(model, [Event(0, "return", None, 7)])
    with pytest.raises(ValueError, match="already open"):
        checker.check_events(model, [Event(0, "call", ("get", "a", None), 1),
                                     Event(0, "call", ("get", "a", None), 1)])


def test_pure_c_only_for_strings() -> None:
    model = kv()
    ok = [Event(0, "call", ("put", "a", "x"), 0), Event(0, "return", None, 0),
          Event(0, "call", ("get", "a", None), 1), Event(0, "return", "x", 1)]
    odd = [*ok[:3], Event(0, "return", 5, 1)]  # an int read: Python compares it
    for events, pure, want in ((ok, True, checker.CheckResult.OK),
                               (odd, False, checker.CheckResult.ILLEGAL)):
        (part,) = checker._event_parts(model, events) or []
        assert checker._new_search(part).pure is pure
        assert checker.check_events(model, events) is want


def test_threads_stop_at_the_first_illegal_partition_or_the_timeout() -> None:
    if not (PORCUPINE / "expected.json").exists():
        pytest.skip(NO_PORCUPINE)
    events = parse_kv_log(PORCUPINE / "kv/c50-bad.txt")  # some partitions never end
    model = kv()
    cparts = checker._event_parts(model, events)
    assert cparts is not None
    searches = [checker._new_search(p) for p in cparts]
    assert all(s.pure for s in searches)
    outs, stop, at = checker._csearch.run_all(searches, -1.0, 2)
    assert stop == 1 and outs[at][0] == 1 and outs[at][1] is None
    assert any(o is None for o in outs)  # the hard ones were stopped
    result, info = checker._run(model, [], 0.0, None, False, cparts)
    assert result is checker.CheckResult.UNKNOWN and "timeout" in info.note


def test_a_signal_stops_the_threads() -> None:
    # Ctrl-C (here: an alarm whose handler raises) must stop a search in C threads that
    # has no end in sight; the timeout is only there so that a failure is not a hang
    if not (PORCUPINE / "expected.json").exists():
        pytest.skip(NO_PORCUPINE)
    model = kv()
    assert model.partition_events is not None
    events = parse_kv_log(PORCUPINE / "kv/c50-bad.txt")
    hard = model.partition_events(events)[0]  # never ends within seconds

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            checker.check_events(model, hard, timeout=10)
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
