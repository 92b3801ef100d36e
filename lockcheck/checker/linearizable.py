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

import math
import re
import time
from collections import defaultdict
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any, cast

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.fastpath import fast_check
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
from lockcheck.history import Op, pair_ops

LOCK_FS = ("acquire", "release", "renew")
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


def _field(op: Op | None, name: str) -> Any:
    if op is None:
        return None
    v = op.value
    return v.get(name) if type(v) is dict else None


def _fence_of(op: Op | None) -> int | None:
    fence = _field(op, "fence")
    return fence if type(fence) is int else None


def _lease_of(op: Op | None) -> Hashable:
    lease = _field(op, "lease")
    return lease if isinstance(lease, str | int) and not isinstance(lease, bool) else None


def lock_operations(ops: Iterable[Op]) -> list[Operation]:
    """The lock ops of a lockcheck history as engine operations (see module doc)."""
    out: list[Operation] = []
    ids: dict[Any, int] = {}  # non-integer processes -> row numbers for the timeline
    lock_ops = (
        op for op in ops if op.f in LOCK_FS and op.key is not None and op.process != "nemesis"
    )
    pairs = [p for p in pair_ops(lock_ops) if p.complete is None or p.complete.type != "fail"]
    # (key, lease token) -> (owner process, fence) of the ok acquire that returned it
    grants: dict[tuple[Any, Hashable], tuple[Any, int | None]] = {}
    for pair in pairs:
        comp = pair.complete
        if pair.invoke.f == "acquire" and comp is not None and comp.type == "ok":
            token = _lease_of(comp)
            if token is not None:
                grants[(pair.invoke.key, token)] = (pair.invoke.process, _fence_of(comp))
    inf = math.inf
    for pair in pairs:
        inv, comp = pair.invoke, pair.complete
        typ = "info" if comp is None else comp.type
        f = inv.f
        if typ == "info" and f == "renew":
            continue
        proc = inv.process
        owner: Any = proc
        named = None
        if f != "acquire":
            named = _fence_of(inv)
            if named is None:
                named = _fence_of(comp)
            token = _lease_of(inv)
            if token is None:
                token = _lease_of(comp)
            if token is not None:
                # a lease nobody was granted has an owner that never held the lock
                owner, granted = grants.get((inv.key, token), (f"lease {token}", None))
                if named is None:
                    named = granted
        inp = LockInput(cast(LockF, f), owner, inv.key, named)
        if typ == "ok":
            assert comp is not None
            output: Any = LockOutput(_fence_of(comp))
            ret: float = comp.time
        else:
            output, ret = UNKNOWN, inf
        client = proc if type(proc) is int else ids.setdefault(proc, 1_000_000 + len(ids))
        out.append(Operation(client, inp, inv.time, output, ret))
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
        entry: dict[str, Any] = {"ops": len(hist), "crashed": sum(o.crashed for o in hist)}
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
        "ops": len(operations),
        "fast_path_keys": fast_keys,
        "searched_keys": len(per_key) - fast_keys,
        "path": _path_summary(fast_keys, len(per_key)),
    }
    if info is not None:
        out["search_cache_entries"] = info.cache_entries
    if search_note and valid is not True:
        out["note"] = search_note
    if not operations:  # nothing was checked: that is not a pass
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
