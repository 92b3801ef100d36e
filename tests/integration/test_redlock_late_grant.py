"""Kleppmann's third scenario at the client's stop point, without a run: three
redis-servers on loopback and lockcheck's Redlock client with a hook that stalls where
`client-pause --pause-at acquire` stops the worker (a quorum of grants in, unread).

The stall here is a sleep of one executor thread, harder than the SIGSTOP of a run
(which stops every thread): the other masters' grants must still wait for it, or
pottery's own thread counts a quorum without the stalled answer, checks the elapsed
time before the stall ends and takes a grant that has expired by the time it is used.
That race made one run in a suite take a late grant (the published record's pottery
test).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from lockcheck.locks.api import Definite
from lockcheck.locks.redlock import RedlockClient
from tests.conftest import free_ports

pytestmark = pytest.mark.integration

TTL_MS = 500


@pytest.fixture()
def masters(tmp_path: Path) -> Iterator[list[tuple[str, int]]]:
    """Three redis-servers on loopback, ended by PID."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server not found (apt-get install -y redis-server)")
    ports = free_ports(3)
    procs = [subprocess.Popen([server, "--port", str(p), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p in ports]
    try:
        for p, proc in zip(ports, procs, strict=True):
            deadline = time.monotonic() + 20
            while True:
                try:
                    redis.Redis(port=p, socket_timeout=1).ping()
                    break
                except redis.ConnectionError:
                    assert proc.poll() is None and time.monotonic() < deadline
                    time.sleep(0.05)
        yield [("127.0.0.1", p) for p in ports]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def _stalling(calls: list[str]) -> Callable[[str], None]:
    def hook(key: str) -> None:
        calls.append(key)
        time.sleep(2 * TTL_MS / 1000)
    return hook


def test_a_grant_read_after_its_ttl_is_refused(masters: list[tuple[str, int]]) -> None:
    calls: list[str] = []
    client = RedlockClient(masters, ttl_ms=TTL_MS, op_timeout_s=3.0,
                           at_grant_reply=_stalling(calls))
    try:
        with pytest.raises(Definite, match="validity expired"):
            client.acquire("k")
        assert calls == ["k"]  # once, at the quorum-th grant
    finally:
        client.close()


def test_without_the_validity_check_the_late_grant_is_taken(
        masters: list[tuple[str, int]]) -> None:
    calls: list[str] = []
    client = RedlockClient(masters, ttl_ms=TTL_MS, op_timeout_s=3.0, validity=False,
                           at_grant_reply=_stalling(calls))
    try:
        lease = client.acquire("k")
        assert lease is not None and calls == ["k"]
    finally:
        client.close()
