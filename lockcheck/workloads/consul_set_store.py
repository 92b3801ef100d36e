"""`--resource consul-txn` of the lock-set workload: the sets live in Consul's KV store,
and each write is one transaction guarded by the writer's own lock (the analogue of
`--resource etcd-txn`, `workloads/etcd_set_store.py`).

A write is one `PUT /v1/txn` of two KV operations: first `check-session` on the
writer's lock key (`lockcheck-locks/<name>`) with the writer's session, then `set` of
the set's key. Consul applies both or neither: the write goes through only if, when it
is applied, the lock key is still held by the writer's session. Every grant has a
session of its own (`locks/consul.py`), never used for another acquire, so "my session
holds the key at the write" means "I held the lock from my read to my write". A holder
whose session ended (a pause, a partition) gets 409 `failed session check`, however
late it wakes: the store enforces the lock, as a fence would. Only backends of the
consul family make such sessions.

As in the etcd store, the write itself is a plain `set`, not a check-and-set on the
version read: the lock guard alone keeps two read-modify-write cycles apart.

Each set is one key, `lockcheck-set/<name>`, holding a JSON list; its version is the
key's ModifyIndex (0 before the first write). When the store stops, after the workers,
it reads every set back and records them as the `final-state` event the lock-set
checker reads, as the in-memory store does.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests.exceptions as rqe

from lockcheck.locks.consul import PREFIX as LOCK_PREFIX
from lockcheck.locks.consul import Agents, ConsulReplyError
from lockcheck.workloads.api import ResourceContext

PREFIX = "lockcheck-set/"
TXN = "/v1/txn"
REFUSED = 409  # Consul's status for a transaction it rolled back


def set_key(name: str) -> str:
    return PREFIX + name


def lock_key(name: str) -> str:
    """The KV key `locks/consul.py` acquires for lock `name`."""
    return LOCK_PREFIX + name


def txn_body(name: str, elements: Sequence[Any], session: str) -> list[dict[str, Any]]:
    """The guarded write: the writer's session must hold the lock key, then the set is
    written (KV values go base64 in a transaction)."""
    return [
        {"KV": {"Verb": "check-session", "Key": lock_key(name), "Session": session}},
        {"KV": {"Verb": "set", "Key": set_key(name),
                "Value": base64.b64encode(json.dumps(list(elements)).encode()).decode()}},
    ]


def txn_outcome(name: str, status: int, reply: Any) -> dict[str, Any]:
    """What a transaction's reply means for the write: {"version": ModifyIndex} when it
    applied, {"error": why} when Consul rolled it back (nothing written); OSError when
    the outcome is unknown."""
    if status == 200 and isinstance(reply, Mapping):
        for r in reply.get("Results") or []:
            kv = r.get("KV") if isinstance(r, Mapping) else None
            if isinstance(kv, Mapping) and kv.get("Key") == set_key(name):
                return {"version": int(kv["ModifyIndex"])}
        raise OSError("transaction applied, but no result for the set's key")
    if status == REFUSED and isinstance(reply, Mapping) and reply.get("Errors"):
        whats = [str(e.get("What", "")) for e in reply["Errors"] if isinstance(e, Mapping)]
        return {"error": "; ".join(w for w in whats if w) or "transaction rolled back"}
    raise OSError(f"transaction: HTTP {status}")


def _elements(entry: Mapping[str, Any]) -> list[Any]:
    value = json.loads(base64.b64decode(entry.get("Value") or "") or b"[]")
    return value if isinstance(value, list) else []


def _kv_path(key: str) -> str:
    return "/v1/kv/" + urllib.parse.quote(key, safe="/:")


class ConsulSetClient:
    """A worker's side: consistent reads and guarded writes through one agent (moving on
    after an error, as the lock client does). OSError when an outcome is unknown."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float) -> None:
        self.agents = Agents([str(e) for e in config["endpoints"]], int(config.get("first", 0)))
        self.timeout_s = timeout_s

    def read(self, key: str) -> dict[str, Any]:
        try:
            entries = self.agents.call("GET", _kv_path(set_key(key)), self.timeout_s,
                                       params={"consistent": ""}, missing_ok=True)
        except ConsulReplyError as e:
            raise OSError(e.message) from e
        if not entries:
            return {"version": 0, "elements": []}
        return {"version": int(entries[0]["ModifyIndex"]), "elements": _elements(entries[0])}

    def write(self, key: str, elements: list[Any], read_version: int, process: Any,
              owner: str | None = None) -> dict[str, Any]:
        if owner is None:
            return {"error": "no session to guard the write with"}
        agents = self.agents
        try:
            r = agents.http.request("PUT", agents.endpoints[agents.at] + TXN,
                                    json=txn_body(key, elements, owner),
                                    timeout=(self.timeout_s, self.timeout_s),
                                    allow_redirects=False)
        except rqe.RequestException:  # an OSError: unknown outcome
            agents.move_on()
            raise
        if r.status_code >= 500:
            agents.move_on()
        try:
            reply = r.json()
        except ValueError:
            reply = None
        return txn_outcome(key, r.status_code, reply)

    def close(self) -> None:
        self.agents.close()


class ConsulSetStore:
    """The controller's side: nothing runs for it; at the end it records the sets."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float,
                 record: Callable[[dict[str, Any]], None] | None) -> None:
        self.endpoints, self.timeout_s, self.record = list(endpoints), timeout_s, record

    def start(self) -> ConsulSetStore:
        return self

    def worker_config(self) -> dict[str, Any]:
        return {"kind": "consul-txn", "endpoints": self.endpoints}

    def stop(self) -> None:
        if self.record is None:
            return
        # every agent in turn: one just restarted may not serve yet; no final state at
        # all leaves the lock-set checker unknown, never valid
        agents = Agents(self.endpoints)
        try:
            for _ in self.endpoints:
                try:
                    entries = agents.call("GET", _kv_path(PREFIX), self.timeout_s,
                                          params={"recurse": "", "consistent": ""},
                                          missing_ok=True) or []
                except ConsulReplyError as e:
                    if e.status < 500:  # (Agents moves on after a 5xx itself)
                        agents.move_on()
                    continue
                except (OSError, ValueError):  # (after a request error too)
                    continue
                sets = {str(e["Key"])[len(PREFIX):]:
                        {"version": int(e["ModifyIndex"]), "elements": _elements(e)}
                        for e in entries}
                self.record({"process": "resource", "type": "event", "f": "final-state",
                             "value": {"sets": dict(sorted(sets.items()))}})
                return
        finally:
            agents.close()


def start_store(ctx: ResourceContext) -> ConsulSetStore:
    endpoints = ctx.service.get("endpoints")
    if not endpoints:
        raise ValueError("--resource consul-txn needs a consul backend")
    return ConsulSetStore([str(e) for e in endpoints], 5.0, ctx.record)
