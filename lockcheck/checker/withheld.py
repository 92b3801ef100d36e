"""Withheld replies (`--nemesis reply-loss`) and the anomalies that followed them.

A withheld reply is the one op whose request was applied while its reply was dropped
(a `start-reply-loss` record, lifted by the next `stop-reply-loss`). Its effect may land
any time from its send until it completed: a client that retries lands it last, when the
reply path is back. So its window runs from the aimed worker's `stop-before-<op>` event
to the later of the rule's lift and the op's completion (the end of the history when
neither came). A violation, a hidden grant, any reported example whose times touch that
window is named after it: "after c2's release reply was withheld at 3.2 s".

Pure functions of the history and a checker's result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockcheck.history import Op

START_F, STOP_F = "start-reply-loss", "stop-reply-loss"
NOTE = "after_withheld_reply"  # the key each matched example gains
Interval = tuple[int, int]


@dataclass(frozen=True, slots=True)
class WithheldReply:
    host: str  # the client host whose replies were dropped
    worker: int | None
    process: Any
    key: str | None
    op: str  # acquire, renew or release
    fence: Any
    sent: int  # the aimed worker stopped just before sending (ns); the window's start
    start: int  # the rule was in place and the worker resumed
    lifted: int | None  # the rule was lifted; None: never in the history
    done: int | None  # the withheld op completed (its outcome, once retries ended)
    end: int  # the window's end

    def note(self) -> str:
        what = f"{self.host}'s {self.op} reply was withheld at {self.start / 1e9:.1f} s"
        ids = [f"key {self.key}"] if self.key is not None else []
        if self.fence is not None:
            ids.append(f"fence {self.fence}")
        return f"after {what}" + (f" ({', '.join(ids)})" if ids else "")

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "worker": self.worker, "process": self.process,
                "key": self.key, "op": self.op, "fence": self.fence, "sent": self.sent,
                "start": self.start, "lifted": self.lifted, "done": self.done,
                "end": self.end, "note": self.note()}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _completion(ops: Sequence[Op], process: Any, f: str, after: int) -> int | None:
    """When `process`'s `f` in flight at time `after` completed (its invoke came first)."""
    invoked = False
    for o in ops:
        if o.process != process or o.f != f:
            continue
        if o.type == "invoke":
            if o.time > after:  # a process's ops are sequential: none was in flight
                return None
            invoked = True
        elif o.type in ("ok", "fail", "info"):
            if invoked and o.time >= after:
                return o.time
            invoked = False
    return None


def withheld_replies(ops: Sequence[Op]) -> list[WithheldReply]:
    """Every withheld reply of the history, in order (skipped starts are not)."""
    nemesis = [o for o in ops if o.process == "nemesis" and o.type == "info"
               and o.f in (START_F, STOP_F)]
    if not nemesis:
        return []
    last = max((o.time for o in ops), default=0)
    out: list[WithheldReply] = []
    open_: Op | None = None

    def close(start: Op, lifted: int | None) -> None:
        v = start.value
        sent = _int(v.get("stopped_ns")) or start.time
        done = _completion(ops, v.get("process"), str(v.get("op")), sent)
        ends = [t for t in (lifted, done) if t is not None]
        out.append(WithheldReply(
            host=str((v.get("targets") or ["?"])[0]), worker=_int(v.get("worker")),
            process=v.get("process"), key=v.get("key"), op=str(v.get("op")),
            fence=v.get("fence"), sent=sent, start=start.time, lifted=lifted, done=done,
            end=max(ends) if lifted is not None else last))

    for o in nemesis:
        v = o.value if isinstance(o.value, dict) else {}
        if o.f == START_F:
            if open_ is not None:
                close(open_, o.time)
            open_ = o if "skipped" not in v and v.get("targets") else None
        elif open_ is not None:
            close(open_, o.time)
            open_ = None
    if open_ is not None:
        close(open_, None)
    return out


def intervals(item: Mapping[str, Any]) -> list[Interval]:
    """The times a reported example spans, from the shapes checkers report them in:
    `sections` ([[start, end], ...]), `window` ([start, end]), `start`/`end`, and nested
    ops with `invoke_ns` (to `ok_ns` or `valid_until_ns`)."""
    out: list[Interval] = []
    secs = item.get("sections")
    if isinstance(secs, list):
        for s in secs:
            if isinstance(s, (list, tuple)) and len(s) == 2:
                a, b = _int(s[0]), _int(s[1])
                if a is not None and b is not None:
                    out.append((a, b))
    w = item.get("window")
    if isinstance(w, (list, tuple)) and len(w) == 2:
        a, b = _int(w[0]), _int(w[1])
        if a is not None and b is not None:
            out.append((a, b))
    a, b = _int(item.get("start")), _int(item.get("end"))
    if a is not None and b is not None:
        out.append((a, b))
    for v in item.values():
        if isinstance(v, Mapping) and _int(v.get("invoke_ns")) is not None:
            t0 = int(v["invoke_ns"])
            t1 = max([t0, *(x for x in (_int(v.get("ok_ns")), _int(v.get("valid_until_ns")))
                            if x is not None)])
            out.append((t0, t1))
    return out


def cause(spans: Iterable[Interval], replies: Sequence[WithheldReply]) -> WithheldReply | None:
    """The latest withheld reply whose window touches one of `spans`, or None."""
    spans = list(spans)
    hit = [r for r in replies if any(a <= r.end and b >= r.sent for a, b in spans)]
    return max(hit, key=lambda r: r.sent) if hit else None


def annotate(result: dict[str, Any], ops: Sequence[Op]) -> dict[str, Any]:
    """A failed checker's result with each reported example that touches a withheld
    reply's window named after it (`after_withheld_reply`), the replies named in
    `withheld_replies`, and the first one added to its `summary`. Anything else is
    returned as it came."""
    if result.get("valid") is not False:
        return result
    replies = withheld_replies(ops)
    if not replies:
        return result
    used: dict[int, WithheldReply] = {}
    for value in list(result.values()):
        if not isinstance(value, list):
            continue
        for item in value:
            if not isinstance(item, dict):
                continue
            r = cause(intervals(item), replies)
            if r is not None:
                item[NOTE] = r.note()
                used.setdefault(id(r), r)
    if not used:
        return result
    linked = sorted(used.values(), key=lambda r: r.sent)
    result["withheld_replies"] = [r.to_json() for r in linked]
    if isinstance(result.get("summary"), str):
        result["summary"] += f" ({linked[0].note()})"
    return result


def annotate_safe(result: dict[str, Any], ops: Sequence[Op]) -> dict[str, Any]:
    """`annotate`, which never costs a result its verdict: on a bug of its own the
    result is kept as it was, with the error beside it."""
    try:
        return annotate(dict(result), ops)
    except Exception as e:
        return {**result, "withheld_error": f"{type(e).__name__}: {e}"}
