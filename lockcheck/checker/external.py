"""`lockcheck check PATH --model M --format F`: check a history file with a chosen model.

Formats:

* ``lockcheck``: a run's ``history.jsonl`` (or a run directory holding one);
* ``jepsen-edn``: a Jepsen ``history.edn`` (`lockcheck.checker.formats.jepsen_edn`);
* ``porcupine-etcd``: Porcupine's Jepsen etcd logs (one CAS register);
* ``porcupine-kv``: Porcupine's kv logs (a key-value store, one partition per key).

Models: the lock models ``mutex`` and ``fenced-mutex`` (decided without search where
the lock structure allows, see `lockcheck.checker.fastpath`), the engine's
``cas-register``, ``register``, ``multi-register`` (Knossos's: ``:txn`` ops of reads
and writes over named registers) and ``kv``, and every lockcheck checker by name
(``lease-safety``, ``mutual-exclusion``, ``fencing``, ``linearizable`` ...: the
registry's CHECKERS), which read lockcheck ops, so any format that yields them works.

When not given, the format is inferred from the name (``.jsonl``, ``.edn``,
``etcd_*.log``) or the first line, and the model from the format (``lockcheck`` ->
``fenced-mutex``; ``jepsen-edn`` -> ``mutex`` when it has acquire/release ops,
``multi-register`` when it has txn ops, else ``cas-register``; ``porcupine-etcd`` ->
``cas-register``; ``porcupine-kv`` -> ``kv``).

Semantics, per model and format (Knossos's where its histories depend on it):

* registers start at ``initial`` (``--initial``, JSON or EDN; default nil); a `fail` op
  took no effect and is dropped; a crashed read is dropped; other crashed ops may take
  effect at any point after their call, or never;
* Jepsen EDN (``jepsen-edn``): an ok read of nil says nothing ("value unknown", as in
  Knossos's register models), so it matches any value; in lockcheck's own and
  Porcupine's formats a read of nil means the register holds nil;
* ``mutex`` is owner-aware (only the holder may release; Knossos's is not, so every
  history it finds invalid is invalid here too), ``fenced-mutex`` is a lease lock
  whose fences must grow in grant order (`lockcheck.checker.porcupine.lock_models`).

Nothing checked is never valid: a model that understands none of the history's ops,
or would leave a whole kind of them out (``--model register`` on a lock history,
``cas-register`` on ``txn`` ops), gives "unknown" with ``not_checked`` naming what it
would have dropped; so does an empty history.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from lockcheck.checker.api import DEFAULT_TIMEOUT_S, check_safe, options_for
from lockcheck.checker.formats.jepsen_edn import read_jepsen_edn
from lockcheck.checker.linearizable import (
    LOCK_FS,
    auto_cache_cap,
    check_linearizable_columns,
    check_lock_columns,
    check_lock_operations,
    lock_operations,
)
from lockcheck.checker.lockscan import LockColumns, read_lock_columns
from lockcheck.checker.porcupine import (
    UNKNOWN,
    CheckResult,
    Event,
    LinearizationInfo,
    Model,
    Operation,
    check_events_verbose,
    check_operations_verbose,
    visualize,
)
from lockcheck.checker.porcupine.models import cas_register, kv, multi_register, register
from lockcheck.errors import BadInput
from lockcheck.history import HistoryError, Op, pair_ops, read_history_full
from lockcheck.results.store import load_test, resolve_history

FORMATS = ("lockcheck", "jepsen-edn", "porcupine-etcd", "porcupine-kv")
LOCK_MODELS = ("mutex", "fenced-mutex")
REGISTER_MODELS = ("cas-register", "register", "multi-register")
ENGINE_MODELS = (*LOCK_MODELS, *REGISTER_MODELS, "kv")
# which kinds of op (`f`) each model checks
UNDERSTANDS: dict[str, frozenset[str]] = {
    "mutex": frozenset(LOCK_FS),
    "fenced-mutex": frozenset(LOCK_FS),
    "cas-register": frozenset({"read", "write", "cas"}),
    "register": frozenset({"read", "write"}),
    "multi-register": frozenset({"txn"}),
}
# kinds a model leaves to another checker on purpose: a lockcheck run's resource writes
IGNORED: dict[tuple[str, str], frozenset[str]] = {
    ("lockcheck", m): frozenset({"write"}) for m in LOCK_MODELS
}

_MODELS_FOR: dict[str, tuple[str, ...]] = {
    "lockcheck": LOCK_MODELS,
    "jepsen-edn": (*LOCK_MODELS, *REGISTER_MODELS),
    "porcupine-etcd": ("cas-register",),
    "porcupine-kv": ("kv",),
}
_KV_FIRST_LINE = re.compile(r"^\{:process \d+, :type :\w+, :f :(get|put|append), :key ")


def _checkers() -> dict[str, Any]:
    from lockcheck.checker.registry import CHECKERS  # the registry imports this module's peers

    return dict(CHECKERS)


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                if raw.strip():
                    return raw.strip()
    except OSError as e:
        raise HistoryError(path, 0, f"cannot read: {e.strerror or e}") from None
    return ""


def infer_format(path: Path) -> str:
    """The format of a history file, from its name or its first non-empty line."""
    name = path.name
    if name.endswith((".jsonl", ".jsonl.gz", ".jsonl.xz")):
        return "lockcheck"
    if name.endswith(".edn"):
        return "jepsen-edn"
    if re.fullmatch(r"etcd_\d+\.log", name):
        return "porcupine-etcd"
    line = _first_line(path)
    if not line:
        raise HistoryError(path, 0, "empty file: cannot tell its format")
    if line.startswith("INFO") and "jepsen.util" in line:
        return "porcupine-etcd"
    if _KV_FIRST_LINE.match(line):
        return "porcupine-kv"
    if line.startswith('{"') or line.startswith("{}"):
        return "lockcheck"
    if line.startswith(("{", "[", "#")):
        return "jepsen-edn"
    raise HistoryError(path, 1, "unknown history format (give --format)")


def _default_model(fmt: str, ops: list[Op] | None) -> str:
    if fmt == "lockcheck":
        return "fenced-mutex"
    if fmt == "jepsen-edn":
        fs = {op.f for op in ops or []}
        if fs & {"acquire", "release", "renew"}:
            return "mutex"
        if "txn" in fs:
            return "multi-register"
        return "cas-register"
    return "cas-register" if fmt == "porcupine-etcd" else "kv"


def _valid(result: CheckResult) -> Any:
    if result is CheckResult.OK:
        return True
    if result is CheckResult.ILLEGAL:
        return False
    return "unknown"


def _value_error(path: Path, e: ValueError) -> HistoryError:
    """A porcupine-log parser's ValueError ("name:line: msg") as a HistoryError."""
    m = re.match(r"^.*?:(\d+): (.*)$", str(e), re.DOTALL)
    if m:
        return HistoryError(path, int(m.group(1)), m.group(2))
    return HistoryError(path, 0, str(e))


def _read_ops(path: Path, fmt: str, allow_truncated: bool) -> tuple[list[Op], dict[str, Any]]:
    notes: dict[str, Any] = {}
    if fmt == "lockcheck":
        res = read_history_full(path, allow_truncated=allow_truncated)
        if res.truncated_line is not None:
            notes["truncated_line_ignored"] = res.truncated_line
        return res.ops, notes
    return read_jepsen_edn(path, allow_truncated=allow_truncated), notes


# ------------------------------------------------------------------ register ops


def _hashable(v: Any) -> Hashable:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), _hashable(x)) for k, x in v.items()))
    return v


def _where(op: Op) -> int:
    return int(op.extra.get("line", op.index))


def _read_output(comp: Op | None, nil_unknown: bool) -> Any:
    if comp is None:
        return UNKNOWN
    if comp.value is None and nil_unknown:
        return UNKNOWN  # Knossos: an ok read of nil says nothing about the value
    return _hashable(comp.value)


def _micro_ops(v: Any, op: Op) -> tuple[tuple[str, Any, Any], ...]:
    if not isinstance(v, list) or not all(
        isinstance(m, list) and len(m) == 3 and m[0] in ("read", "write") for m in v
    ):
        raise HistoryError("<history>", _where(op),
                           f"a txn value must be a list of [read|write name value]: {v!r}")
    return tuple((m[0], _hashable(m[1]), _hashable(m[2])) for m in v)


def _txn_output(inp: tuple[tuple[str, Any, Any], ...], comp: Op, nil_unknown: bool) -> Any:
    out = _micro_ops(comp.value, comp)
    if len(out) != len(inp) or any(a[:2] != b[:2] for a, b in zip(inp, out, strict=True)):
        raise HistoryError("<history>", _where(comp), "txn completion does not match its invoke")
    if nil_unknown:
        out = tuple((f, k, UNKNOWN if f == "read" and v is None else v) for f, k, v in out)
    return out


def engine_operations(ops: Sequence[Op], model: str, *, nil_unknown: bool) -> list[Operation]:
    """read/write/cas ops as keyed `(key, (f, value))` engine inputs, or txn ops as
    tuples of micro-ops for `multi-register`.

    `fail` ops are dropped (Jepsen/Knossos semantics: they took no effect); a crashed
    read (or read-only txn) is dropped too (it has no effect); other crashed ops stay
    open to the end. With ``nil_unknown`` (Jepsen histories), an ok read of nil matches
    any value, as in Knossos.
    """
    out: list[Operation] = []
    fs = UNDERSTANDS[model]
    for pair in pair_ops(ops):
        inv, comp = pair.invoke, pair.complete
        if inv.process == "nemesis" or inv.f not in fs:
            continue
        typ = pair.type
        if typ == "fail" or (typ == "info" and inv.f == "read"):
            continue
        crashed = typ != "ok" or comp is None
        inp: Any
        output: Any = None
        if inv.f == "txn":
            inp = _micro_ops(inv.value, inv)
            if crashed and all(f == "read" for f, _, _ in inp):
                continue
            if not crashed:
                assert comp is not None
                output = _txn_output(inp, comp, nil_unknown)
        elif inv.f == "read":
            inp, output = ("read", None), _read_output(comp, nil_unknown)
        elif inv.f == "write":
            inp = ("write", _hashable(inv.value))
        else:
            v = inv.value
            if not (isinstance(v, list) and len(v) == 2):
                raise HistoryError("<history>", _where(inv), f"cas value must be [old new]: {v!r}")
            inp, output = ("cas", (_hashable(v[0]), _hashable(v[1]))), True
        ret: float = float("inf") if crashed else comp.time  # type: ignore[union-attr]
        if crashed:
            output = UNKNOWN
        client = inv.process if isinstance(inv.process, int) else 0
        out.append(Operation(client, inp if inv.f == "txn" else (inv.key, inp), inv.time,
                             output, ret))
    return out


def op_kinds(ops: Sequence[Op]) -> Counter[str]:
    """How many lines of each `f` the history's clients wrote (not nemesis, not events)."""
    return Counter(op.f for op in ops if op.type != "event" and op.process != "nemesis")


def not_checked(model: str, kinds: Counter[str], fmt: str) -> str | None:
    """Why checking `model` on a history with these kinds of ops would check nothing, or
    leave a whole kind out; None when the model understands every kind."""
    understood = UNDERSTANDS[model]
    ignored = IGNORED.get((fmt, model), frozenset())
    n = sum(c for f, c in kinds.items() if f in understood)
    dropped = {f: c for f, c in sorted(kinds.items()) if f not in understood and f not in ignored}
    listed = ", ".join(f"{f} ({c})" for f, c in dropped.items())
    if n == 0:
        total = sum(kinds.values())
        if not total:
            return "the history has no client operations: nothing was checked"
        return (f"nothing was checked: none of the history's {total} ops are {model} "
                f"operations (it holds {listed})")
    if dropped:
        return (f"not checked: {model} does not understand the history's {listed} ops, so "
                f"they would be dropped; {model} understands {', '.join(sorted(understood))}")
    return None


def keyed(model: Model[Any, Any, Any]) -> Model[Any, Any, Any]:
    """`model` over inputs `(key, input)`, partitioned by key."""
    step = model.step
    describe = model.describe_operation

    def keyed_step(state: Any, inp: tuple[Any, Any], out: Any) -> tuple[bool, Any]:
        return step(state, inp[1], out)

    def partition(ops: Sequence[Operation]) -> list[list[Operation]]:
        parts: dict[Any, list[Operation]] = defaultdict(list)
        for op in ops:
            parts[op.input[0]].append(op)
        return list(parts.values())

    def describe_op(inp: tuple[Any, Any], out: Any) -> str:
        head = "" if inp[0] is None else f"[{inp[0]}] "
        return head + describe(inp[1], out)

    return Model(
        init=model.init,
        step=keyed_step,
        partition=partition,
        describe_operation=describe_op,
        describe_state=model.describe_state,
    )


# ------------------------------------------------------------------ entry point


def parse_initial(text: str) -> Any:
    """The value of ``--initial``: JSON (``0``, ``"v1"``, ``{"x": 0}``) or EDN
    (``{:x 0 :y 0}``, ``nil``). Raises BadInput."""
    import json

    from lockcheck.checker.formats.jepsen_edn import plain, read_edn_forms

    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        forms = read_edn_forms(text, "--initial")
    except HistoryError:
        forms = []
    if len(forms) != 1:
        raise BadInput(f"--initial {text!r}: not one JSON or EDN value")
    return plain(forms[0][1])


def _initial_for(model: str, initial: Any) -> Any:
    if initial is None:
        return None
    if model not in REGISTER_MODELS:
        raise BadInput(f"--initial applies to {', '.join(REGISTER_MODELS)}, not to {model}")
    if model == "multi-register":
        if not isinstance(initial, dict):
            raise BadInput("--initial for multi-register must be a map of registers, "
                           'e.g. {"x": 0, "y": 0}')
        return {str(k): _hashable(v) for k, v in initial.items()}
    return _hashable(initial)


def check_external(
    path: Path,
    *,
    model: str | None,
    fmt: str | None,
    timeout: float | None,
    html_dir: Path | None,
    allow_truncated: bool,
    initial: Any = None,
) -> dict[str, Any]:
    """Check one history file; see the module doc. Raises HistoryError on unreadable
    or malformed input and BadInput on a missing path, an unknown format or model.
    ``timeout`` None means DEFAULT_TIMEOUT_S per search. ``initial`` is
    the registers' initial value (register models only; None: nil).

    A check that would look at none of the history's ops, or leave a whole kind of op
    out, is "unknown" with ``not_checked`` saying what (never valid)."""
    t0 = time.monotonic()
    if timeout is None:
        timeout = DEFAULT_TIMEOUT_S
    path = resolve_history(Path(path))
    if fmt is None:
        fmt = infer_format(path)
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    checkers = _checkers()
    if model is not None and model not in ENGINE_MODELS and model not in checkers:
        known = ", ".join([*ENGINE_MODELS, *sorted(checkers)])
        raise BadInput(f"unknown model {model!r}; known: {known}")

    if fmt == "lockcheck" and (model == "linearizable" or model in LOCK_MODELS):
        # the lock check reads the file straight into lock columns (lockscan): a
        # million-op history in seconds, without an object per line
        cols = read_lock_columns(path, allow_truncated=allow_truncated)
        if cols is not None:
            return _check_columns(cols, path, model, timeout, html_dir, t0)

    ops: list[Op] | None = None
    notes: dict[str, Any] = {}
    if fmt in ("lockcheck", "jepsen-edn"):
        ops, notes = _read_ops(path, fmt, allow_truncated)
    model = model or _default_model(fmt, ops)
    allowed = _MODELS_FOR[fmt]
    if model not in allowed and not (model in checkers and ops is not None):
        raise BadInput(
            f"model {model!r} does not apply to format {fmt!r}; use one of: "
            + ", ".join(allowed + (tuple(sorted(checkers)) if ops is not None else ()))
        )

    start = _initial_for(model, initial)
    result: dict[str, Any] = {"path": str(path), "format": fmt, "model": model}
    result.update(notes)
    why_not = None
    if ops is not None and model in UNDERSTANDS:
        why_not = not_checked(model, op_kinds(ops), fmt)
    if why_not is not None:
        result.update(valid="unknown", ops=0, summary=why_not, not_checked=why_not,
                      details={"not_checked": why_not, "kinds": dict(op_kinds(ops or []))})
        result["elapsed_s"] = round(time.monotonic() - t0, 4)
        return result
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)
    if model in checkers and ops is not None:
        # a run's own test.json (beside the history) gives TTL, drift and workload
        test = load_test(path) if fmt == "lockcheck" else {}
        opts = options_for(test, timeout=timeout, html_dir=html_dir)
        details = check_safe(model, checkers[model], ops, opts)
        result["valid"] = details.get("valid", "unknown")
        result["ops"] = len(ops)
        result["details"] = details
    elif model in LOCK_MODELS:
        assert ops is not None
        details = check_lock_operations(
            lock_operations(ops),
            model_name=model,
            timeout_s=timeout,
            html_dir=html_dir,
        )
        result["valid"] = details["valid"]
        result["ops"] = len(ops)
        result["details"] = details
    else:
        result.update(_engine_check(path, fmt, model, ops, timeout, html_dir, stem, start))
    if "summary" in result.get("details", {}):
        result["summary"] = result["details"]["summary"]
    elif result.get("valid") is True:
        result["summary"] = f"no violation of {result.get('model', model)}"
    result["elapsed_s"] = round(time.monotonic() - t0, 4)
    return result


def _check_columns(cols: LockColumns, path: Path, model: str, timeout: float,
                   html_dir: Path | None, t0: float) -> dict[str, Any]:
    """`check_external`'s lock-model branches, for a history read into lock columns."""
    result: dict[str, Any] = {"path": str(path), "format": "lockcheck", "model": model}
    if cols.truncated_line is not None:
        result["truncated_line_ignored"] = cols.truncated_line
    kinds: Counter[str] = Counter(cols.kinds)
    why_not = not_checked(model, kinds, "lockcheck") if model in UNDERSTANDS else None
    if why_not is not None:
        result.update(valid="unknown", ops=0, summary=why_not, not_checked=why_not,
                      details={"not_checked": why_not, "kinds": dict(kinds)})
    else:
        if model == "linearizable":
            opts = options_for(load_test(path), timeout=timeout, html_dir=html_dir)
            details = check_safe(model, lambda _ops, o: check_linearizable_columns(cols, o),
                                 [], opts)
        else:
            details = check_lock_columns(cols, model_name=model, timeout_s=timeout,
                                         html_dir=html_dir)
        result["valid"] = details.get("valid", "unknown")
        result["ops"] = cols.n_ops
        result["details"] = details
        if "summary" in details:
            result["summary"] = details["summary"]
        elif result.get("valid") is True:
            result["summary"] = f"no violation of {model}"
    result["elapsed_s"] = round(time.monotonic() - t0, 4)
    return result


def _engine_check(
    path: Path,
    fmt: str,
    model_name: str,
    ops: list[Op] | None,
    timeout: float | None,
    html_dir: Path | None,
    stem: str,
    initial: Any = None,
) -> dict[str, Any]:
    from lockcheck.checker.formats import porcupine_logs

    info: LinearizationInfo
    model: Model[Any, Any, Any]
    count: int
    if fmt in ("porcupine-etcd", "porcupine-kv"):
        parse: Callable[[Path], list[Event]] = (
            porcupine_logs.parse_etcd_log
            if fmt == "porcupine-etcd"
            else porcupine_logs.parse_kv_log
        )
        try:
            events = parse(path)
        except ValueError as e:
            raise _value_error(path, e) from None
        except (OSError, UnicodeDecodeError) as e:
            raise HistoryError(path, 0, f"cannot read: {e}") from None
        count = sum(1 for ev in events if ev.kind == "call")
        if count == 0:
            why = "the history is empty: nothing was checked"
            return {"valid": "unknown", "ops": 0, "not_checked": why,
                    "details": {"not_checked": why, "summary": why}}
        model = cas_register(initial) if model_name == "cas-register" else kv()
        cap = auto_cache_cap(len(events) // 2)
        res, info = check_events_verbose(model, events, timeout=timeout, max_cache=cap)
    else:
        assert ops is not None
        try:
            operations = engine_operations(ops, model_name, nil_unknown=fmt == "jepsen-edn")
        except HistoryError as e:
            raise HistoryError(path, e.line, str(e).split(": ", 1)[-1]) from None
        if not operations:
            why = ("nothing was checked: every operation of the model failed or crashed "
                   "without effect")
            return {"valid": "unknown", "ops": 0, "not_checked": why,
                    "details": {"not_checked": why, "summary": why}}
        if model_name == "multi-register":
            model = multi_register(initial)
        else:
            model = keyed((cas_register if model_name == "cas-register" else register)(initial))
        cap = auto_cache_cap(len(operations))
        res, info = check_operations_verbose(model, operations, timeout=timeout, max_cache=cap)
        count = len(operations)
    out: dict[str, Any] = {"valid": _valid(res), "ops": count}
    details: dict[str, Any] = {
        "result": str(res),
        "partitions": len(info.partitions),
        "cache_entries": info.cache_entries,
    }
    if info.note:
        details["note"] = info.note
    if res is CheckResult.ILLEGAL:
        details["explanation"] = info.explain(model)
        details["summary"] = f"not linearizable as {model_name}"
        if html_dir is not None:
            html_dir.mkdir(parents=True, exist_ok=True)
            target = html_dir / f"{stem}-{model_name}.html"
            try:
                with target.open("w", encoding="utf-8") as fh:
                    visualize(model, info, fh)
                details["html"] = [str(target)]
            except NotImplementedError as e:
                details["html_note"] = f"no timeline: {e}"
    elif res is CheckResult.UNKNOWN:
        details["summary"] = f"not fully checked: {info.note}"
    else:
        details["summary"] = (f"linearizable as {model_name} ({count} ops in "
                              f"{len(info.partitions)} partition(s))")
    out["details"] = details
    return out
