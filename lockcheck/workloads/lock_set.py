"""The `lock-set` workload (Jepsen's etcd lock-set): a read-modify-write under the lock.

Inside the critical section a client reads the set of its lock name from a store the
lock does not fence (`workloads/set_store.py`), holds the lock for `--hold-ms`
(renewing), then writes the set back with one element added: the grant's own lease
token, unique to the section. If two holders overlap, the later write erases the
earlier one's element: a lost update. When the store stops it records every set in
the history (`final-state`), and the `lock-set` checker looks for each acknowledged
add there.

With `--resource etcd-txn` (etcd backends) the sets live in etcd and each write is a
transaction guarded by the writer's own lock key (Jepsen's lock-etcd-set,
`workloads/etcd_set_store.py`): a holder that lost its lock has its write refused
(`fail "store: lock key gone"`). `--resource consul-txn` (consul backends) is the same
in Consul: a `/v1/txn` whose `check-session` on the writer's lock key comes before the
write (`workloads/consul_set_store.py`; refused: `fail "store: failed session check"`).

Like `fenced`, the client writes unless a renewal was refused: it does not consult
its own lease clock first (a pause can land after any such check), so a paused holder
writes late and the set shows what that costs.

History ops (besides the lock's):

    read   invoke {}                    ok {"version": V, "size": N}
    add    invoke {"element": E, "read_version": V}
           ok {"element": E, "version": W, "read_version": V}
    final-state (an event of process "resource")  {"sets": {key: {"version": V,
                                                               "elements": [...]}}}
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
        r = store.write(key, [*seen["elements"], element], version, process,
                        owner=section.lease_token)
        if "version" not in r:  # refused before it applied anything
            return Outcome("fail", {"element": element, "read_version": version},
                           f"store: {r.get('error')}"[:80])
        return Outcome("ok", {"element": element, "version": r["version"],
                              "read_version": version})

    out = section.call("add", {"element": element, "read_version": version}, add)
    return "indefinite" if out.type == "info" else None
