"""The `lock-set` workload (Jepsen's etcd lock-set): a read-modify-write under the lock.

Inside the critical section a client reads the set of its lock name from a store the
lock does not fence (`workloads/set_store.py`), holds the lock for `--hold-ms`
(renewing), then writes the set back with one element added: the grant's own lease
token, unique to the section. If two holders overlap, the later write erases the
earlier one's element: a lost update. At the end the recovery worker reads every set
(`final`), and the `lock-set` checker looks for each acknowledged add in it.

Like `fenced`, the client writes unless a renewal was refused: it does not consult
its own lease clock first (a pause can land after any such check), so a paused holder
writes late and the set shows what that costs.

History ops (besides the lock's):

    read   invoke {}                    ok {"version": V, "size": N}
    add    invoke {"element": E, "read_version": V}
           ok {"element": E, "version": W, "read_version": V}
    read   invoke {"final": true}       ok {"version": V, "elements": [...]}  (recovery)
"""

from __future__ import annotations

from typing import Any

from lockcheck.workloads.api import Outcome, Reason, Section


def body(section: Section) -> Reason:
    key, store = section.key, section.resource
    seen: dict[str, Any] = {}

    def read(process: int) -> Outcome:
        r = store.read(key)  # OSError: outcome unknown
        seen.update(r)
        return Outcome("ok", {"version": r["version"], "size": len(r["elements"])})

    out = section.call("read", {}, read)
    if out.type != "ok":
        return "indefinite" if out.type == "info" else "error"
    reason = section.work(section.hold_time(), watch_clock=False)
    if reason is not None:
        return reason
    element, version = section.lease_token, seen["version"]

    def add(process: int) -> Outcome:
        r = store.write(key, [*seen["elements"], element], version, process)
        if "version" not in r:  # refused before it applied anything
            return Outcome("fail", {"element": element, "read_version": version},
                           f"store: {r.get('error')}"[:80])
        return Outcome("ok", {"element": element, "version": r["version"],
                              "read_version": version})

    out = section.call("add", {"element": element, "read_version": version}, add)
    return "indefinite" if out.type == "info" else None


def final(worker: Any) -> None:
    """The recovery worker's last step: read every set, with its elements."""
    store = worker.resource
    for key in worker.cfg.keys:
        if worker.rec.broken:
            return

        def read(process: int, key: str = key) -> Outcome:
            r = store.read(key)
            return Outcome("ok", {"version": r["version"], "elements": r["elements"]})

        worker.call("read", key, {"final": True}, read)
