"""The `leader` workload: elect a leader once, and let it act for a whole term.

A leader election is a lock held for long, whose holder acts many times: the lock's
name is the election, a grant is a won campaign, and the grant's fence is the term.
So the worker's loop fits as it is (campaign = acquire, lead = the body, step down =
release); only the body differs from `mutex`: it leads for one term (a draw of
`--hold-ms`) and acts `ACTS_PER_TERM` times, each `act` stamped with its term and sent
to the term store (`workloads/term_resource.py`), renewing its leadership in between
as every section renews its lease.

Before each unit of work the leader asks whether it still leads (a refused renewal,
its library's word, its own lease clock) and steps down if not. The unit of work
itself does not look again (`watch_clock=False`), and its result is sent when it is
done: what a real leader does, and the window in which a leader paused past its lease
(a GC pause, `client-pause`) acts once more after another leader was elected. Only a
store that refuses stale terms (`--resource fenced`) stops that act.
"""

from __future__ import annotations

import time

from lockcheck.workloads.api import Outcome, Reason, Section

ACTS_PER_TERM = 8
MIN_STEP_S = 0.01


def body(section: Section) -> Reason:
    term_s = section.hold_time()
    step = max(MIN_STEP_S, term_s / ACTS_PER_TERM)
    end = time.monotonic() + term_s
    acts = 0
    while True:
        reason = section.believes()
        if reason is not None:
            return reason
        if time.monotonic() >= end:
            return None
        # the unit of work: renewals go on, but the lease clock is not looked at again
        due = time.monotonic() + step
        reason = section.work(step, watch_clock=False)
        if reason is not None:
            return reason
        if time.monotonic() < due:  # work ends early only when the worker is stopping
            return None
        acts += 1
        if act(section, acts) is not None:
            return "indefinite"


def act(section: Section, n: int) -> Reason:
    """One action of the leader, stamped with its term (the grant's fence)."""
    term, key = section.fence, section.key

    def do(process: int) -> Outcome:
        r = section.resource.act(key, term, process)  # OSError: outcome unknown
        if "accepted" not in r:  # the store refused to process it: nothing applied
            return Outcome("fail", {"term": term, "n": n}, f"resource: {r.get('error')}"[:80])
        value = {"term": term, "n": n, "accepted": r["accepted"], "seq": r["seq"],
                 "max_term": r["max_term"]}
        return Outcome("ok", value) if r["accepted"] else Outcome("fail", value, "stale-term")

    out = section.call("act", {"term": term, "n": n}, do)
    return "indefinite" if out.type == "info" else None
