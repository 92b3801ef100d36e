"""The protected resource: a store outside the lock service that records every write.

In `fenced` mode it does what `UPDATE ... WHERE fence < $f` does: a write is accepted
only if its fence is greater than the highest fence it accepted for that key. In
`unfenced` mode it accepts everything, so a report can show what fencing saved.
Workers reach it over a Unix socket (path sockets cross network namespaces, so a
partition never cuts a client from the resource).
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lockcheck.results.store import RESOURCE
from lockcheck.workloads.api import ResourceContext


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


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        state: ResourceState = self.server.state  # type: ignore[attr-defined]
        for line in self.rfile:
            try:
                req = json.loads(line)
                rec = state.write(str(req["key"]), req.get("fence"), req.get("process"))
            except (ValueError, KeyError) as e:
                rec = {"error": str(e)}
            self.wfile.write((json.dumps(rec) + "\n").encode())
            self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class ResourceServer:
    """Runs in the controller for the length of a test."""

    def __init__(self, socket_path: Path, log_path: Path, mode: str, t0_ns: int) -> None:
        self.socket_path = socket_path
        self.log_fh = log_path.open("a", encoding="utf-8")
        self.state = ResourceState(mode=mode, log=self.log_fh, t0_ns=t0_ns)
        socket_path.unlink(missing_ok=True)
        self.server = _Server(str(socket_path), _Handler)
        self.server.state = self.state  # type: ignore[attr-defined]
        os.chmod(socket_path, 0o600)
        self.thread = threading.Thread(target=self.server.serve_forever, name="resource",
                                       daemon=True)

    def start(self) -> ResourceServer:
        self.thread.start()
        return self

    def worker_config(self) -> dict[str, Any]:
        return {"socket": str(self.socket_path)}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.socket_path.unlink(missing_ok=True)
        with self.state.lock:
            self.state.closed = True
            self.log_fh.close()


class ResourceClient:
    """The worker's side: one blocking request per write."""

    def __init__(self, config: dict[str, Any] | str, timeout_s: float) -> None:
        self.path = config["socket"] if isinstance(config, dict) else config
        self.timeout = timeout_s
        self.sock: socket.socket | None = None
        self.buf = b""

    def write(self, key: str, fence: int | None, process: Any) -> dict[str, Any]:
        """Raises OSError/TimeoutError when the outcome is unknown."""
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(self.timeout)
            self.sock.connect(self.path)
        try:
            self.sock.sendall((json.dumps({"key": key, "fence": fence, "process": process})
                               + "\n").encode())
            while b"\n" not in self.buf:
                chunk = self.sock.recv(4096)
                if not chunk:
                    raise ConnectionError("resource closed the connection")
                self.buf += chunk
        except OSError:
            self.close()
            raise
        line, self.buf = self.buf.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.buf = b""


def start_resource(ctx: ResourceContext) -> ResourceServer:
    """The `fenced` workload's resource, as the runner starts it."""
    return ResourceServer(ctx.workdir / "resource.sock", ctx.run_dir / RESOURCE,
                          ctx.mode, ctx.t0_ns)
