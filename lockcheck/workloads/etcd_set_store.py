"""`--resource etcd-txn` of the lock-set workload: the sets live in etcd itself, and each
write is a transaction guarded by the writer's own lock key (Jepsen's `lock-etcd-set`).

The write of a set succeeds only if, in the same transaction, the writer's lock key
(`<name>/<lease hex>`, the key etcd's lock service made for this grant) still exists:
while it exists nobody else can have been granted the lock, because every other
waiter's key is younger and waits for it to go. Keys are never recreated (a lease per
grant), so "my key exists at the write" means "I held the lock from my read to my
write". A holder whose lease expired (a pause, a partition) has its write refused,
however late it wakes: the store enforces the lock, as a fence would. Only backends
of the etcd family make such keys.

Each set is one etcd key, `lockcheck-set/<name>`, holding a JSON list; its version is
the key's mod revision (0 before the first write). When the store stops, after the
workers, it reads every set back and records them as the `final-state` event the
lock-set checker reads, as the in-memory store does.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lockcheck.locks.etcd import EtcdReplyError, Gateway, b64
from lockcheck.workloads.api import ResourceContext

PREFIX = "lockcheck-set/"
TXN, RANGE = "/v3/kv/txn", "/v3/kv/range"


@contextmanager
def unknown_outcome() -> Iterator[None]:
    """An error reply of etcd's counts as an unknown outcome (OSError) for the body:
    only a transaction that answered "not succeeded" certainly wrote nothing."""
    try:
        yield
    except EtcdReplyError as e:
        raise OSError(e.message) from e


class EtcdSetClient:
    """A worker's side: reads and guarded writes through one member (moving on after an
    error, as the lock client does)."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float) -> None:
        self.gateway = Gateway([str(e) for e in config["endpoints"]],
                               int(config.get("first", 0)))
        self.timeout_s = timeout_s

    def read(self, key: str) -> dict[str, Any]:
        with unknown_outcome():
            kvs = self.gateway.call(RANGE, {"key": b64(PREFIX + key)},
                                    self.timeout_s).get("kvs", [])
        if not kvs:
            return {"version": 0, "elements": []}
        return {"version": int(kvs[0]["mod_revision"]), "elements": _elements(kvs[0])}

    def write(self, key: str, elements: list[Any], read_version: int, process: Any,
              owner: str | None = None) -> dict[str, Any]:
        if owner is None:
            return {"error": "no lock key to guard the write with"}
        lock_key = f"{key}/{owner}"  # etcd's lock service: <name>/<lease ID in hex>
        txn = {"compare": [{"key": b64(lock_key), "target": "CREATE", "result": "GREATER",
                            "create_revision": "0"}],
               "success": [{"request_put": {"key": b64(PREFIX + key),
                                            "value": b64(json.dumps(elements))}}]}
        with unknown_outcome():
            reply = self.gateway.call(TXN, txn, self.timeout_s)
        if not reply.get("succeeded"):
            return {"error": "lock key gone"}
        return {"version": int(reply["header"]["revision"])}

    def close(self) -> None:
        self.gateway.close()


def _elements(kv: Mapping[str, Any]) -> list[Any]:
    value = json.loads(base64.b64decode(kv.get("value", "")) or b"[]")
    return value if isinstance(value, list) else []


class EtcdSetStore:
    """The controller's side: nothing runs for it; at the end it records the sets."""

    def __init__(self, endpoints: Sequence[str], timeout_s: float,
                 record: Callable[[dict[str, Any]], None] | None) -> None:
        self.endpoints, self.timeout_s, self.record = list(endpoints), timeout_s, record

    def start(self) -> EtcdSetStore:
        return self

    def worker_config(self) -> dict[str, Any]:
        return {"kind": "etcd-txn", "endpoints": self.endpoints}

    def stop(self) -> None:
        if self.record is None:
            return
        # every member in turn: one that was just restarted may not serve yet; no
        # final state at all leaves the lock-set checker unknown, never valid
        gw = Gateway(self.endpoints)
        try:
            for _ in self.endpoints:
                try:
                    kvs = gw.call(RANGE, {"key": b64(PREFIX), "range_end": b64(PREFIX[:-1] + "0")},
                                  self.timeout_s).get("kvs", [])
                except (EtcdReplyError, OSError, ValueError):
                    continue
                sets = {base64.b64decode(kv["key"]).decode()[len(PREFIX):]:
                        {"version": int(kv["mod_revision"]), "elements": _elements(kv)}
                        for kv in kvs}
                self.record({"process": "resource", "type": "event", "f": "final-state",
                             "value": {"sets": dict(sorted(sets.items()))}})
                return
        finally:
            gw.close()


def start_store(ctx: ResourceContext) -> EtcdSetStore:
    endpoints = ctx.service.get("endpoints")
    if not endpoints:
        raise ValueError("--resource etcd-txn needs an etcd backend")
    return EtcdSetStore([str(e) for e in endpoints], 5.0, ctx.record)
