"""A tiny builder for hand-written histories (docs/history-format.md).

    ops = (
        H()
        .acquire(0, "k", 1, 10, 20)          # invoke at t=10, ok {"fence": 1} at t=20
        .enter(0, "k", 1, 21)
        .write(0, "k", 1, 30, 40, seq=1)     # accepted
        .exit(0, "k", 1, 50)
        .release(0, "k", 1, 60, 70)
        .ops()
    )

Times are ns. `ops()` returns the ops in time order (stable: ties keep the order in
which they were added), indexed 0..n-1, as the controller would have written them;
`ops(sort=False)` keeps the order of the calls. `worker` defaults to the process
(or `process % concurrency` with `H(concurrency=n)`); pass `worker=` to override.
Completions: `result` is "ok", "fail", "info" or None (no completion at all).
"""

from __future__ import annotations

import json
from typing import Any

from lockcheck.history import Op, Process


class H:
    def __init__(self, concurrency: int | None = None) -> None:
        self.concurrency = concurrency
        self._rows: list[dict[str, Any]] = []

    # -- raw -------------------------------------------------------------------------

    def op(
        self,
        process: Process,
        type: str,
        f: str,
        key: str | None,
        value: Any,
        time: int,
        *,
        error: str | None = None,
        worker: int | None = None,
    ) -> H:
        row: dict[str, Any] = {
            "time": time,
            "process": process,
            "type": type,
            "f": f,
            "key": key,
            "value": value,
        }
        if error is not None:
            row["error"] = error
        w = worker if worker is not None else self._worker(process)
        if w is not None:
            row["worker"] = w
        self._rows.append(row)
        return self

    def _worker(self, process: Process) -> int | None:
        if not isinstance(process, int):
            return None
        return process % self.concurrency if self.concurrency else process

    def _call(
        self,
        process: Process,
        f: str,
        key: str | None,
        t0: int,
        t1: int | None,
        invoke_value: Any,
        done_value: Any,
        result: str | None,
        error: str | None,
        worker: int | None,
    ) -> H:
        self.op(process, "invoke", f, key, invoke_value, t0, worker=worker)
        if result is not None:
            if t1 is None:
                raise ValueError("a completion needs a time t1")
            err = error if result != "ok" else None
            self.op(process, result, f, key, done_value, t1, error=err, worker=worker)
        return self

    # -- lock operations ---------------------------------------------------------------

    def acquire(
        self,
        process: Process,
        key: str,
        fence: int | None,
        t0: int,
        t1: int | None = None,
        *,
        result: str | None = "ok",
        ttl_ms: int = 2000,
        error: str | None = None,
        worker: int | None = None,
    ) -> H:
        """ok -> {"fence": fence}; fail -> error "busy" (value null); info -> timeout."""
        done = {"fence": fence} if result == "ok" else None
        err = error or {"fail": "busy", "info": "timeout"}.get(result or "")
        return self._call(
            process, "acquire", key, t0, t1, {"ttl_ms": ttl_ms}, done, result, err, worker
        )

    def renew(
        self,
        process: Process,
        key: str,
        fence: int | None,
        t0: int,
        t1: int | None = None,
        *,
        result: str | None = "ok",
        ttl_ms: int = 2000,
        error: str | None = None,
        worker: int | None = None,
    ) -> H:
        err = error or {"fail": "not-owner", "info": "timeout"}.get(result or "")
        return self._call(
            process,
            "renew",
            key,
            t0,
            t1,
            {"ttl_ms": ttl_ms, "fence": fence},
            {"fence": fence},
            result,
            err,
            worker,
        )

    def release(
        self,
        process: Process,
        key: str,
        fence: int | None,
        t0: int,
        t1: int | None = None,
        *,
        result: str | None = "ok",
        error: str | None = None,
        worker: int | None = None,
    ) -> H:
        err = error or {"fail": "not-owner", "info": "timeout"}.get(result or "")
        v = {"fence": fence}
        return self._call(process, "release", key, t0, t1, v, v, result, err, worker)

    # -- critical sections -------------------------------------------------------------

    def enter(
        self, process: Process, key: str, fence: int | None, t: int, *, worker: int | None = None
    ) -> H:
        return self.op(process, "event", "enter", key, {"fence": fence}, t, worker=worker)

    def exit(
        self,
        process: Process,
        key: str,
        fence: int | None,
        t: int,
        reason: str = "done",
        *,
        worker: int | None = None,
    ) -> H:
        v = {"fence": fence, "reason": reason}
        return self.op(process, "event", "exit", key, v, t, worker=worker)

    def section(
        self,
        process: Process,
        key: str,
        fence: int | None,
        start: int,
        end: int | None,
        reason: str = "done",
        *,
        worker: int | None = None,
    ) -> H:
        """enter at `start` and exit at `end` (no exit when end is None)."""
        self.enter(process, key, fence, start, worker=worker)
        if end is not None:
            self.exit(process, key, fence, end, reason, worker=worker)
        return self

    # -- resource writes -----------------------------------------------------------------

    def write(
        self,
        process: Process,
        key: str,
        fence: int | None,
        t0: int,
        t1: int | None = None,
        *,
        seq: int | None = None,
        max_fence: int | None = None,
        result: str | None = "ok",
        error: str | None = None,
        worker: int | None = None,
    ) -> H:
        """result "ok" = accepted; "rejected" = fail with accepted false ("stale-fence");
        "fail" = never reached the resource (value null); "info"/None = unknown."""
        if result in ("ok", "rejected"):
            done: Any = {"fence": fence, "accepted": result == "ok", "seq": seq}
            done["max_fence"] = max_fence
            if seq is None:
                del done["seq"]
        else:
            done = None
        kind = "fail" if result == "rejected" else result
        err = error or {
            "rejected": "stale-fence",
            "fail": "connection refused",
            "info": "timeout",
        }.get(result or "")
        return self._call(process, "write", key, t0, t1, {"fence": fence}, done, kind, err, worker)

    # -- nemesis ---------------------------------------------------------------------------

    def nemesis(self, f: str, t0: int, t1: int, value: Any = None) -> H:
        self.op("nemesis", "invoke", f, None, None, t0)
        return self.op("nemesis", "info", f, None, value, t1)

    # -- output ----------------------------------------------------------------------------

    def rows(self, *, sort: bool = True) -> list[dict[str, Any]]:
        rows = sorted(self._rows, key=lambda r: r["time"]) if sort else list(self._rows)
        return [{"index": i, **r} for i, r in enumerate(rows)]

    def ops(self, *, sort: bool = True) -> list[Op]:
        out = []
        for r in self.rows(sort=sort):
            out.append(
                Op(
                    process=r["process"],
                    type=r["type"],
                    f=r["f"],
                    key=r["key"],
                    value=r["value"],
                    time=r["time"],
                    index=r["index"],
                    error=r.get("error"),
                    worker=r.get("worker"),
                )
            )
        return out

    def jsonl(self, *, sort: bool = True) -> str:
        """The history as history.jsonl text."""
        return "".join(json.dumps(r) + "\n" for r in self.rows(sort=sort))
