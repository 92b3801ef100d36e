"""The linearizability search: Wing & Gong's backtracking with Lowe's memoization.

Each operation becomes a call entry and a return entry, sorted in real-time order
(closed intervals: on equal times calls come first) and linked in a doubly linked
list held in two int arrays. The search walks the list from the head:

* at a call, it tries to linearize the operation now: if the model allows the step and
  the configuration (set of linearized operations, state) was never seen, it records
  the configuration, pushes the operation, and unlinks its call and return;
* at a return, the operation it closes should already have been linearized, so the
  search backtracks: it pops the last linearized operation, relinks it and tries the
  entries after it. An empty stack there means the history is not linearizable.

Crashed operations (``return_time == inf``) are optional: the search succeeds as soon
as every non-crashed operation is linearized.

The set of linearized operations is kept as ``(low, window, crashed bits)``: every
required op below ``low`` (in call order) is linearized, ``window`` is a Python int
bitset of the ops from ``low`` on, and the optional crashed ops have their own bitset.
The ints stay as small as the concurrency rather than growing with the history, so long
histories check in linear time. The memo cache is a set of ``(low, window, crashed
bits, state)`` tuples; every (operation, state) transition is computed once.
Models may mark read-only operations, which the search then linearizes eagerly (see
`_search`).

Partitions are searched by resumable generators stepped round-robin in slices of
pushes, small in the first rounds and growing: a hard partition cannot starve the
others, the first illegal partition ends the check (one that is illegal within a few
pushes, before the others have spent more than that), and the timeout and the cache cap
are checked between slices. The cache cap
bounds the total number of memoized configurations over all partitions. When every
partition's compiled search is pure C (no Python object in its states: the kv model on
strings) and there is no cache cap, the plain check runs them on all cores instead
(`_run_threads`), leaving out configurations that a get no put can precede any
more rules out (see `_csearch.c`): the verdict is the same, only found sooner.

The same search is compiled from ``_csearch.c`` when the install had a C compiler
(`COMPILED`); the plain check uses it, verbose mode (partial linearizations) always
runs the Python one. Both take the same steps in the same order, so they give the same
verdicts, linearizations and cache sizes (tests/checker/test_porcupine_compiled.py).
Set ``LOCKCHECK_PURE_ENGINE=1`` to use the Python search everywhere.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from .model import (
    UNKNOWN,
    CheckResult,
    Event,
    LinearizationInfo,
    Model,
    Operation,
    PartitionInfo,
    make_operation,
)
from .models import _kv_partition_events, _kv_read_only, _kv_read_value, _kv_value_step

# steps of the shipped models that the compiled search runs in C (same results, no call
# into Python per transition), by identity; see _csearch.c:kv_step
_NATIVE_STEPS: dict[Callable[..., Any], int] = {_kv_value_step: 1}

SLICE = 1000  # pushes per partition between two looks at the clock / the other partitions
FIRST_SLICE = 64  # the first round's slice, doubled each round up to SLICE: a partition
# that is illegal within a few pushes ends the check before the others have spent more

try:  # the compiled search, built by `pip install` when a C compiler is there
    from . import _csearch  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a copy without the extension
    _csearch = None
COMPILED = _csearch is not None and not os.environ.get("LOCKCHECK_PURE_ENGINE")
# threads for the partitions of one check (pure C searches only; see _run_threads)
_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
    os.cpu_count() or 1)

_OK = CheckResult.OK
_ILLEGAL = CheckResult.ILLEGAL
_UNKNOWN = CheckResult.UNKNOWN


class _Keyed:
    """A state wrapped so that its identity for memoization is a key, or equal/hash."""

    __slots__ = ("eq", "h", "key", "state")

    def __init__(self, state: Any, key: Any, h: int, eq: Callable[[Any, Any], bool] | None) -> None:
        self.state = state
        self.key = key
        self.h = h
        self.eq = eq

    def __hash__(self) -> int:
        return self.h

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Keyed):
            return NotImplemented
        if self.eq is None:
            return bool(self.key == other.key)
        return bool(self.eq(self.state, other.state))


def _engine_step(model: Model[Any, Any, Any]) -> tuple[Any, Callable[[Any, Any, Any], Any]]:
    """The initial state and step the search uses: states wrapped when not hashable."""
    init = model.init()
    step = model.step
    keyf, eq, hf = model.key, model.equal, model.hash
    if keyf is None and eq is None:
        try:
            hash(init)
        except TypeError as exc:
            raise TypeError(
                "model states must be hashable; give the model a key (or equal and hash)"
            ) from exc
        return init, step

    def wrap(state: Any) -> _Keyed:
        if keyf is not None:
            k = keyf(state)
            return _Keyed(state, k, hash(k), None)
        assert hf is not None
        return _Keyed(state, None, hf(state), eq)

    def wrapped_step(w: _Keyed, input: Any, output: Any) -> tuple[bool, Any]:
        ok, nxt = step(w.state, input, output)
        return (True, wrap(nxt)) if ok else (False, w)

    return wrap(init), wrapped_step


@dataclass(slots=True)
class _Part:
    """One partition, precomputed for the search. Arrays are indexed by entry."""

    history: tuple[Operation, ...]
    init: Any  # the engine's initial state (wrapped if the model needs it)
    step: Callable[[Any, Any, Any], Any]
    nxt: list[int]  # linked list; 0 is the head, 2n+1 the tail sentinel (a return)
    prv: list[int]
    tr: list[dict[Any, Any] | None]  # call entries: memo state -> next state (or _ILL)
    rid: list[int]  # call entries: index among required ops in call order, -1 if crashed
    cbit: list[int]  # call entries of crashed ops: 1 << index among crashed ops
    cid: list[int]  # call entries of crashed ops: index among crashed ops, -1 otherwise
    match: list[int]  # call entries: their return entry
    opi: list[int]  # call entries: op index
    req: list[int]  # call entries: 1 if the op must be linearized, 0 if crashed
    ro: list[int]  # call entries: 1 if the model says the op is read-only
    rv: list[Any]  # read-only call entries: the one state where legal, or UNKNOWN
    inputs: list[Any]
    outputs: list[Any]
    need: int  # number of non-crashed ops
    native: int  # the compiled search's own code for the model's step, 0 if none


class _Illegal:
    __slots__ = ()


_ILL: Any = _Illegal()  # a memoized illegal transition


def _prepare(model: Model[Any, Any, Any], history: Sequence[Operation]) -> _Part:
    ops = tuple(history)
    n = len(ops)
    times: list[tuple[Any, int, int]] = []
    for i, op in enumerate(ops):
        if not op.return_time >= op.call:
            raise ValueError(f"operation {i} returns before its call: {op!r}")
        times.append((op.call, 0, i))
        times.append((op.return_time, 1, i))
    times.sort()
    size = 2 * n + 2
    tr: list[dict[Any, Any] | None] = [None] * size
    rid = [-1] * size
    cbit = [0] * size
    cid = [-1] * size
    n_req = 0
    n_crashed = 0
    match = [0] * size
    opi = [-1] * size
    req = [0] * size
    ro = [0] * size
    rv: list[Any] = [UNKNOWN] * size
    inputs: list[Any] = [None] * size
    outputs: list[Any] = [None] * size
    call_entry = [0] * n
    read_only = model.read_only
    # comparing with the read value is only right when states are compared with ==
    read_value = model.read_value if model.key is None and model.equal is None else None
    for pos, (_, kind, i) in enumerate(times):
        e = pos + 1
        if kind == 0:
            op = ops[i]
            call_entry[i] = e
            tr[e] = {}
            opi[e] = i
            crashed = op.return_time == math.inf
            if crashed:
                cbit[e] = 1 << n_crashed
                cid[e] = n_crashed
                n_crashed += 1
            else:
                rid[e] = n_req
                n_req += 1
            req[e] = 0 if crashed else 1
            inputs[e] = op.input
            outputs[e] = out = UNKNOWN if crashed else op.output
            if read_only is not None and read_only(op.input, out):
                ro[e] = 1
                if read_value is not None:
                    rv[e] = read_value(op.input, out)
        else:
            match[call_entry[i]] = e
    init, step = _engine_step(model)
    return _Part(
        history=ops,
        init=init,
        step=step,
        nxt=list(range(1, size + 1)),
        prv=list(range(-1, size - 1)),
        tr=tr,
        rid=rid,
        cbit=cbit,
        cid=cid,
        match=match,
        opi=opi,
        req=req,
        ro=ro,
        rv=rv,
        inputs=inputs,
        outputs=outputs,
        need=sum(req),
        native=_NATIVE_STEPS.get(step, 0),
    )


@dataclass(slots=True)
class _CPart:
    """What the compiled search needs of a partition (fields as in `_Part`)."""

    init: Any
    step: Callable[[Any, Any, Any], Any]
    match: list[int]
    opi: list[int]
    rid: list[int]
    cid: list[int]
    ro: list[int]
    rv: list[Any]
    inputs: list[Any]
    outputs: list[Any]
    need: int
    native: int


def _prepare_events(model: Model[Any, Any, Any], events: Sequence[Event]) -> _CPart | None:
    """``_prepare(model, events_to_operations(events))`` for the compiled search, in
    one pass and without making operations; None if the events are malformed (the
    general path then says how).

    The times are the events' indices, all distinct, so the entries are the events in
    their order, then the returns of the crashed ops (``inf``) in call order.
    """
    ne = len(events)
    calls: list[int] = []  # call entries in order
    open_calls: dict[int, int] = {}
    match = [0] * (ne + 2)
    inputs: list[Any] = [None] * (ne + 2)
    outputs: list[Any] = [None] * (ne + 2)
    for e, ev in enumerate(events, 1):
        kind = ev.kind
        if kind == "call":
            if ev.id in open_calls:
                return None
            open_calls[ev.id] = e
            calls.append(e)
            inputs[e] = ev.value
        elif kind == "return":
            c = open_calls.pop(ev.id, None)
            if c is None:
                return None
            match[c] = e
            outputs[c] = ev.value
        else:
            return None
    n = len(calls)
    size = 2 * n + 2
    extra = size - len(match)
    if extra:
        match += [0] * extra
        inputs += [None] * extra
        outputs += [None] * extra
    opi = [-1] * size
    rid = [-1] * size
    cid = [-1] * size
    ro = [0] * size
    rv: list[Any] = [UNKNOWN] * size
    read_only = model.read_only
    # comparing with the read value is only right when states are compared with ==
    read_value = model.read_value if model.key is None and model.equal is None else None
    n_req = 0
    n_crashed = 0
    for i, e in enumerate(calls):
        opi[e] = i
        if match[e]:
            rid[e] = n_req
            n_req += 1
            out = outputs[e]
        else:  # crashed: its return comes after every event
            match[e] = ne + 1 + n_crashed
            cid[e] = n_crashed
            n_crashed += 1
            outputs[e] = out = UNKNOWN
        if read_only is not None and read_only(inputs[e], out):
            ro[e] = 1
            if read_value is not None:
                rv[e] = read_value(inputs[e], out)
    init, step = _engine_step(model)
    return _CPart(init=init, step=step, match=match, opi=opi, rid=rid, cid=cid, ro=ro, rv=rv,
                  inputs=inputs, outputs=outputs, need=n_req,
                  native=_NATIVE_STEPS.get(step, 0))


# What a finished search returns: the verdict, the linearization (OK) or None, in
# verbose mode the longest partial linearization containing each op, and the number of
# configurations it memoized.
_Outcome = tuple[CheckResult, tuple[int, ...] | None, dict[int, tuple[int, ...]] | None, int]


def _search(part: _Part, verbose: bool, sink: dict[str, Any]) -> Generator[None, int, _Outcome]:
    """Search one partition; resumable. Send it a budget of pushes, it yields when spent.

    Each push memoizes one configuration, so pushes count cache entries. In verbose
    mode ``sink["best"]`` shows the partial linearizations so far (as cons lists, see
    `_unpath`), also when the search is stopped before it ends.

    Read-only operations (``model.read_only``) get a shortcut: if one of them can be
    linearized next, it is (Lemma: it leaves the state alone, so any linearization that
    places it later can place it now). If that configuration fails, so does the one
    before it; such forced pushes are marked on the stack and backtracked through.
    With ``model.read_value`` a read-only op is legal iff the state equals its value,
    which saves calling `step` on every new state.
    """
    nxt = part.nxt[:]
    prv = part.prv[:]
    tr = part.tr
    rid = part.rid
    cbit = part.cbit
    match = part.match
    req = part.req
    opi = part.opi
    ro = part.ro
    rv = part.rv
    unk = UNKNOWN
    inputs = part.inputs
    outputs = part.outputs
    step = part.step
    need = part.need
    has_ro = any(ro)
    tail = len(nxt) - 1  # a return entry with nothing after it: "backtrack now"
    ill = _ILL
    stack: list[tuple[int, Any, int, int, int, int]] = []
    push = stack.append
    pop = stack.pop
    cache: set[tuple[int, int, int, Any]] = set()
    cache_add = cache.add
    # verbose bookkeeping: per op, the longest partial linearization that contains it
    # (the current path is a cons list (op, rest), so that a record costs O(1))
    best_len: dict[int, int] = {}
    best: dict[int, Any] = {}
    path: Any = None
    sink["best"] = best
    rec: list[int] = []  # rec[k]: deepest record made while stack[k] was in place

    if need == 0:  # nothing to linearize (no ops, or only crashed ones)
        return _OK, (), ({} if verbose else None), 0
    budget = yield  # always >= 1: the scheduler never grants an empty slice
    # the linearized ops: every required op below `low` (in call order), those at
    # low + k for each bit k of `window` (bit 0 is always clear), and the crashed ops
    # in `cbits`; so the ints stay as small as the concurrency, not the history
    low = 0
    window = 0
    cbits = 0
    state = part.init
    e = nxt[0]
    fresh = has_ro  # a new configuration: look for a read-only op to force first
    while True:
        if fresh:
            # A new configuration: one walk over the candidates (the calls before the
            # first return). A read-only op that fits is forced; otherwise the walk
            # notes the first other op that fits, where the ordinary scan then starts.
            fresh = False
            x = nxt[0]
            cand = 0
            while True:
                t = tr[x]
                if t is None:  # end of the candidates
                    e = cand or tail  # tail: nothing fits, backtrack
                    break
                r = ro[x]
                if r or not cand:
                    if r and (v := rv[x]) is not unk:
                        if v != state:
                            x = nxt[x]
                            continue
                        ns = state
                    else:
                        ns = t.get(state, t)
                        if ns is t:
                            ok, ns = step(state, inputs[x], outputs[x])
                            if not ok:
                                ns = ill
                            t[state] = ns
                    if ns is not ill:
                        j = rid[x]
                        if j < 0:
                            nl = low
                            nw = window
                            nc = cbits | cbit[x]
                        elif j != low:
                            nl = low
                            nw = window | (1 << (j - low))
                            nc = cbits
                        else:
                            nw = window | 1
                            j = (nw ^ (nw + 1)).bit_length() - 1
                            nw >>= j
                            nl = low + j
                            nc = cbits
                        k = (nl, nw, nc, ns)
                        if not r:
                            if k not in cache:
                                cand = x
                        elif k in cache:  # explored and failed: so does this configuration
                            e = tail
                            break
                        else:
                            cache_add(k)
                            push((x, state, 1, low, window, cbits))
                            if verbose:
                                path = (opi[x], path)
                            low = nl
                            window = nw
                            cbits = nc
                            state = ns
                            p = prv[x]
                            q = nxt[x]
                            nxt[p] = q
                            prv[q] = p
                            r = match[x]
                            p = prv[r]
                            q = nxt[r]
                            nxt[p] = q
                            prv[q] = p
                            if req[x]:
                                need -= 1
                                if not need:
                                    lin = tuple(opi[y[0]] for y in stack)
                                    return (
                                        _OK,
                                        lin,
                                        ({i: lin for i in lin} if verbose else None),
                                        len(cache),
                                    )
                            budget -= 1
                            if not budget:
                                budget = yield
                            x = nxt[0]
                            cand = 0
                            continue
                x = nxt[x]
        t = tr[e]
        if t is not None:  # a call: try to linearize it now
            if ro[e]:  # read-only ops were tried when this configuration was new
                e = nxt[e]
                continue
            ns = t.get(state, t)
            if ns is t:
                ok, ns = step(state, inputs[e], outputs[e])
                if not ok:
                    ns = ill
                t[state] = ns
            if ns is not ill:
                j = rid[e]
                if j < 0:
                    nl = low
                    nw = window
                    nc = cbits | cbit[e]
                elif j != low:
                    nl = low
                    nw = window | (1 << (j - low))
                    nc = cbits
                else:
                    nw = window | 1
                    j = (nw ^ (nw + 1)).bit_length() - 1
                    nw >>= j
                    nl = low + j
                    nc = cbits
                k = (nl, nw, nc, ns)
                if k not in cache:
                    cache_add(k)
                    push((e, state, 0, low, window, cbits))
                    if verbose:
                        path = (opi[e], path)
                    low = nl
                    window = nw
                    cbits = nc
                    state = ns
                    # unlink the call and its return
                    p = prv[e]
                    q = nxt[e]
                    nxt[p] = q
                    prv[q] = p
                    r = match[e]
                    p = prv[r]
                    q = nxt[r]
                    nxt[p] = q
                    prv[q] = p
                    if req[e]:
                        need -= 1
                        if not need:
                            lin = tuple(opi[y[0]] for y in stack)
                            return (
                                _OK,
                                lin,
                                ({i: lin for i in lin} if verbose else None),
                                len(cache),
                            )
                    budget -= 1
                    if not budget:
                        budget = yield
                    e = nxt[0]
                    fresh = has_ro
                    continue
            e = nxt[e]
        else:  # a return whose call is not linearized: backtrack
            if not stack:
                return _ILLEGAL, None, (_unpath(best) if verbose else None), len(cache)
            if verbose:
                d = len(stack)
                top = len(rec)
                if top < d:
                    rec.extend([d] * (d - top))
                    lo = top
                else:
                    lo = d
                while lo > 0 and rec[lo - 1] < d:
                    lo -= 1
                    rec[lo] = d
                for j in range(lo, d):
                    i = opi[stack[j][0]]
                    if best_len.get(i, 0) < d:
                        best_len[i] = d
                        best[i] = path
                if len(rec) >= d:
                    del rec[d - 1 :]
                path = path[1]
            e, state, forced, low, window, cbits = pop()
            need += req[e]
            # relink the return, then the call (reverse order of unlinking)
            r = match[e]
            nxt[prv[r]] = r
            prv[nxt[r]] = r
            nxt[prv[e]] = e
            prv[nxt[e]] = e
            e = tail if forced else nxt[e]


def _new_search(part: _Part | _CPart) -> Any:
    return _csearch.Search(part.match, part.opi, part.rid, part.cid, part.ro, part.rv,
                           part.inputs, part.outputs, part.step, part.init, UNKNOWN,
                           part.native)


def _compiled_search(
    part: _Part | _CPart, search: Any = None
) -> Generator[None, int, _Outcome]:
    """`_search` (not verbose) in C: the same steps, resumable the same way."""
    if part.need == 0:
        return _OK, (), None, 0
    if search is None:
        search = _new_search(part)
    budget = yield
    while True:
        done = search.run(budget)
        if done is not None:
            code, lin, entries = done
            return (_OK if code == 0 else _ILLEGAL), lin, None, entries
        budget = yield


def _unpath(best: dict[int, Any]) -> dict[int, tuple[int, ...]]:
    """Turn the cons-list paths of `_search` into tuples, sharing equal ones."""
    done: dict[int, tuple[int, ...]] = {}
    out: dict[int, tuple[int, ...]] = {}
    for i, node in best.items():
        lin = done.get(id(node))
        if lin is None:
            ops: list[int] = []
            n = node
            while n is not None:
                ops.append(n[0])
                n = n[1]
            lin = done[id(node)] = tuple(reversed(ops))
        out[i] = lin
    return out


def _distinct(lins: dict[int, tuple[int, ...]] | None) -> tuple[tuple[int, ...], ...]:
    if not lins:
        return ()
    seen: dict[tuple[int, ...], None] = {}
    for lin in lins.values():
        seen.setdefault(lin, None)
    # longest first, then by content, so that output is stable
    return tuple(sorted(seen, key=lambda p: (-len(p), p)))


def _run(
    model: Model[Any, Any, Any],
    histories: Sequence[Sequence[Operation]],
    timeout: float | None,
    max_cache: int | None,
    verbose: bool,
    cparts: list[_CPart] | None = None,
) -> tuple[CheckResult, LinearizationInfo]:
    """Check the partitions `histories`, or (the plain check only) `cparts`."""
    t0 = time.monotonic()
    deadline = None if timeout is None else t0 + timeout
    if max_cache is not None and max_cache < 0:
        raise ValueError("max_cache must be >= 0")
    parts: Sequence[_Part | _CPart] = (
        cparts if cparts is not None else [_prepare(model, h) for h in histories]
    )
    compiled = cparts is not None or (COMPILED and not verbose)
    searches = [_new_search(p) if compiled and p.need else None for p in parts]
    if max_cache is None and any(searches) and all(s is None or s.pure for s in searches):
        # nothing to share but the clock: the partitions run on all cores, in C
        return _run_threads(searches, timeout, deadline, t0)
    sinks: list[dict[str, Any]] = [{} for _ in parts]
    gens = [
        _compiled_search(p, s) if compiled or isinstance(p, _CPart) else _search(p, verbose, sink)
        for p, s, sink in zip(parts, searches, sinks, strict=True)
    ]
    outcomes: list[_Outcome | None] = [None] * len(parts)
    used = [0] * len(parts)  # cache entries (= pushes) of each partition's search
    active: list[int] = []
    for j, g in enumerate(gens):
        try:
            next(g)
        except StopIteration as stop:
            outcomes[j] = stop.value
        else:
            active.append(j)
    stop_reason = ""
    illegal = False
    slice_ = FIRST_SLICE
    while active and not stop_reason:
        still: list[int] = []
        for n, j in enumerate(active):
            budget = slice_
            if max_cache is not None:
                budget = min(budget, max_cache - sum(used))
                if budget <= 0:
                    stop_reason = f"cache cap of {max_cache} entries reached"
                    still.extend(active[n:])
                    break
            try:
                gens[j].send(budget)
            except StopIteration as stop:
                outcomes[j] = out = stop.value
                used[j] = out[3]
                if out[0] is _ILLEGAL:
                    illegal = True
                    stop_reason = f"partition {j} is not linearizable"
                    still.extend(active[n + 1 :])
                    break
            else:
                used[j] += budget
                still.append(j)
            if deadline is not None and time.monotonic() > deadline:
                stop_reason = f"timeout of {timeout} s reached"
                still.extend(active[n + 1 :])
                break
        active = still
        slice_ = min(2 * slice_, SLICE)
    for j in active:
        gens[j].close()

    if illegal:
        result = _ILLEGAL
    elif active:
        result = _UNKNOWN
    else:
        result = _OK
    infos: list[PartitionInfo] = []
    if verbose:
        for j, part in enumerate(parts):
            assert isinstance(part, _Part)  # cparts are for the plain check only
            out = outcomes[j]
            if out is None:
                infos.append(
                    PartitionInfo(
                        history=part.history,
                        result=_UNKNOWN,
                        partial_linearizations=_distinct(_unpath(sinks[j].get("best", {}))),
                        note=f"search stopped unfinished: {stop_reason}",
                    )
                )
            else:
                infos.append(
                    PartitionInfo(
                        history=part.history,
                        result=out[0],
                        partial_linearizations=(
                            (out[1],) if out[1] is not None else _distinct(out[2])
                        ),
                    )
                )
    info = LinearizationInfo(
        partitions=tuple(infos),
        note=stop_reason if result is not _OK else "",
        elapsed_s=time.monotonic() - t0,
        cache_entries=sum(used),
    )
    return result, info


def _run_threads(
    searches: list[Any],
    timeout: float | None,
    deadline: float | None,
    t0: float,
) -> tuple[CheckResult, LinearizationInfo]:
    """The plain check when every partition's search is pure C (`_csearch.run_all`):
    the searches share out the cores, each taking turns of equal time, until all end
    or one is illegal. Without a cache cap the verdict does not depend on the turns."""
    todo = [s for s in searches if s is not None]
    left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
    outs, stop, at = _csearch.run_all(todo, left, _THREADS)
    index = [j for j, s in enumerate(searches) if s is not None]
    entries = sum(s.entries for s in todo)
    if stop == 1:
        result, note = _ILLEGAL, f"partition {index[at]} is not linearizable"
    elif any(o is None for o in outs):
        result, note = _UNKNOWN, f"timeout of {timeout} s reached"
    else:
        result, note = _OK, ""
    info = LinearizationInfo(
        partitions=(), note=note, elapsed_s=time.monotonic() - t0, cache_entries=entries
    )
    return result, info


def events_to_operations(events: Sequence[Event]) -> list[Operation]:
    """Turn an event list (index = time) into operations, in the order of their calls.

    A call with no return becomes a crashed operation (``return_time = inf``).
    """
    open_calls: dict[int, tuple[int, Any, int]] = {}
    done: list[tuple[int, Operation]] = []
    append = done.append
    make = make_operation
    for t, ev in enumerate(events):
        kind = ev.kind
        if kind == "call":
            if ev.id in open_calls:
                raise ValueError(f"event {t}: id {ev.id} is already open")
            open_calls[ev.id] = (ev.client_id, ev.value, t)
        elif kind == "return":
            opened = open_calls.pop(ev.id, None)
            if opened is None:
                raise ValueError(f"event {t}: return for id {ev.id} without a call")
            client, value, call_t = opened
            append((call_t, make(client, value, call_t, ev.value, t)))
        else:
            raise ValueError(f"event {t}: kind must be 'call' or 'return', not {ev.kind!r}")
    for client, value, call_t in open_calls.values():
        append((call_t, make(client, value, call_t, UNKNOWN, math.inf)))
    done.sort(key=_first)
    return [op for _, op in done]


def _first(x: tuple[int, Operation]) -> int:
    return x[0]


def _split_operations(
    model: Model[Any, Any, Any], history: Sequence[Operation]
) -> list[list[Operation]]:
    if model.partition is None:
        return [list(history)]
    return [list(p) for p in model.partition(list(history))]


def _split_events(model: Model[Any, Any, Any], events: Sequence[Event]) -> list[list[Operation]]:
    if model.partition_events is not None:
        return [events_to_operations(p) for p in model.partition_events(list(events))]
    return _split_operations(model, events_to_operations(events))


def check_operations(
    model: Model[Any, Any, Any],
    history: Sequence[Operation],
    *,
    timeout: float | None = None,
    max_cache: int | None = None,
) -> CheckResult:
    """Is this history of operations linearizable with respect to `model`?

    ``timeout`` (seconds) and ``max_cache`` (memoized configurations over all
    partitions) bound the search; hitting either gives UNKNOWN, unless a partition was
    already found illegal.
    """
    return _run(model, _split_operations(model, history), timeout, max_cache, False)[0]


def check_operations_verbose(
    model: Model[Any, Any, Any],
    history: Sequence[Operation],
    *,
    timeout: float | None = None,
    max_cache: int | None = None,
) -> tuple[CheckResult, LinearizationInfo]:
    """Like `check_operations`, also returning the (partial) linearizations found.

    As soon as one partition is illegal the others are stopped (they are reported as
    UNKNOWN in the info), so verbose mode is bounded like the plain check.
    """
    return _run(model, _split_operations(model, history), timeout, max_cache, True)


def check_events(
    model: Model[Any, Any, Any],
    events: Sequence[Event],
    *,
    timeout: float | None = None,
    max_cache: int | None = None,
) -> CheckResult:
    """Like `check_operations`, for a real-time ordered list of call/return events."""
    if COMPILED and max_cache is None and _shipped_kv(model):
        t0 = time.monotonic()
        # the partitions straight into the searches, in C (None: out of the ordinary)
        searches = _csearch.kv_searches(events, model.init(), UNKNOWN)
        if searches is not None:
            deadline = None if timeout is None else t0 + timeout
            return _run_threads(searches, timeout, deadline, t0)[0]
    cparts = _event_parts(model, events) if COMPILED else None
    if cparts is not None:
        return _run(model, [], timeout, max_cache, False, cparts)[0]
    return _run(model, _split_events(model, events), timeout, max_cache, False)[0]


def _shipped_kv(model: Model[Any, Any, Any]) -> bool:
    """Is `model` the shipped partitioned kv model, as `_csearch.kv_searches` takes it?"""
    return (model.step is _kv_value_step and model.partition_events is _kv_partition_events
            and model.read_only is _kv_read_only and model.read_value is _kv_read_value
            and model.key is None and model.equal is None)


def _event_parts(model: Model[Any, Any, Any], events: Sequence[Event]) -> list[_CPart] | None:
    """The partitions of the events, prepared for the compiled search; None where the
    general path must run (a model partitioning operations, malformed events)."""
    if model.partition_events is not None:
        groups: Sequence[Sequence[Event]] = model.partition_events(list(events))
    elif model.partition is None:
        groups = [events]
    else:
        return None
    cparts = []
    for g in groups:
        p = _prepare_events(model, g)
        if p is None:
            return None
        cparts.append(p)
    return cparts


def check_events_verbose(
    model: Model[Any, Any, Any],
    events: Sequence[Event],
    *,
    timeout: float | None = None,
    max_cache: int | None = None,
) -> tuple[CheckResult, LinearizationInfo]:
    """Like `check_operations_verbose`, for a list of call/return events."""
    return _run(model, _split_events(model, events), timeout, max_cache, True)
