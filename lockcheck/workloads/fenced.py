"""The `fenced` workload: hold the lock, then write the fence to the protected resource.

The resource (`workloads/resource.py`) is on trial: with `--resource fenced` it refuses a
write whose fence is not above every fence it accepted for the key, so a stale holder
cannot corrupt it even when the lock let two clients in.

The client does what the textbook fenced client does: it works until a renewal is refused
(or its library says the lock is gone), then writes with its fence and leaves the
decision to the resource. It does not look at its own lease clock before the write:
such a check cannot close the window anyway (a pause can land right after it), and
the point of this workload is what the fence does when the client is wrong.
"""

from __future__ import annotations

from lockcheck.workloads.api import Outcome, Reason, Section


def body(section: Section) -> Reason:
    reason = section.work(section.hold_time(), watch_clock=False)
    if reason is not None:
        return reason
    return write(section)


def write(section: Section) -> Reason:
    """One write carrying the fence."""
    fence, key = section.fence, section.key

    def do(process: int) -> Outcome:
        r = section.resource.write(key, fence, process)  # OSError: outcome unknown
        if "accepted" not in r:  # the resource refused to process it: nothing applied
            return Outcome("fail", {"fence": fence}, f"resource: {r.get('error')}"[:80])
        value = {"fence": fence, "accepted": r["accepted"], "seq": r["seq"],
                 "max_fence": r["max_fence"]}
        return Outcome("ok", value) if r["accepted"] else Outcome("fail", value, "stale-fence")

    out = section.call("write", {"fence": fence}, do)
    return "indefinite" if out.type == "info" else None
