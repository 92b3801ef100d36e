"""The protected resource: a store outside the lock service that records every write.

In `fenced` mode it does what `UPDATE ... WHERE fence < $f` does: a write is accepted
only if its fence is greater than the highest fence it accepted for that key. In
`unfenced` mode it accepts everything, so a report can show what fencing saved.
Workers reach it over a Unix socket (path sockets cross network namespaces, so a
partition never cuts a client from the resource).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lockcheck.results.store import RESOURCE
from lockcheck.workloads.api import ResourceContext
from lockcheck.workloads.unix_rpc import JsonLineClient, LoggedStore


@dataclass
class ResourceState:
    mode: str  # "fenced" or "unfenced"
    log: TextIO | None = None
    t0_ns: int = 0
    max_fence: dict[str, int] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    writes: int = 0
    rejected: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    closed: bool = False

    def write(self, key: str, fence: int | None, process: Any) -> dict[str, Any]:
        with self.lock:
            if self.closed:
                raise ValueError("resource is shut down")
            prev = self.max_fence.get(key)
            stale = fence is None or (prev is not None and fence <= prev)
            accepted = self.mode == "unfenced" or not stale
            seq = self.seq.get(key, 0) + 1
            self.seq[key] = seq
            if accepted and fence is not None and (prev is None or fence > prev):
                self.max_fence[key] = fence
            self.writes += 1
            self.rejected += 0 if accepted else 1
            rec = {"time": time.monotonic_ns() - self.t0_ns, "process": process, "key": key,
                   "fence": fence, "accepted": accepted, "seq": seq, "max_fence": prev}
            if self.log is not None:
                self.log.write(json.dumps(rec) + "\n")
                self.log.flush()
            return rec


class ResourceServer(LoggedStore):
    """Runs in the controller for the length of a test."""

    state: ResourceState

    def __init__(self, socket_path: Path, log_path: Path, mode: str, t0_ns: int) -> None:
        super().__init__(socket_path, log_path, "resource")
        self.state = ResourceState(mode=mode, log=self.log_fh, t0_ns=t0_ns)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        return self.state.write(str(req["key"]), req.get("fence"), req.get("process"))


class ResourceClient(JsonLineClient):
    """The worker's side: one blocking request per write."""

    def __init__(self, config: dict[str, Any] | str, timeout_s: float) -> None:
        super().__init__(config["socket"] if isinstance(config, dict) else config, timeout_s)

    def write(self, key: str, fence: int | None, process: Any) -> dict[str, Any]:
        """Raises OSError/TimeoutError when the outcome is unknown."""
        return self.call({"key": key, "fence": fence, "process": process})


def start_resource(ctx: ResourceContext) -> ResourceServer:
    """The `fenced` workload's resource, as the runner starts it."""
    return ResourceServer(ctx.workdir / "resource.sock", ctx.run_dir / RESOURCE,
                          ctx.mode, ctx.t0_ns)
