"""`lockcheck serve`: loopback by default, only what is inside the results folder."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import sigint_default

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("serve")
    root = base / "results"
    (root / "redis-mutex-kill" / "20261201T000000").mkdir(parents=True)
    (root / "redis-mutex-kill" / "20261201T000000" / "report.html").write_text("<p>report</p>")
    (root / "redis-mutex-kill" / "latest").symlink_to("20261201T000000")
    (root / "index.html").write_text("<p>matrix</p>")
    (base / "secret.txt").write_text("SECRET-CONTENT")
    (root / "escape").symlink_to(base)  # a link that leads out of the folder
    (root / "escape-file").symlink_to(base / "secret.txt")
    return root


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(sigint_default([sys.executable, "-m", "lockcheck.cli", "serve",
                                         str(site), "--port", "0"]),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=env, start_new_session=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+)/", line)
        assert m, line
        yield m.group(1), int(m.group(2))
    finally:
        p.send_signal(signal.SIGINT)  # our own server, by its PID
        try:
            assert p.wait(timeout=10) == 0
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def get(server: tuple[str, int], path: str) -> tuple[int, bytes]:
    c = http.client.HTTPConnection(*server, timeout=5)
    try:
        c.putrequest("GET", path, skip_accept_encoding=True)  # the path exactly as given
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on `port` (IPv4), from the kernel."""
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if int(p, 16) == port and state == "0A":  # LISTEN
            out.append(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return out


def test_binds_to_loopback_by_default(server: tuple[str, int]) -> None:
    assert server[0] == "127.0.0.1"
    assert listening_addresses(server[1]) == ["127.0.0.1"]


def test_serves_the_folder(server: tuple[str, int]) -> None:
    assert get(server, "/") == (200, b"<p>matrix</p>")
    assert get(server, "/redis-mutex-kill/latest/report.html") == (200, b"<p>report</p>")
    status, body = get(server, "/redis-mutex-kill/")
    assert status == 200 and b"latest" in body  # a listing


@pytest.mark.parametrize("path", ["/../secret.txt", "/redis-mutex-kill/../../secret.txt",
                                  "/%2e%2e/secret.txt", "/x/..%2f..%2fsecret.txt",
                                  "/..\\secret.txt"])
def test_refuses_dot_dot(server: tuple[str, int], path: str) -> None:
    status, body = get(server, path)
    assert status == 400 and b"SECRET" not in body


@pytest.mark.parametrize("path", ["/escape/secret.txt", "/escape-file", "/escape/"])
def test_refuses_symlinks_out_of_the_folder(server: tuple[str, int], path: str) -> None:
    status, body = get(server, path)
    assert status == 403 and b"SECRET" not in body


def test_bad_folder(cli: object, tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = cli("serve", tmp_path / "nope")  # type: ignore[operator]
    assert r.code == 254 and "no such results folder" in r.stderr and time.monotonic() - t0 < 30
