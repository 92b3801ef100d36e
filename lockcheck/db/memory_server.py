"""A small lock server of lockcheck's own, for runs without root (`--backend memory`).

One process, one line per request and per reply on a TCP socket:

    ACQUIRE <name> <owner> <ttl_ms>  ->  OK <fence> | BUSY
    RENEW <name> <owner> <ttl_ms>    ->  OK | NOTOWNER
    RELEASE <name> <owner>           ->  OK | NOTOWNER
    PING                             ->  PONG
    anything else                    ->  ERR <why>

Every grant gets the next value of one counter (its fence). Locks and the counter
live in memory only: a server killed and started again comes back empty, its fences
counting from 1 again, as a Redis without persistence does. `--no-ttl` makes locks
last until released, whatever TTL the client asks for. `--no-exclusion` grants every
acquire at once (each with the next fence) and every renew and release: no lock at
all in front of the resource, for runs that test what the resource does alone.

It is the database of Jepsen's no-op tests made real enough to fail: correct while it
runs, and forgetful across a restart.
"""

from __future__ import annotations

import argparse
import os
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Held:
    owner: str
    expires: float | None  # wall-clock seconds; None: until released


@dataclass
class LockTable:
    """The server's state; every request runs under one mutex."""

    ttl: bool = True
    exclusion: bool = True  # False: every acquire is granted (no lock at all)
    # The wall clock, not time.monotonic(): leases expire by the clock that libfaketime
    # moves (it fakes only the wall clock), so a clock fault shows what a server does
    # that expires leases by its own clock, as Redis and the postgres lease table do.
    clock: Callable[[], float] = time.time
    fence: int = 0
    locks: dict[str, Held] = field(default_factory=dict)
    mutex: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return self.clock()

    def _holder(self, name: str) -> Held | None:
        held = self.locks.get(name)
        if held is not None and held.expires is not None and held.expires <= self.now():
            del self.locks[name]
            return None
        return held

    def _expiry(self, ttl_ms: int) -> float | None:
        return self.now() + ttl_ms / 1000.0 if self.ttl else None

    def acquire(self, name: str, owner: str, ttl_ms: int) -> int | None:
        with self.mutex:
            if self.exclusion and self._holder(name) is not None:
                return None
            self.fence += 1
            self.locks[name] = Held(owner, self._expiry(ttl_ms))
            return self.fence

    def renew(self, name: str, owner: str, ttl_ms: int) -> bool:
        with self.mutex:
            if not self.exclusion:
                return True
            held = self._holder(name)
            if held is None or held.owner != owner:
                return False
            held.expires = self._expiry(ttl_ms)
            return True

    def release(self, name: str, owner: str) -> bool:
        with self.mutex:
            if not self.exclusion:
                return True
            held = self._holder(name)
            if held is None or held.owner != owner:
                return False
            del self.locks[name]
            return True


def answer(table: LockTable, line: str) -> str:
    """The reply to one request line (without its newline)."""
    parts = line.split()
    if not parts:
        return "ERR empty request"
    cmd, args = parts[0].upper(), parts[1:]
    try:
        if cmd == "PING" and not args:
            return "PONG"
        if cmd == "ACQUIRE" and len(args) == 3:
            fence = table.acquire(args[0], args[1], _ttl(args[2]))
            return "BUSY" if fence is None else f"OK {fence}"
        if cmd == "RENEW" and len(args) == 3:
            return "OK" if table.renew(args[0], args[1], _ttl(args[2])) else "NOTOWNER"
        if cmd == "RELEASE" and len(args) == 2:
            return "OK" if table.release(args[0], args[1]) else "NOTOWNER"
    except ValueError as e:
        return f"ERR {e}"
    return f"ERR unknown request {cmd.lower()} with {len(args)} argument(s)"


def _ttl(text: str) -> int:
    ttl = int(text)
    if ttl <= 0:
        raise ValueError(f"ttl_ms must be positive, got {ttl}")
    return ttl


class Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        for raw in self.rfile:
            try:
                line = raw.decode("ascii").strip()
            except UnicodeDecodeError:
                line = "\x00"  # answered as an unknown request
            reply = answer(self.server.table, line)
            self.wfile.write(reply.encode() + b"\n")
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True  # a restart after a kill binds the same port at once

    def __init__(self, address: tuple[str, int], table: LockTable) -> None:
        self.table = table
        super().__init__(address, Handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lockcheck.db.memory_server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data-dir", type=Path, required=True,
                    help="where the server writes its pid file (it keeps no data)")
    ap.add_argument("--no-ttl", action="store_true",
                    help="locks last until released, whatever TTL is asked for")
    ap.add_argument("--no-exclusion", action="store_true",
                    help="grant every acquire, renew and release: no lock at all")
    a = ap.parse_args(argv)
    table = LockTable(ttl=not a.no_ttl, exclusion=not a.no_exclusion)
    with Server((a.host, a.port), table) as server:
        a.data_dir.mkdir(parents=True, exist_ok=True)
        (a.data_dir / "server.pid").write_text(f"{os.getpid()}\n")
        host, port = str(server.server_address[0]), int(server.server_address[1])
        # the port is read from this line when --port 0 let the system choose it
        print(f"memory lock server on {host}:{port} (ttl {'on' if table.ttl else 'off'})",
              flush=True)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
