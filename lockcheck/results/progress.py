"""What a user watching a run sees: a live progress line and the closing summary table."""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockcheck.intake import EventRow


class LiveStats:
    """Counts from the op stream as it arrives; cheap enough to run on every op.

    "violations so far" is an estimate for the progress line: overlapping critical
    sections among the recent ones of each key (compared by their recorded times, as
    each section closes), plus accepted stale writes. The checkers give the real
    answer at the end.
    """

    RECENT = 64  # closed sections remembered per key

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops = 0
        self.by_type: dict[str, int] = {}
        self.open: dict[tuple[str, Any], int] = {}  # (key, process) -> enter time
        # key -> (ends, (start, process)) of its recent closed sections, by end
        self.closed: dict[str, tuple[list[int], list[tuple[int, Any]]]] = {}
        self.overlaps = 0
        self.stale_accepted = 0
        self.saves = 0

    def observe(self, op: dict[str, Any]) -> None:
        t, f, key = op.get("type", "?"), op.get("f"), op.get("key")
        with self.lock:
            self.ops += 1
            self.by_type[t] = self.by_type.get(t, 0) + 1
            if key is None:
                return
            if t == "event":
                p = op.get("process")
                if f == "enter":
                    self.open[(key, p)] = int(op.get("time", 0))
                elif f == "exit":
                    start = self.open.pop((key, p), None)
                    if start is not None:
                        self._close(key, p, start, int(op.get("time", 0)))
            elif f == "write" and isinstance(op.get("value"), dict):
                v = op["value"]
                fence, mx = v.get("fence"), v.get("max_fence")
                if t == "ok" and fence is not None and mx is not None and fence <= mx:
                    self.stale_accepted += 1
                elif t == "fail":
                    self.saves += 1

    def events(self, rows: Sequence[EventRow]) -> None:
        """The critical-section events of a wake-up, as rows (what `observe` does with
        each, without a dict per event)."""
        with self.lock:
            self.ops += len(rows)
            self.by_type["event"] = self.by_type.get("event", 0) + len(rows)
            opened, close = self.open, self._close
            for _, t, p, f, key, _worker, _value in rows:
                if key is None:
                    continue
                if f == "enter":
                    opened[(key, p)] = t
                elif f == "exit":
                    start = opened.pop((key, p), None)
                    if start is not None:
                        close(key, p, start, t)

    def count(self, by_type: Mapping[str, int]) -> None:
        """Ops seen only by their type, a batch at a time: most of them (the intake
        reads whole only the events and writes that `observe` looks into)."""
        with self.lock:
            for t, n in by_type.items():
                self.ops += n
                self.by_type[t] = self.by_type.get(t, 0) + n

    def _close(self, key: str, p: Any, start: int, end: int) -> None:
        # kept sorted by end (the ends in a list of their own, so that bisect compares
        # plain ints), so only the few that end after this one began are looked at (a
        # scan of all of them, on every exit, was most of the intake's cost)
        closed = self.closed.get(key)
        if closed is None:
            closed = self.closed[key] = ([], [])
        ends, recent = closed
        if (not ends or ends[-1] <= start) and start <= end:
            # the usual case, one holder after another: none ended after this one began
            ends.append(end)
            recent.append((start, p))
        else:
            later = bisect.bisect_right(ends, start)
            if later < len(ends):
                self.overlaps += sum(1 for s, q in recent[later:] if q != p and s < end)
            i = bisect.bisect_right(ends, end)
            ends.insert(i, end)
            recent.insert(i, (start, p))
        if len(ends) > self.RECENT:
            del ends[0], recent[0]  # the one that ended first

    @property
    def violations(self) -> int:
        return self.overlaps + self.stale_accepted


class Progress:
    """One line, rewritten in place on a terminal, or a plain line every few seconds."""

    def __init__(self, out: IO[str] = sys.stderr, every: float | None = None) -> None:
        self.out = out
        self.tty = out.isatty()
        self.every = every if every is not None else (0.5 if self.tty else 5.0)
        self.last = 0.0
        self.width = 0

    def update(self, line: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        if self.tty:
            pad = max(0, self.width - len(line))
            self.out.write("\r" + line + " " * pad)
            self.width = len(line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.out.write("\n")
            self.out.flush()
            self.width = 0


def table(rows: Sequence[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)  # no padding after the last column


def verdict_word(valid: object) -> str:
    return {True: "valid", False: "INVALID"}.get(valid, "unknown")  # type: ignore[call-overload]


def _after_withheld(r: dict[str, Any]) -> str:
    """"; after c2's release reply was withheld at 3.2 s" when the checker tied its
    anomaly to a withheld reply (reply-loss)."""
    w = r.get("withheld_replies")
    return f"; {w[0]['note']}" if w and isinstance(w[0], dict) and "note" in w[0] else ""


def checker_detail(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return str(r["error"])[:70]
    if name == "mutual-exclusion":
        return (f"{r.get('violation_count', 0)} overlaps in {r.get('sections', 0)} critical "
                f"sections{_after_withheld(r)}")
    if name == "fencing":
        resource = "resource safe" if r.get("resource_valid", True) else "RESOURCE CORRUPTED"
        if not r.get("accepted", 0) and not r.get("rejected", 0):
            return (f"no resource writes; tokens: {r.get('duplicate_fence_count', 0)} dup, "
                    f"{r.get('regression_count', 0)} regressions")
        from lockcheck.checker.verdict import refusals

        saves, regressed = refusals(r)
        return (f"{resource}: {r.get('stale_accepted_count', 0)} stale accepted, "
                f"{saves} saves (stale holder refused), {regressed} refused after the fence "
                f"went backwards; tokens: {r.get('duplicate_fence_count', 0)} dup, "
                f"{r.get('regression_count', 0)} regressions")
    if name == "lease-safety" and "certificates" in r:
        return (f"{r.get('violation_count', 0)} grants while a lease was provably valid "
                f"({r['certificates']} leases){_after_withheld(r)}")
    if name == "linearizable" and "model" in r:
        return (f"{r.get('model')}: {r.get('ops', 0)} ops, {r.get('fast_path_keys', 0)} keys by "
                f"fences, {r.get('searched_keys', 0)} by search")
    if name == "hidden-grants":
        if not r.get("applicable", True):
            return "not applicable: the backend's fence does not count grants"
        if "hidden_grant_count" in r:
            return (f"{r['hidden_grant_count']} hidden grants in {r.get('granted_fences', 0)} "
                    f"fences ({r.get('explained_by_info', 0)} gaps: unknown outcomes)"
                    f"{_after_withheld(r)}")
    for k in ("summary", "note", "message"):
        if k in r:
            return str(r[k])[:70]
    return ""


def summary_table(results: dict[str, Any]) -> str:
    rows = [(name, verdict_word(r.get("valid")), f"{r.get('elapsed_s', 0):.2f}s",
             checker_detail(name, r)) for name, r in results.get("checkers", {}).items()]
    return table(rows, ("checker", "verdict", "time", "details"))
