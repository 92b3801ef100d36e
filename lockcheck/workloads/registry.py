"""Workloads by name. Adding one is a module with its body and an entry here."""

from __future__ import annotations

from lockcheck.errors import BadInput
from lockcheck.workloads.api import Trial, Workload

_LOCK_CHECKERS = ("mutual-exclusion", "fencing", "lease-safety", "linearizable")
_VERDICTS = "lockcheck.checker.verdict"

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            name="mutex",
            description="acquire, hold for --hold-ms (renewing every TTL/3), release; "
                        "the lock is on trial",
            body="lockcheck.workloads.mutex:body",
            checkers=_LOCK_CHECKERS, verdict=f"{_VERDICTS}:lock_verdict", on_trial="lock",
        ),
        Workload(
            name="fenced",
            description="the same, then write the fence to a protected resource that "
                        "rejects stale fences (--resource fenced) or not (unfenced); "
                        "the resource is on trial",
            body="lockcheck.workloads.fenced:body",
            resource="lockcheck.workloads.resource:start_resource",
            resource_client="lockcheck.workloads.resource:ResourceClient",
            checkers=_LOCK_CHECKERS, verdict=f"{_VERDICTS}:fenced_verdict",
            on_trial="lock+resource",
        ),
        Workload(
            name="lock-set",
            description="Jepsen's etcd lock-set: inside the section read a set from a "
                        "store the lock does not fence, hold for --hold-ms, write it back "
                        "with one element added; every acknowledged add must survive",
            body="lockcheck.workloads.lock_set:body",
            resource="lockcheck.workloads.set_store:start_store",
            resource_client="lockcheck.workloads.set_store:set_client",
            checkers=(*_LOCK_CHECKERS, "lock-set"), verdict=f"{_VERDICTS}:lock_set_verdict",
            on_trial="resource",
            # etcd-txn: the sets in etcd, each write guarded by the writer's lock key;
            # consul-txn: the sets in Consul, each write guarded by the writer's session
            # azure-blob: the sets in Azure Blob Storage, each written with the
            # writer's lease id on its lock's blob
            resources=("fenced", "unfenced", "etcd-txn", "consul-txn", "azure-blob"),
            resource_families={"etcd-txn": "etcd", "consul-txn": "consul",
                               "azure-blob": "azure-blob"},
        ),
        Workload(
            name="leader",
            description="leader election: clients campaign for the lock, the winner leads "
                        "for a term (--hold-ms) and acts 8 times, each action stamped "
                        "with its term (the fence), to a store that refuses a lower term "
                        "(--resource fenced) or not (unfenced); the leadership is on trial",
            body="lockcheck.workloads.leader:body",
            resource="lockcheck.workloads.term_resource:start_store",
            resource_client="lockcheck.workloads.term_resource:TermClient",
            checkers=(*_LOCK_CHECKERS, "leadership"),
            verdict=f"{_VERDICTS}:leader_verdict", on_trial="resource",
        ),
        Workload(
            name="settlement",
            description="the payments case: a lock per merchant-day, a PostgreSQL "
                        "settlements table; each merchant-day must be settled exactly once. "
                        "--resource unfenced (lock only), fenced (+ fence), idempotent "
                        "(+ fence + idempotency key), row-lock (the row read FOR UPDATE in "
                        "the settling transaction, no fence), version (a conditional "
                        "update on the row's version, no fence)",
            body="lockcheck.workloads.settlement:body",
            resource="lockcheck.workloads.settlement:start_store",
            resource_client="lockcheck.workloads.settlement:SettlementClient",
            checkers=("settlement", "mutual-exclusion", "lease-safety", "linearizable"),
            verdict=f"{_VERDICTS}:settlement_verdict", on_trial="resource",
            resources=("idempotent", "fenced", "unfenced", "row-lock", "version"),
            keys="lockcheck.workloads.settlement:plan",
            pick="lockcheck.workloads.settlement:pick",
        ),
        Workload(
            name="transfer",
            description="each operation takes two (--locks-per-op) account locks in "
                        "--lock-order sorted or random, each acquire blocking up to "
                        "--wait-ms, holds them for --hold-ms, releases them; "
                        "--lock-scope coarse takes one global lock instead. Liveness "
                        "is on trial: deadlock cycles, throughput, time lost",
            body="lockcheck.workloads.transfer:body",
            checkers=(*_LOCK_CHECKERS, "deadlock"),
            verdict=f"{_VERDICTS}:transfer_verdict", on_trial="lock",
            resources=("fenced",),
            keys="lockcheck.workloads.transfer:plan",
            round="lockcheck.workloads.transfer:transfer_round",
        ),
    ]
}


def workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise BadInput(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None


def on_trial(name: str) -> Trial:
    """What a run of workload `name` puts on trial; the lock for a workload this version
    does not know (a run written by another one)."""
    w = WORKLOADS.get(name)
    return w.on_trial if w is not None else "lock"
