"""One JSON object per line over a Unix socket: how workers reach the stores the
controller runs (the protected resource, the lock-set store).

A path socket crosses network namespaces, so no partition ever cuts a client from
them: the store itself is never the fault under test.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TextIO

Handler = Callable[[dict[str, Any]], dict[str, Any]]  # request -> reply


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        serve: Handler = self.server.serve  # type: ignore[attr-defined]
        for line in self.rfile:
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("expected a JSON object")
                reply = serve(req)
            except (ValueError, KeyError, TypeError) as e:
                reply = {"error": str(e)}
            self.wfile.write((json.dumps(reply) + "\n").encode())
            self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class JsonLineServer:
    """Serves `handle` on a Unix socket, on a thread of the controller."""

    def __init__(self, socket_path: Path, handle: Handler, name: str) -> None:
        self.socket_path = socket_path
        socket_path.unlink(missing_ok=True)
        self.server = _Server(str(socket_path), _Handler)
        self.server.serve = handle  # type: ignore[attr-defined]
        os.chmod(socket_path, 0o600)
        self.thread = threading.Thread(target=self.server.serve_forever, name=name,
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.socket_path.unlink(missing_ok=True)


class StoreState(Protocol):
    lock: threading.Lock
    closed: bool


class LoggedStore:
    """A store the controller runs for a test (a `workloads.api.Resource`): served on a
    Unix socket, its log file open until it stops. Subclasses set `state` and `handle`."""

    state: StoreState

    def __init__(self, socket_path: Path, log_path: Path, name: str) -> None:
        self.socket_path = socket_path
        self.log_fh: TextIO = log_path.open("a", encoding="utf-8")
        self.server = JsonLineServer(socket_path, self.handle, name)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def start(self) -> LoggedStore:
        self.server.start()
        return self

    def worker_config(self) -> dict[str, Any]:
        return {"socket": str(self.socket_path)}

    def stop(self) -> None:
        self.server.stop()
        with self.state.lock:
            self.state.closed = True
            self.log_fh.close()


class JsonLineClient:
    """The worker's side: one blocking request at a time, one connection kept."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout = timeout_s
        self.sock: socket.socket | None = None
        self.buf = b""

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Raises OSError/TimeoutError when the outcome is unknown."""
        if self.sock is None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(self.timeout)
            self.sock.connect(self.path)
        try:
            self.sock.sendall((json.dumps(request) + "\n").encode())
            while b"\n" not in self.buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the store closed the connection")
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
