"""The lock client of lockcheck's own memory server (`db/memory_server.py`).

One TCP connection per server and worker, one request line and one reply line per
call, no retries. A connection that failed after its request may have been sent is
dropped: its next reply could answer the lost request, so the next call connects
again.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)

NO_EXPIRY_NS = 2**63 - 1  # the no-TTL variant: a lease the client never sees end


class NotConnected(OSError):
    """The connection could not be made: nothing was sent."""


class Refused(Exception):
    """The server answered ERR: it did nothing."""


class NotOwnerReply(Exception):
    """The server answered NOTOWNER."""


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place this client's failures become Definite or Indefinite."""
    try:
        yield
    except NotOwnerReply as e:
        raise NotOwner("not-owner") from e
    except Refused as e:
        raise Definite(str(e)[:80]) from e
    except NotConnected as e:
        raise Definite(_short(e.__cause__ or e)) from e
    except OSError as e:  # sent, or maybe sent: a reset, a timeout, a closed connection
        raise Indefinite(_short(e)) from e


def _short(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, TimeoutError):
        return "timeout"
    if isinstance(e, ConnectionError | EOFError) or "closed" in str(e):
        return "connection lost"
    return str(e)[:80] or type(e).__name__


class Connection:
    """One line out, one line back; reconnects after any failure."""

    def __init__(self, address: str, port: int, timeout_s: float) -> None:
        self.address, self.port, self.timeout_s = address, port, timeout_s
        self.sock: socket.socket | None = None
        self.buf = b""

    def call(self, line: str) -> str:
        if self.sock is None:
            try:
                self.sock = socket.create_connection((self.address, self.port),
                                                     timeout=self.timeout_s)
            except OSError as e:
                raise NotConnected(str(e)) from e
            self.buf = b""
        try:
            self.sock.sendall(line.encode() + b"\n")
            while b"\n" not in self.buf:
                chunk = self.sock.recv(4096)
                if not chunk:
                    raise ConnectionResetError("connection closed by the server")
                self.buf += chunk
        except OSError:
            self.close()
            raise
        reply, _, self.buf = self.buf.partition(b"\n")
        text = reply.decode("ascii", "replace")
        if text.startswith("ERR"):
            raise Refused(text[4:] or "error")
        return text

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class MemoryLockClient:
    """acquire/renew/release on one memory server."""

    def __init__(self, address: str, port: int, *, ttl_ms: int, op_timeout_s: float,
                 drift: float = 0.01, ttl: bool = True) -> None:
        self.conn = Connection(address, port, op_timeout_s)
        self.ttl_ms, self.drift, self.expires = ttl_ms, drift, ttl

    def _deadline(self, t0: int) -> int:
        return lease_deadline(t0, self.ttl_ms, self.drift) if self.expires else NO_EXPIRY_NS

    def acquire(self, key: str) -> Lease | None:
        token = uuid.uuid4().hex
        t0 = time.monotonic_ns()
        with mapped_errors():
            reply = self.conn.call(f"ACQUIRE {key} {token} {self.ttl_ms}")
        if reply == "BUSY":
            return None
        word, _, fence = reply.partition(" ")
        if word != "OK" or not fence.isdigit():
            raise Indefinite(f"unexpected reply {reply[:40]!r}")
        return Lease(key=key, token=token, fence=int(fence), ttl_ms=self.ttl_ms,
                     valid_until_ns=self._deadline(t0))

    def renew(self, lease: Lease) -> None:
        t0 = time.monotonic_ns()
        self._owned(f"RENEW {lease.key} {lease.token} {self.ttl_ms}")
        lease.valid_until_ns = max(lease.valid_until_ns, self._deadline(t0))

    def release(self, lease: Lease) -> None:
        self._owned(f"RELEASE {lease.key} {lease.token}")

    def _owned(self, request: str) -> None:
        with mapped_errors():
            reply = self.conn.call(request)
            if reply == "NOTOWNER":
                raise NotOwnerReply()
        if reply != "OK":
            raise Indefinite(f"unexpected reply {reply[:40]!r}")

    def close(self) -> None:
        self.conn.close()


def make_clients(config: Mapping[str, object], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per server; each lock name lives on one server, names spread over them."""
    servers = [(str(a), int(p)) for a, p in config["servers"]]  # type: ignore[attr-defined]
    ttl = bool(opts.options.get("ttl", True))
    per_node = [MemoryLockClient(a, p, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s,
                                 drift=opts.drift, ttl=ttl) for a, p in servers]
    return {k: per_node[i % len(per_node)] for i, k in enumerate(keys)}
