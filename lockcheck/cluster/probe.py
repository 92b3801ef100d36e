"""Readiness: wait until a service answers an active probe (never by grepping logs)."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass


class NotReady(RuntimeError):
    """A service did not come up in time; the message carries its log tail."""


def wait_until(ready: Callable[[], bool], *, timeout: float, what: str,
               alive: Callable[[], bool] | None = None,
               tail: Callable[[], str] | None = None, interval: float = 0.05) -> float:
    """Poll `ready()` until true; return the seconds it took.

    Stops early when `alive()` says the process is gone. The error names `what` and
    carries `tail()` (the last log lines), so a failed start explains itself.
    """
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        try:
            if ready():
                return time.monotonic() - t0
        except OSError:
            pass
        if alive is not None and not alive():
            why = "exited"
            break
        if time.monotonic() >= deadline:
            why = f"did not become ready in {timeout:g} s"
            break
        time.sleep(interval)
    log = tail() if tail is not None else ""
    raise NotReady(f"{what} {why}" + (f"; log tail:\n{log}" if log else ""))


def tcp_exchange(address: str, port: int, request: bytes, *, timeout: float = 0.5,
                 limit: int = 4096, until: bytes | None = None) -> bytes:
    """Send `request` on a fresh TCP connection and return what comes back: until the
    peer closes, `until` is seen, `limit` bytes or `timeout`. Raises OSError when the
    connection cannot be made."""
    out = b""
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.settimeout(timeout)
        if request:
            s.sendall(request)
        try:
            while len(out) < limit:
                chunk = s.recv(limit - len(out))
                if not chunk:
                    break
                out += chunk
                if until is not None and until in out:
                    break
        except OSError:
            pass
    return out


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def http_answer(address: str, port: int, method: str, path: str, *, body: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float = 1.0) -> Answer | None:
    """One HTTP request's answer, or None if nothing answered."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def tail_lines(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])
