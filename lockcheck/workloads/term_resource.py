"""The term store: what a leader's actions land on, outside the election service.

In `fenced` mode it refuses an action whose term is lower than the highest term it
has accepted for the election (a leader acts many times in one term, so an equal term
is accepted, unlike the fenced workload's store, which takes each fence once). In
`unfenced` mode it accepts everything and still says what it would have refused.
Every action is logged to the run's resource log; workers reach it over a Unix socket,
as they reach the fenced workload's store (`workloads/resource.py`).
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
class TermState:
    mode: str  # "fenced" or "unfenced"
    log: TextIO | None = None
    t0_ns: int = 0
    max_term: dict[str, int] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def act(self, key: str, term: int | None, process: Any) -> dict[str, Any]:
        with self.lock:
            if self.closed:
                raise ValueError("term store is shut down")
            prev = self.max_term.get(key)
            # no term at all cannot be ordered: a fenced store refuses it
            stale = term is None or (prev is not None and term < prev)
            accepted = self.mode == "unfenced" or not stale
            seq = self.seq[key] = self.seq.get(key, 0) + 1
            if accepted and term is not None and (prev is None or term > prev):
                self.max_term[key] = term
            rec = {"time": time.monotonic_ns() - self.t0_ns, "process": process, "key": key,
                   "term": term, "accepted": accepted, "seq": seq, "max_term": prev}
            if self.log is not None:
                self.log.write(json.dumps(rec) + "\n")
                self.log.flush()
            return rec


class TermServer(LoggedStore):
    """Runs in the controller for the length of a test."""

    state: TermState

    def __init__(self, socket_path: Path, log_path: Path, mode: str, t0_ns: int) -> None:
        super().__init__(socket_path, log_path, "term-store")
        self.state = TermState(mode=mode, log=self.log_fh, t0_ns=t0_ns)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        term = req.get("term")
        return self.state.act(str(req["key"]), term if isinstance(term, int) else None,
                              req.get("process"))


class TermClient(JsonLineClient):
    """The worker's side: one blocking request per action."""

    def __init__(self, config: dict[str, Any] | str, timeout_s: float) -> None:
        super().__init__(config["socket"] if isinstance(config, dict) else config, timeout_s)

    def act(self, key: str, term: int | None, process: Any) -> dict[str, Any]:
        """Raises OSError/TimeoutError when the outcome is unknown."""
        return self.call({"key": key, "term": term, "process": process})


def start_store(ctx: ResourceContext) -> TermServer:
    return TermServer(ctx.workdir / "terms.sock", ctx.run_dir / RESOURCE, ctx.mode, ctx.t0_ns)
