"""A localhost TCP server for fake lock servers: the protocol is the caller's.

Each connection is served by `serve_one(conn)` on a thread of its own; the server
stops (and closes every connection) when the block ends, and sets `stop`, which
`serve_one` watches.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def tcp_server(serve_one: Callable[[socket.socket], None],
               stop: threading.Event) -> Iterator[int]:
    """Yields the port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    conns: list[socket.socket] = []

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            # as real servers do: without it a reply written in two pieces waits on the
            # client's delayed ACK (40 ms), longer than a short op timeout's handshake
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(c)
            threading.Thread(target=serve_one, args=(c,), daemon=True).start()

    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        srv.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.close()
        t.join(timeout=2)
