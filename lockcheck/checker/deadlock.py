"""The deadlock checker (liveness): waits that form a cycle, how long each lasted, what
broke it, and the operations that never completed.

It reads the `transfer` workload's records (docs/history-format.md): `begin`/`end`
events bound an operation (`value.op`, its `keys`, the end's `outcome`); `wait`/
`waited` events bound a blocking acquire of `key`; an `ok` acquire starts a hold, the
`invoke` of its release ends it. Workers are told apart by `worker` (a worker's
process id changes after an `info`; what it holds does not).

At every moment the history gives a wait-for graph: a worker waiting for a key points
at the worker holding it. A set of workers waiting for each other in a cycle
(`waits_for.deadlocked`) is a deadlock; it lasts until an edge of it goes, which names
what broke it, as far as the history shows:

- `expiry`: a waiter was granted a lock its holder never released (the holder's TTL or
  session ran out while it waited);
- `wait-limit`: a waiter gave up at its wait limit;
- `release`: a holder released (it gave up for another reason);
- `run-end`: the run stopped the waiters (no wait limit);
- None: still deadlocked where the history ends.

A deadlock is a liveness failure, not a safety one: the lock's own checkers still judge
mutual exclusion on the same history; `verdict.transfer_verdict` says which failed.
Pure and O(n * w) for w workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.checker.waits_for import deadlocked
from lockcheck.history import Op, Process, sort_by_time

MAX_LISTED = 50  # cycles and operations listed in a result (the counts are complete)
Who = int | Process


@dataclass
class Cycle:
    workers: frozenset[Who]
    start: int
    keys: list[str]
    end: int = 0
    broken_by: str | None = None


@dataclass
class Sweep:
    holder: dict[str, Who] = field(default_factory=dict)  # key -> who holds it now
    waiting: dict[Who, str] = field(default_factory=dict)  # who -> key it waits for
    open: dict[frozenset[Who], Cycle] = field(default_factory=dict)
    closed: list[Cycle] = field(default_factory=list)

    def edges(self) -> dict[Who, list[Who]]:
        out: dict[Who, list[Who]] = {}
        for who, key in self.waiting.items():
            h = self.holder.get(key)
            if h is not None and h != who:
                out[who] = [h]
        return out

    def update(self, op: Op, cause: str | None) -> None:
        """Compare the cycles now with those open before `op`: close the gone ones (broken
        by `cause`), open the new ones."""
        now = set(deadlocked(self.edges()))
        for ws in [c for c in self.open if c not in now]:
            cycle = self.open.pop(ws)
            cycle.end, cycle.broken_by = op.time, cause
            self.closed.append(cycle)
        for ws in now:
            if ws not in self.open:
                keys = sorted({self.waiting[w] for w in ws if w in self.waiting})
                self.open[ws] = Cycle(ws, op.time, keys)


def _who(op: Op) -> Who:
    return op.worker if op.worker is not None else op.process


def _value(op: Op, name: str) -> Any:
    return op.value.get(name) if isinstance(op.value, dict) else None


def _cause(op: Op, sweep: Sweep) -> str | None:
    """What `op` does to the wait-for graph, as a cause of a cycle's end."""
    if op.type == "ok" and op.f == "acquire":
        return "expiry"  # granted while its holder had not released it
    if op.type == "invoke" and op.f == "release":
        return "release"
    if op.type == "event" and op.f == "waited":
        outcome = _value(op, "outcome")
        return "run-end" if outcome == "stopped" else str(outcome)
    return None


def _union_ns(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(spans):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def check_deadlock(ops: list[Op], opts: CheckOptions | None = None) -> dict[str, Any]:
    sweep = Sweep()
    begun: dict[tuple[Who, Any], tuple[int, list[str]]] = {}
    ended: dict[tuple[Who, Any], str] = {}
    first = last = None
    last_time = 0
    for op in sort_by_time(ops):
        if op.process == "nemesis" or op.key is None:
            continue
        who = _who(op)
        changed = True
        if op.type == "ok" and op.f == "acquire":
            sweep.holder[op.key] = who
        elif op.type == "invoke" and op.f == "release":
            if sweep.holder.get(op.key) == who:
                del sweep.holder[op.key]
        elif op.type == "event" and op.f == "wait":
            sweep.waiting[who] = op.key
        elif op.type == "event" and op.f == "waited":
            sweep.waiting.pop(who, None)
        else:
            changed = False
        if op.type == "event" and op.f == "begin":
            keys = _value(op, "keys")
            begun[(who, _value(op, "op"))] = (op.time, list(keys) if keys else [op.key])
            first = op.time if first is None else first
        elif op.type == "event" and op.f == "end":
            ended[(who, _value(op, "op"))] = str(_value(op, "outcome"))
            last = op.time
        if changed:
            sweep.update(op, _cause(op, sweep))
        last_time = op.time
    if not begun:
        return {"valid": "unknown", "nothing_checked": "no multi-lock operations "
                "(begin/end events) in this history"}
    for cycle in sweep.open.values():  # never broken
        cycle.end, cycle.broken_by = last_time, None
        sweep.closed.append(cycle)
    cycles = sorted(sweep.closed, key=lambda c: c.start)
    outcomes: dict[str, int] = {}
    never: list[dict[str, Any]] = []
    for (who, n), (t, keys) in sorted(begun.items(), key=lambda kv: kv[1][0]):
        outcome = ended.get((who, n), "no end recorded")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome != "completed" and len(never) < MAX_LISTED:
            never.append({"worker": who, "op": n, "keys": keys, "outcome": outcome,
                          "start_s": round(t / 1e9, 3)})
    completed = outcomes.get("completed", 0)
    end = last if last is not None else last_time
    span_s = max((end - (first or 0)) / 1e9, 1e-9)
    lost_ns = sum(c.end - c.start for c in cycles)
    stuck_ns = sum((c.end - c.start) * len(c.workers) for c in cycles)
    union_ns = _union_ns([(c.start, c.end) for c in cycles])
    broken: dict[str, int] = {}
    for c in cycles:
        name = c.broken_by or "never"
        broken[name] = broken.get(name, 0) + 1
    never_broken = broken.get("never", 0)
    result: dict[str, Any] = {
        "valid": not cycles,
        "cycle_count": len(cycles),
        "cycles": [{"workers": sorted(c.workers, key=str), "keys": c.keys,
                    "start_s": round(c.start / 1e9, 3), "end_s": round(c.end / 1e9, 3),
                    "duration_s": round((c.end - c.start) / 1e9, 3),
                    "broken_by": c.broken_by} for c in cycles[:MAX_LISTED]],
        "broken_by": broken,
        "never_broken": never_broken,
        "deadlock_s": round(lost_ns / 1e9, 3),  # summed over cycles
        "deadlocked_s": round(union_ns / 1e9, 3),  # time with at least one cycle
        "stuck_worker_s": round(stuck_ns / 1e9, 3),  # worker-seconds lost
        "operations": len(begun),
        "completed": completed,
        "not_completed": len(begun) - completed,
        "outcomes": outcomes,
        "never_completed": never,
        "span_s": round(span_s, 3),
        "throughput_per_s": round(completed / span_s, 2),
    }
    result["summary"] = _summary(result)
    return result


def _summary(r: dict[str, Any]) -> str:
    ops = (f"{r['completed']} of {r['operations']} operations completed "
           f"({r['throughput_per_s']:g}/s)")
    if not r["cycle_count"]:
        return f"no deadlock: {ops}"
    how = ", ".join(f"{n} by {k}" for k, n in sorted(r["broken_by"].items()))
    text = (f"{r['cycle_count']} deadlock cycle(s), {r['deadlock_s']:g} s in deadlock "
            f"({r['stuck_worker_s']:g} worker-seconds), broken: {how}; {ops}")
    if r["never_broken"]:
        text += f"; {r['never_broken']} never broken (still deadlocked at the end)"
    return text
