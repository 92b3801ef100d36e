"""Outage: while every server is down, no acquire may be granted.

`--nemesis outage` kills every server of the lock service at once and keeps them down
for longer than a lease. Its windows run from the `start-outage` completion (every
server killed) to the `stop-outage` invoke (the restarts begin), or to the end of the
history. An acquire invoked inside a window and answered `ok` inside it was granted
by nobody: the client made the grant up (a timeout or a refused connection swallowed,
and the work done anyway) and its holder entered a critical section without a lock.
Each is a violation. For correctness locks, no lock means no work.

Beside the verdict, what the clients did in the windows, so a report can say it:
acquires that failed (`fail`: the client knew it had nothing), that timed out or
whose outcome is unknown (`info`), that were still waiting when the window closed
(`blocked`), and the latency of the failures (how fast a client gave up).

A run without an outage window abstains (`unknown`, `nothing_checked`); so does one
whose windows saw no acquire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.history import Op, pair_ops

START, STOP = "start-outage", "stop-outage"
MAX_REPORTED = 20


@dataclass(frozen=True)
class Window:
    start: int
    end: int


def outage_windows(ops: list[Op]) -> list[Window]:
    """Every server down: from a start's completion to the next stop's invoke."""
    out, began = [], None
    last = max((o.time for o in ops), default=0)
    for o in sorted((o for o in ops if o.process == "nemesis"),
                    key=lambda o: (o.time, o.index)):
        if o.f == START and o.type != "invoke" and "error" not in (o.value or {}):
            began = o.time
        elif o.f == STOP and o.type == "invoke" and began is not None:
            out.append(Window(began, o.time))
            began = None
    if began is not None:  # still down when the history ends: every later answer is in it
        out.append(Window(began, last + 1))
    return out


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def check_outage(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    windows = outage_windows(ops)
    if not windows:
        why = "no outage in this run"
        return {"valid": "unknown", "nothing_checked": why, "summary": why}
    granted: list[dict[str, Any]] = []
    counts = {"attempts": 0, "granted": 0, "failed": 0, "unknown": 0, "blocked": 0}
    fail_ms: list[float] = []
    for p in pair_ops(o for o in ops if o.f == "acquire" and o.process != "nemesis"):
        inv, done = p.invoke, p.complete
        w = next((w for w in windows if w.start <= inv.time < w.end), None)
        if w is None:
            continue
        counts["attempts"] += 1
        if done is None or done.time >= w.end:
            # answered after the servers came back (or never): not the outage's to judge
            counts["blocked"] += 1
        elif done.type == "ok":
            counts["granted"] += 1
            granted.append({"process": inv.process, "key": inv.key, "fence": done.fence,
                            "invoke_ns": inv.time, "ok_ns": done.time,
                            "outage_ns": [w.start, w.end]})
        elif done.type == "fail":
            counts["failed"] += 1
            fail_ms.append(_ms(done.time - inv.time))
        else:
            counts["unknown"] += 1
    fail_ms.sort()
    out: dict[str, Any] = {
        "windows": len(windows), "outage_s": round(sum(w.end - w.start for w in windows) / 1e9,
                                                   3),
        "acquires": counts, "granted_without_a_server": granted[:MAX_REPORTED],
        "fail_ms_median": fail_ms[len(fail_ms) // 2] if fail_ms else None,
        "fail_ms_max": fail_ms[-1] if fail_ms else None,
    }
    did = (f"{counts['attempts']} acquires while every server was down: "
           f"{counts['failed']} failed, {counts['unknown']} timed out or unknown, "
           f"{counts['blocked']} still waiting when the servers came back, "
           f"{counts['granted']} granted")
    if granted:
        g = granted[0]
        out.update(valid=False, summary=f"{len(granted)} acquire(s) granted while every "
                   f"server was down: the client proceeded without a lock (first: process "
                   f"{g['process']} on {g['key']} at {g['ok_ns'] / 1e9:.3f} s); {did}")
    elif counts["attempts"] == 0:
        why = f"no acquire was attempted during the {len(windows)} outage(s)"
        out.update(valid="unknown", nothing_checked=why, summary=why)
    else:
        out.update(valid=True, summary=f"nothing was granted while every server was down; "
                                       f"{did}")
    return out
