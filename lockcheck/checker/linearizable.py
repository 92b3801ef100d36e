"""Linearizability of the lock operations: lockcheck history -> porcupine engine.

The adapter pairs each lock invoke with its completion per process (`pair_ops`) and
turns it into an `Operation` with a `LockInput`:

* `fail` completions are dropped (the op certainly took no effect);
* `info` completions and invokes with no completion become crashed ops
  (``return_time = inf``): they may take effect at any point after the call, or never;
* a crashed `renew` is dropped too: a renew never changes who holds a lock, so one
  whose outcome is unknown says nothing;
* writes, events and nemesis ops are not lock operations and are ignored.

Whose lease a renew or release is about (``LockInput.client``): where it carries a
``lease`` token (lockcheck's histories name the lease of every grant), the process
whose ok acquire returned that token, which is not necessarily the op's own process (a
worker that retired after an `info` releases under its new id); otherwise the op's own
process (Jepsen, Knossos and older lockcheck histories: the last lease its process was
granted). Its ``fence`` is the fence it names, or the fence of the grant its token
names.

`check_linearizable` uses the `fenced-mutex` model by default (``opts.extra["model"]``
may say ``"mutex"``). Each key first goes through the lock-structure decision
procedure (`lockcheck.checker.fastpath`, with or without fences); keys it cannot
decide go to the search, all together, with ``opts.timeout_s`` (and
``opts.extra["max_cache"]``, a cap on memoized configurations). It never answers valid
for a key it did not finish: a timeout or the cache cap gives "unknown".
"""

from __future__ import annotations

import io
import math
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.fastpath import ACQUIRE, RELEASE, RENEW, decide, fast_check
from lockcheck.checker.fastproof import proves_ok
from lockcheck.checker.lockscan import (
    CRASHED,
    HAS_FENCE,
    HAS_NAMED,
    LockColumns,
    _fence_of,
    _lease_of,
    read_lock_columns,
)
from lockcheck.checker.porcupine import (
    UNKNOWN,
    CheckResult,
    LinearizationInfo,
    Model,
    Operation,
    check_operations_verbose,
    visualize,
)
from lockcheck.checker.porcupine.lock_models import LOCK_MODELS, LockF, LockInput, LockOutput
from lockcheck.history import Op, read_history, read_history_lines

LOCK_FS = ("acquire", "release", "renew")
_LOCK_FS = frozenset(LOCK_FS)
DEFAULT_MODEL = "fenced-mutex"
MAX_CACHE = 2_000_000  # memoized configurations over all searched keys, at most
CACHE_BUDGET_BYTES = 1_000_000_000
EXPLAIN_LIMIT = 12


def auto_cache_cap(largest_partition: int, budget_bytes: int = CACHE_BUDGET_BYTES) -> int:
    """A cap on the search's memo cache that keeps it within about `budget_bytes`.

    A cache entry holds the set of linearized ops as an int bitset, so it costs about
    100 bytes plus one bit per op of its partition.
    """
    per_entry = 100 + largest_partition // 8
    return max(1000, min(MAX_CACHE, budget_bytes // per_entry))




def lock_operations(ops: Iterable[Op]) -> list[Operation]:
    """The lock ops of a lockcheck history as engine operations (see module doc), in the
    order of their completions (ops that never completed last). One pass: a grant's
    completion always precedes the renews and releases that name its lease."""
    out: list[Operation] = []
    append = out.append
    ids: dict[Any, int] = {}  # non-integer processes -> row numbers for the timeline
    open_: dict[tuple[Any, str], Op] = {}
    # (key, lease token) -> (owner process, fence) of the ok acquire that returned it
    grants: dict[tuple[Any, Hashable], tuple[Any, int | None]] = {}
    outputs: dict[int | None, LockOutput] = {}
    lock_fs = _LOCK_FS
    inf = math.inf
    unknown = UNKNOWN

    def emit(inv: Op, comp: Op | None) -> None:
        f = inv.f
        proc = inv.process
        owner: Any = proc
        named = None
        if f != "acquire":
            if comp is None and f == "renew":
                return  # a crashed renew changes nothing
            v = inv.value
            named = _fence_of(v)
            token = _lease_of(v)
            if comp is not None:
                if named is None:
                    named = _fence_of(comp.value)
                if token is None:
                    token = _lease_of(comp.value)
            if token is not None:
                # a lease nobody was granted has an owner that never held the lock
                owner, granted = grants.get((inv.key, token), (f"lease {token}", None))
                if named is None:
                    named = granted
        output: Any
        if comp is not None:
            if f == "acquire":
                fence = _fence_of(comp.value)
                output = outputs.get(fence)
                if output is None:
                    output = outputs[fence] = LockOutput(fence)
                token = _lease_of(comp.value)
                if token is not None:
                    grants[(inv.key, token)] = (proc, fence)
            else:
                output = outputs.get(None) or outputs.setdefault(None, LockOutput(None))
            ret: float = comp.time
        else:
            output, ret = unknown, inf
        client = proc if type(proc) is int else ids.setdefault(proc, 1_000_000 + len(ids))
        append(Operation(client, LockInput(cast(LockF, f), owner, inv.key, named), inv.time,
                         output, ret))

    for op in ops:
        f = op.f
        if f not in lock_fs or op.key is None or op.process == "nemesis":
            continue
        typ = op.type
        if typ == "invoke":
            open_[(op.process, f)] = op
        elif typ != "event":
            inv = open_.pop((op.process, f), None)
            if inv is not None and typ != "fail":
                emit(inv, op if typ == "ok" else None)
    for inv in open_.values():  # never completed: the run was cut short
        emit(inv, None)
    return out


def by_key(operations: Iterable[Operation]) -> dict[Hashable, list[Operation]]:
    keys: dict[Hashable, list[Operation]] = defaultdict(list)
    for op in operations:
        keys[op.input.key].append(op)
    return dict(keys)


def _safe_name(key: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(key))[:80] or "key"


def check_lock_operations(
    operations: list[Operation],
    *,
    model_name: str = DEFAULT_MODEL,
    timeout_s: float | None = None,
    max_cache: int | None = None,
    html_dir: Path | None = None,
    use_fast_path: bool = True,
) -> dict[str, Any]:
    """Check engine operations with `LockInput`s against a lock model (by name).

    ``max_cache`` caps the search's memo cache (None: `auto_cache_cap`); reaching it,
    like the timeout, gives "unknown".
    """
    t0 = time.monotonic()
    model = LOCK_MODELS[model_name]
    parts = by_key(operations)
    per_key: dict[str, dict[str, Any]] = {}
    illegal: list[dict[str, Any]] = []
    searched: list[Operation] = []
    witnesses: dict[str, tuple[Operation, ...]] = {}
    fast_keys = 0
    for key in sorted(parts, key=str):
        hist = parts[key]
        entry: dict[str, Any] = {"ops": len(hist),
                                 "crashed": sum(1 for o in hist if o.return_time == math.inf)}
        per_key[str(key)] = entry
        if use_fast_path:
            v = fast_check(hist, model_name)
            if v.result is not None:
                fast_keys += 1
                entry.update(result=str(v.result), path="fast")
                if v.result is CheckResult.ILLEGAL:
                    entry["explanation"] = v.reason
                    illegal.append({"key": str(key), "path": "fast", "explanation": v.reason})
                    witnesses[str(key)] = v.window
                continue
            entry["fast_path_skipped"] = v.reason
        entry.update(result="unknown", path="search")
        searched.extend(hist)

    search_note = ""
    info: LinearizationInfo | None = None
    if searched and not illegal:
        budget = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - t0))
        if max_cache is None:
            max_cache = auto_cache_cap(max(len(parts[k]) for k in {o.input.key for o in searched}))
        _, info = check_operations_verbose(model, searched, timeout=budget, max_cache=max_cache)
        search_note = info.note
        for part in info.partitions:
            if not part.history:
                continue
            key = str(part.history[0].input.key)
            entry = per_key[key]
            entry["result"] = str(part.result)
            if part.result is CheckResult.UNKNOWN:
                entry["note"] = part.note or search_note
            if part.result is CheckResult.ILLEGAL:
                sub = LinearizationInfo(partitions=(part,))
                text = sub.explain(model, limit=EXPLAIN_LIMIT)
                head, _, rest = text.partition(":")
                if head.startswith("partition "):
                    text = f"key {key!r}:{rest}"
                best = max(part.partial_linearizations, key=len, default=())
                entry["explanation"] = text
                entry["longest_partial_linearization"] = len(best)
                illegal.append({"key": key, "path": "search", "explanation": text})
    elif searched:
        search_note = "not searched: another key was already found not linearizable"
        for op in searched:
            per_key[str(op.input.key)]["note"] = search_note

    return _summary(per_key, illegal, fast_keys, len(operations), model_name, info,
                    search_note, lambda: (model, parts, witnesses, html_dir, timeout_s))


def _summary(
    per_key: dict[str, dict[str, Any]],
    illegal: list[dict[str, Any]],
    fast_keys: int,
    n_ops: int,
    model_name: str,
    info: LinearizationInfo | None,
    search_note: str,
    html: Callable[[], tuple[Any, dict[Hashable, list[Operation]],
                             dict[str, tuple[Operation, ...]], Path | None, float | None]],
) -> dict[str, Any]:
    """The checker's result from the per-key entries (``html()`` gives what the
    timelines of illegal keys need, where they are asked for)."""
    results = [e["result"] for e in per_key.values()]
    if illegal:
        valid: Any = False
    elif all(r == "ok" for r in results):
        valid = True
    else:
        valid = "unknown"
    out: dict[str, Any] = {
        "valid": valid,
        "model": model_name,
        "keys": per_key,
        "ops": n_ops,
        "fast_path_keys": fast_keys,
        "searched_keys": len(per_key) - fast_keys,
        "path": _path_summary(fast_keys, len(per_key)),
    }
    if info is not None:
        out["search_cache_entries"] = info.cache_entries
    if search_note and valid is not True:
        out["note"] = search_note
    if not n_ops:  # nothing was checked: that is not a pass
        out.update(valid="unknown", note="no lock operations in the history",
                   nothing_checked="no lock operations in the history")
    if illegal:
        first = illegal[0]
        out["illegal"] = illegal
        out["key"] = first["key"]
        out["explanation"] = first["explanation"]
        out["summary"] = (
            f"key {first['key']!r} not linearizable as {model_name} ({first['path']} path)"
        )
        model, parts, witnesses, html_dir, timeout_s = html()
        if html_dir is not None:
            out["html"] = _write_html(model, parts, illegal, info, witnesses, html_dir, timeout_s)
    elif valid == "unknown":
        out["summary"] = f"not fully checked: {search_note or 'search did not finish'}"
    return out


def _path_summary(fast: int, total: int) -> str:
    if total == 0:
        return "none"
    if fast == total:
        return "fast"
    return "search" if fast == 0 else "mixed"


def _write_html(
    model: Model[Any, Any, Any],
    parts: dict[Hashable, list[Operation]],
    illegal: list[dict[str, Any]],
    info: LinearizationInfo | None,
    witnesses: dict[str, tuple[Operation, ...]],
    html_dir: Path,
    timeout_s: float | None,
) -> list[str]:
    """One HTML timeline per illegal key. For a key decided by the fast path, the
    search (verbose, short budget) runs on the grants of the witness only: a
    sub-history that is illegal for the same reason and small enough to draw."""
    written: list[str] = []
    html_dir.mkdir(parents=True, exist_ok=True)
    by_name = {str(k): v for k, v in parts.items()}
    for item in illegal:
        key = item["key"]
        part_info: LinearizationInfo | None = None
        if info is not None:
            for p in info.partitions:
                if p.history and str(p.history[0].input.key) == key:
                    part_info = LinearizationInfo(partitions=(p,))
        if part_info is None:
            budget = 10.0 if timeout_s is None else min(10.0, timeout_s)
            hist = by_name[key]
            if key in witnesses:
                hist = list(witnesses[key])
                item["html_window_ops"] = len(hist)
            res, part_info = check_operations_verbose(
                model, hist, timeout=budget, max_cache=auto_cache_cap(len(hist))
            )
            if res is not CheckResult.ILLEGAL:
                item["html_note"] = f"no timeline: the search gave {res} within {budget} s"
                continue
        path = html_dir / f"linearizable-{_safe_name(key)}.html"
        try:
            with path.open("w", encoding="utf-8") as fh:
                visualize(model, part_info, fh)
        except (NotImplementedError, OSError) as e:
            item["html_note"] = f"no timeline: {type(e).__name__}: {e}"
            continue
        written.append(str(path))
    return written


def check_linearizable(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    """The `linearizable` checker: lock ops per key against `fenced-mutex` (or `mutex`)."""
    model_name = str(opts.extra.get("model", DEFAULT_MODEL))
    if model_name not in LOCK_MODELS:
        return {"valid": "unknown", "error": f"unknown lock model {model_name!r}"}
    max_cache = opts.extra.get("max_cache")
    return check_lock_operations(
        lock_operations(ops),
        model_name=model_name,
        timeout_s=opts.timeout_s,
        max_cache=max_cache if isinstance(max_cache, int) else None,
        html_dir=opts.html_dir,
        use_fast_path=bool(opts.extra.get("fast_path", True)),
    )


def check_lock_columns(
    cols: LockColumns,
    *,
    model_name: str = DEFAULT_MODEL,
    timeout_s: float | None = None,
    max_cache: int | None = None,
    html_dir: Path | None = None,
) -> dict[str, Any]:
    """`check_lock_operations` on the columns of `lockscan.read_lock_columns`: the same
    result. Every key goes through the decision procedure straight from the columns;
    where one needs the search, or an illegal key needs its timeline drawn, the
    operations are built and `check_lock_operations` does it all."""
    model = LOCK_MODELS[model_name]
    fenced = model_name == "fenced-mutex"
    op_at = cols.operation_at()
    codes = {5: ACQUIRE, 6: RELEASE, 7: RENEW}  # the scanner's ids (lockscan)
    f_codes = np.zeros(8, dtype=np.int64)
    for scanned, code in codes.items():
        f_codes[scanned] = code
    per_key: dict[str, dict[str, Any]] = {}
    illegal: list[dict[str, Any]] = []
    keys = cols.keys()
    for key in sorted(keys, key=str):
        idx = keys[key]
        flags = cols.flags[idx]
        crashed = (flags & CRASHED) != 0
        entry: dict[str, Any] = {"ops": len(idx), "crashed": int(crashed.sum())}
        per_key[key] = entry
        if proves_ok(f_codes[cols.f[idx]], cols.owner[idx], cols.call[idx], cols.ret[idx],
                     crashed, cols.fence[idx], (flags & HAS_FENCE) != 0, cols.named[idx],
                     (flags & HAS_NAMED) != 0, fenced):
            entry.update(result=str(CheckResult.OK), path="fast")
            continue  # the common case, proved on whole columns; `decide` for the rest
        # None / inf where a column has no value, as the operations would say
        ret_o = cols.ret[idx].astype(object)
        ret_o[crashed] = math.inf
        fence_o = cols.fence[idx].astype(object)
        fence_o[(flags & HAS_FENCE) == 0] = None
        named_o = cols.named[idx].astype(object)
        named_o[(flags & HAS_NAMED) == 0] = None
        ret, fence, named = ret_o.tolist(), fence_o.tolist(), named_o.tolist()
        rows = idx.tolist()
        v = decide([codes[x] for x in cols.f[idx].tolist()], cols.owner[idx].tolist(),
                   cols.call[idx].tolist(), ret, fence, named, fenced,
                   lambda j, rows=rows: op_at(rows[j]))  # type: ignore[misc]
        if v.result is None or (v.result is CheckResult.ILLEGAL and html_dir is not None):
            operations = cols.operations(np.arange(len(cols)))
            return check_lock_operations(operations, model_name=model_name,
                                         timeout_s=timeout_s, max_cache=max_cache,
                                         html_dir=html_dir)
        entry.update(result=str(v.result), path="fast")
        if v.result is CheckResult.ILLEGAL:
            entry["explanation"] = v.reason
            illegal.append({"key": key, "path": "fast", "explanation": v.reason})
    return _summary(per_key, illegal, len(per_key), len(cols), model_name, None, "",
                    lambda: (model, {}, {}, None, timeout_s))


def check_linearizable_file(
    source: str | os.PathLike[str] | IO[bytes], opts: CheckOptions, *,
    allow_truncated: bool = False,
) -> dict[str, Any]:
    """Read a history (a path or an open binary stream) and run the `linearizable`
    checker on it: straight from lock columns where the compiled reader is there (the
    same result, in a fraction of the time and memory), else `read_history` and
    `check_linearizable`."""
    model_name = str(opts.extra.get("model", DEFAULT_MODEL))
    fast = bool(opts.extra.get("fast_path", True))
    cols = read_lock_columns(source, allow_truncated=allow_truncated) if (
        fast and model_name in LOCK_MODELS) else None
    if cols is not None:
        return check_linearizable_columns(cols, opts)
    if isinstance(source, (str, os.PathLike)):
        ops = read_history(source, allow_truncated=allow_truncated)
    else:
        text = io.TextIOWrapper(source, encoding="utf-8", newline="")
        ops = read_history_lines(text, str(getattr(source, "name", "<stream>")),
                                 allow_truncated=allow_truncated).ops
    return check_linearizable(ops, opts)


def check_linearizable_columns(cols: LockColumns, opts: CheckOptions) -> dict[str, Any]:
    """`check_linearizable` on a history read into lock columns."""
    model_name = str(opts.extra.get("model", DEFAULT_MODEL))
    if model_name not in LOCK_MODELS:
        return {"valid": "unknown", "error": f"unknown lock model {model_name!r}"}
    max_cache = opts.extra.get("max_cache")
    if not opts.extra.get("fast_path", True):
        return check_lock_operations(cols.operations(np.arange(len(cols))),
                                     model_name=model_name, timeout_s=opts.timeout_s,
                                     max_cache=max_cache if isinstance(max_cache, int) else None,
                                     html_dir=opts.html_dir, use_fast_path=False)
    return check_lock_columns(cols, model_name=model_name, timeout_s=opts.timeout_s,
                              max_cache=max_cache if isinstance(max_cache, int) else None,
                              html_dir=opts.html_dir)

