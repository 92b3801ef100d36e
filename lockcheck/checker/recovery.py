"""Recovery: once every fault was healed, could each lock be taken again?

The run's last phase is a worker of its own (test.json `recovery_worker`) that takes
each lock once, retrying until a deadline. A key it never got means the service did
not recover (a liveness failure, reported beside the safety verdict, never hidden).
"""

from __future__ import annotations

from typing import Any

from lockcheck.history import Op


def check_recovery(ops: list[Op], test: dict[str, Any], started: bool = False) -> dict[str, Any]:
    """`started`: the recovery worker was started (the runner knows). One that was and
    recorded nothing spent its whole window getting its client going (a service that
    accepts connections and never answers): no lock was taken again."""
    worker = test.get("recovery_worker")
    keys = list(test.get("recovery_keys")
                or [f"k{i}" for i in range(int(test.get("keys", 0) or 0))])
    mine = [o for o in ops if o.worker == worker and worker is not None
            and o.process != "nemesis"]
    if not mine and started and keys:
        return {"valid": False,
                "keys": {k: {"acquired_after_s": None, "attempts": 0} for k in keys},
                "summary": f"NOT RECOVERED: {', '.join(keys)} could not be taken again "
                           "after every fault was healed (the recovery worker's client "
                           "never got to send a request)"}
    if not mine:
        return {"valid": "unknown", "keys": {}, "summary": "the recovery phase did not run"}
    start = mine[0].time
    got: dict[str, float | None] = {k: None for k in keys}
    attempts: dict[str, int] = {k: 0 for k in keys}
    for o in mine:
        if o.f != "acquire" or o.key is None:
            continue
        if o.type == "invoke":
            attempts[o.key] = attempts.get(o.key, 0) + 1
        elif o.type == "ok" and got.get(o.key) is None:
            got[o.key] = round((o.time - start) / 1e9, 3)
    missing = [k for k, t in got.items() if t is None]
    per_key = {k: {"acquired_after_s": t, "attempts": attempts.get(k, 0)}
               for k, t in got.items()}
    if missing:
        return {"valid": False, "keys": per_key,
                "summary": f"NOT RECOVERED: {', '.join(missing)} could not be taken again "
                           "after every fault was healed"}
    worst = max((t for t in got.values() if t is not None), default=0.0)
    return {"valid": True, "keys": per_key,
            "summary": f"every lock could be taken again (the last after {worst:g} s)"}
