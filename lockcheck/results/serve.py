"""`lockcheck serve`: the results folder over HTTP, for browsing reports.

Standard library only. It binds to 127.0.0.1 unless told otherwise, and serves only
what lies inside the folder: a path with a `..` segment is refused (400), and so is
anything that resolves outside the folder through a symlink (403). `latest` links
that point inside the folder work as usual.
"""

from __future__ import annotations

import os
import sys
import urllib.parse
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from lockcheck.errors import BadInput

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8080


def inside(root: Path, candidate: str) -> bool:
    """Whether `candidate`, with every symlink resolved, is `root` or below it."""
    real = os.path.realpath(candidate)
    return real == str(root) or real.startswith(str(root) + os.sep)


class ResultsHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler confined to one folder, with quiet logging."""

    root: Path  # resolved; set by make_server

    def __init__(self, *args: Any, root: Path, **kwargs: Any) -> None:
        self.root = root
        super().__init__(*args, directory=str(root), **kwargs)

    def _refusal(self) -> tuple[HTTPStatus, str] | None:
        path = urllib.parse.urlsplit(self.path).path
        decoded = urllib.parse.unquote(path)
        segments = decoded.replace("\\", "/").split("/")
        if ".." in segments or "\0" in decoded:
            return HTTPStatus.BAD_REQUEST, "no '..' in paths"
        if not inside(self.root, self.translate_path(self.path)):
            return HTTPStatus.FORBIDDEN, "outside the results folder"
        return None

    def send_head(self) -> Any:
        refused = self._refusal()
        if refused is not None:
            self.send_error(*refused)
            return None
        return super().send_head()

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"serve: {self.address_string()} {format % args}\n")


def make_server(root: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
                ) -> ThreadingHTTPServer:
    if not root.is_dir():
        raise BadInput(f"{root}: no such results folder")
    real = Path(os.path.realpath(root))
    try:
        return ThreadingHTTPServer((host, port), partial(ResultsHandler, root=real))
    except OSError as e:
        raise BadInput(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def serve(root: Path, host: str, port: int, out: IO[str]) -> int:
    server = make_server(root, host, port)
    h, p = server.server_address[:2]
    h = h.decode() if isinstance(h, bytes) else h
    index = "" if not (root / "index.html").exists() else " (the comparison: index.html)"
    out.write(f"serving {root} on http://{h}:{p}/{index}; Ctrl-C stops\n")
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
