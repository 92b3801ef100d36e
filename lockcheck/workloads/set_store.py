"""The lock-set workload's store: a set per lock name, which the lock does not protect.

It accepts every write, whoever sends it and whatever it read before (there is no
fence, no compare-and-set): the lock alone is meant to keep two read-modify-write
cycles of one name from interleaving, as in Jepsen's etcd lock-set test. Each write
replaces the whole set and gets the next version number of its name, so a lost
update can be traced: a write based on a read older than another write erased it.

It runs in the controller; workers reach it over a Unix socket, so no partition cuts
them from it. Every write is logged to `lock-set.jsonl` in the results folder, and
when it stops (at the end of the run, after Ctrl-C too) it records every set into the
history: a `final-state` event of process `resource`, which the lock-set checker reads.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lockcheck.workloads.api import ResourceContext
from lockcheck.workloads.unix_rpc import JsonLineClient, LoggedStore

LOG = "lock-set.jsonl"


@dataclass
class SetState:
    log: TextIO | None = None
    t0_ns: int = 0
    sets: dict[str, list[Any]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def read(self, key: str) -> dict[str, Any]:
        with self.lock:
            return {"version": self.versions.get(key, 0),
                    "elements": list(self.sets.get(key, []))}

    def write(self, key: str, elements: list[Any], process: Any,
              read_version: Any = None) -> dict[str, Any]:
        with self.lock:
            if self.closed:
                raise ValueError("the store is shut down")
            version = self.versions.get(key, 0) + 1
            self.versions[key] = version
            self.sets[key] = list(elements)
            if self.log is not None:
                self.log.write(json.dumps({
                    "time": time.monotonic_ns() - self.t0_ns, "process": process, "key": key,
                    "version": version, "read_version": read_version,
                    "size": len(elements)}) + "\n")
                self.log.flush()
            return {"version": version}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        key = str(req["key"])
        if req.get("op") == "read":
            return self.read(key)
        if req.get("op") == "write" and isinstance(req.get("elements"), list):
            return self.write(key, req["elements"], req.get("process"),
                              req.get("read_version"))
        raise ValueError(f"unknown request {req.get('op')!r}")


class SetStore(LoggedStore):
    """Runs in the controller for the length of a test (a `workloads.api.Resource`)."""

    state: SetState

    def __init__(self, socket_path: Path, log_path: Path, t0_ns: int,
                 record: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(socket_path, log_path, "lock-set store")
        self.state = SetState(log=self.log_fh, t0_ns=t0_ns)
        self.record = record

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.state.handle(req)

    def stop(self) -> None:
        super().stop()  # no write can land after this
        if self.record is not None:  # the ground truth, for the lock-set checker
            with self.state.lock:
                sets = {k: {"version": self.state.versions.get(k, 0), "elements": list(v)}
                        for k, v in sorted(self.state.sets.items())}
            self.record({"process": "resource", "type": "event", "f": "final-state",
                         "value": {"sets": sets}})


class SetClient(JsonLineClient):
    """A worker's side. Raises OSError/TimeoutError when an outcome is unknown."""

    def __init__(self, config: dict[str, Any], timeout_s: float) -> None:
        super().__init__(config["socket"], timeout_s)

    def read(self, key: str) -> dict[str, Any]:
        return self.call({"op": "read", "key": key})

    def write(self, key: str, elements: list[Any], read_version: int,
              process: Any, owner: str | None = None) -> dict[str, Any]:
        # `owner` (the grant's lease token) guards nothing here: this store is unfenced
        return self.call({"op": "write", "key": key, "elements": elements,
                          "read_version": read_version, "process": process})


def start_store(ctx: ResourceContext) -> Any:
    """The in-memory store, or with `--resource etcd-txn` the sets in etcd itself,
    written only while the writer's lock key exists (`workloads/etcd_set_store.py`),
    or with `--resource consul-txn` the sets in Consul, written only while the writer's
    session holds its lock key (`workloads/consul_set_store.py`)."""
    if ctx.mode == "etcd-txn":
        from lockcheck.workloads import etcd_set_store

        return etcd_set_store.start_store(ctx)
    if ctx.mode == "consul-txn":
        from lockcheck.workloads import consul_set_store

        return consul_set_store.start_store(ctx)
    if ctx.mode == "azure-blob":  # the sets in Azure blobs (workloads/azure_set_store.py)
        from lockcheck.workloads import azure_set_store

        return azure_set_store.start_store(ctx)
    return SetStore(ctx.workdir / "lock-set.sock", ctx.run_dir / LOG, ctx.t0_ns, ctx.record)


def set_client(config: dict[str, Any], timeout_s: float) -> Any:
    """A worker's client of whichever store `start_store` made."""
    if config.get("kind") == "etcd-txn":
        from lockcheck.workloads.etcd_set_store import EtcdSetClient

        return EtcdSetClient(config, timeout_s)
    if config.get("kind") == "consul-txn":
        from lockcheck.workloads.consul_set_store import ConsulSetClient

        return ConsulSetClient(config, timeout_s)
    if config.get("kind") == "azure-blob":
        from lockcheck.workloads.azure_set_store import AzureSetClient

        return AzureSetClient(config, timeout_s)
    return SetClient(config, timeout_s)
