"""L10-L13 of docs/findings.md: python-dynamodb-lock 0.9.1, unmodified, on dynalite.

Two `lockcheck test` runs under `client-pause`, started together when the module
starts (each with its own run id and subnet), the same seed and long critical
sections, so that a paused holder wakes with work left:

* L10 `python-dynamodb-lock-no-callback` (`app_callback=None`, the library's default):
  a woken holder whose lock was taken over is told nothing and works on to the end
  of its section beside the next holder; with the adapter's callback
  (`python-dynamodb-lock`) every woken holder is told LOCK_STOLEN and stops at once.

And, against a dynalite of the module's own on loopback, the library driven
directly (what a `lockcheck` run cannot show):

* L11 `with lock:` swallows every exception raised inside the block;
* L12 `app_callback=None`: the LOCK_STOLEN the heartbeat thread finds is submitted to
  the executor as a call of `None` (a TypeError nobody sees), and `release_lock(...,
  best_effort=False)` of that stolen lock returns as if it had released it;
* L13 a heartbeat whose reply is slow: the library stamps its success when the reply
  arrives, and its danger check waits on the same lock as the heartbeat in flight, so
  a waiter takes the lock over while the holder is never warned, and the holder's
  last heartbeat is stamped after the takeover.

A holder's threads are stopped (L12) by holding its lock's own `thread_lock` from the
test, which the heartbeat and the danger check each take first: what a paused
process would do to them, without pausing the test.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLock, DynamoDBLockClient

from lockcheck.db.dynalite import lists_tables
from lockcheck.history import Op, read_history
from lockcheck.locks import python_dynamodb_lock as pdl
from lockcheck.servers import program
from tests.conftest import missing_prerequisite, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PAUSED = ("--backend", "dynamodb", "--nemesis", "client-pause", "--keys", "1",
          "--hold-ms", "5000-6000", "--time-limit", "20", "--nemesis-interval", "1",
          "--seed", "1")
RUNS: dict[str, tuple[str, ...]] = {
    "no_callback": (*PAUSED, "--client", "python-dynamodb-lock-no-callback"),
    "callback": (*PAUSED, "--client", "python-dynamodb-lock"),
}
LEASE = datetime.timedelta(seconds=1)


def dynalite_or_skip() -> str:
    path = program("dynalite")
    if not Path(path).exists():
        pytest.skip(f"dynalite is not installed at {path} (lockcheck servers install "
                    "--backend dynamodb)")
    return path


# -- the two runs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def started(module_cli: Any) -> dict[str, Any]:
    """The runs, started (none where a cluster cannot be: their tests skip)."""
    dynalite_or_skip()
    if missing_prerequisite() is not None:
        return {}
    return {name: module_cli.start("test", *argv) for name, argv in RUNS.items()}


@pytest.fixture(scope="module")
def runs(module_cli: Any, started: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if not started:
        pytest.skip(f"needs_root_netns: {missing_prerequisite()}")
    done = {name: p.wait(timeout=150) for name, p in started.items()}
    for name, r in done.items():
        assert r.run_dir is not None and r.code in (0, 1), f"{name}: {r.explain()}"
    yield done
    module_cli.assert_no_leftovers(None)


# -- the library against a dynalite of the module's own ----------------------------------


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory,
             started: dict[str, Any]) -> Iterator[str]:
    """dynalite on loopback, in memory, with the library's table; stopped by its PID.
    The two runs start first, and go on while these tests drive the library."""
    binary = dynalite_or_skip()
    folder = tmp_path_factory.mktemp("dynalite")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (folder / "dynalite.log").open("w")
    proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port),
                             "--createTableMs", "0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: lists_tables("127.0.0.1", port), 30, "dynalite to answer",
                 detail=lambda: (folder / "dynalite.log").read_text())
        url = f"http://127.0.0.1:{port}"
        pdl.create_table(url)
        yield url
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()


class Recording(ThreadPoolExecutor):
    """The library's executor for app callbacks, keeping what it was given."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.calls: list[tuple[Any, str, Future[Any]]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        f = super().submit(fn, *args, **kwargs)
        self.calls.append((fn, str(args[0]) if args else "", f))
        return f


def library(url: str, *, timeout_s: float = 2.0, executor: Any = None,
            safe: datetime.timedelta = LEASE * 2 / 3) -> Any:
    """The adapter's settings: heartbeat every lease/3, in danger after 2/3 of it."""
    return DynamoDBLockClient(pdl.dynamodb_resource(url, timeout_s), table_name=pdl.TABLE,
                              lease_duration=LEASE, heartbeat_period=LEASE / 3,
                              safe_period=safe, app_callback_executor=executor)


def key(name: str) -> str:
    return f"{name}-{time.monotonic_ns()}"


def item(client: Any, k: str) -> dict[str, Any] | None:
    got: dict[str, Any] | None = client._dynamodb_table.get_item(
        Key={"lock_key": k, "sort_key": "-"}, ConsistentRead=True).get("Item")
    return got


def test_l11_with_lock_swallows_an_exception_raised_inside(endpoint: str) -> None:
    c = library(endpoint)
    k = key("with")
    try:
        reached = False
        with c.acquire_lock(k):
            reached = True
            raise RuntimeError("the fenced write was refused")
        # the line after the block runs: the exception is gone
        assert reached
        assert item(c, k) is None  # released on the way out
    finally:
        c.close()


def take_over(url: str, k: str) -> tuple[Any, Any, float]:
    """A second client waits for `k` and takes it over: (client, lock, when)."""
    c = library(url)
    lock = c.acquire_lock(k, retry_period=datetime.timedelta(milliseconds=100),
                          retry_timeout=datetime.timedelta(seconds=10))
    return c, lock, time.monotonic()


def test_l12_no_callback_tells_nobody_and_the_stolen_lock_releases_quietly(
        endpoint: str) -> None:
    told: list[str] = []
    executors = {"none": Recording(), "callback": Recording()}
    for mode, ex in executors.items():
        # no danger check in the way: the heartbeat, not the check, finds the steal
        a = library(endpoint, executor=ex, safe=datetime.timedelta(minutes=1))
        k = key(mode)
        cb = None if mode == "none" else (lambda code, lock: told.append(code))
        lock = a.acquire_lock(k, app_callback=cb)
        b: Any = None
        try:
            with lock.thread_lock:  # the holder's heartbeat and check stop here
                b, theirs, _ = take_over(endpoint, k)
            wait_for(lambda: lock.status == DynamoDBLock.INVALID, 10,  # noqa: B023
                     "the heartbeat to find the lock stolen")
            wait_for(lambda: bool(ex.calls) and ex.calls[-1][2].done(), 10,  # noqa: B023
                     "the callback to run")
            fn, code, fut = ex.calls[-1]
            assert code == "LOCK_STOLEN"
            if mode == "none":
                assert fn is None and isinstance(fut.exception(), TypeError)
                # the caller asks to hear of errors, and hears none
                assert a.release_lock(lock, best_effort=False) is None
                got = item(b, k)
                assert got is not None and got["record_version_number"] == \
                    theirs.record_version_number
            else:
                assert told == ["LOCK_STOLEN"] and fut.exception() is None
        finally:
            a.close()
            if b is not None:
                b.close()
            ex.shutdown(wait=False)


class SlowReplies:
    """A TCP relay on loopback to dynalite that holds every reply for `delay` s once
    `slow` is set (requests go through at once)."""

    def __init__(self, url: str, delay: float) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.delay = delay
        self.slow = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while not self.closed:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target)
                threading.Thread(target=self._pipe, args=(client, server, False),
                                 daemon=True).start()
                threading.Thread(target=self._pipe, args=(server, client, True),
                                 daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if replies and self.slow.is_set():
                    time.sleep(self.delay)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.closed = True
        self.listener.close()


def test_l13_a_slow_heartbeat_reply_hides_the_takeover_and_is_stamped_after_it(
        endpoint: str) -> None:
    relay = SlowReplies(endpoint, delay=3 * LEASE.total_seconds())
    told: list[tuple[str, float]] = []
    a = library(relay.url, timeout_s=10.0)  # a reply may take its time
    k = key("slow")
    lock = a.acquire_lock(k, app_callback=lambda code, _: told.append((code,
                                                                       time.monotonic())))
    b: Any = None
    try:
        relay.slow.set()  # the next heartbeat's reply is held 3 s; its write is applied
        b, _, granted = take_over(endpoint, k)
        relay.slow.clear()
        # the holder's last heartbeat stopped being safe (2/3 of the lease) before the
        # waiter took over, and still no one warned it: the check waits on the lock's
        # thread_lock, which the heartbeat in flight holds
        assert not [c for c, t in told if t <= granted], told
        wait_for(lambda: any(c == "LOCK_STOLEN" for c, _ in told), 15, "LOCK_STOLEN")
        # the slow heartbeat was stamped a success when its reply came, after the
        # takeover: by its own clock the holder had a fresh heartbeat then
        assert lock.last_updated_time > granted, (lock.last_updated_time, granted)
        stolen_at = next(t for c, t in told if c == "LOCK_STOLEN")
        assert stolen_at > granted
    finally:
        a.close()
        if b is not None:
            b.close()
        relay.close()


# -- the two runs, examined ----------------------------------------------------------


def woken_holders(r: Any) -> list[tuple[int, str, float]]:
    """Each holder a pause stopped inside its section: (process, its exit reason, ms
    from its resume to its exit)."""
    ops: list[Op] = read_history(r.run_dir / "history.jsonl")
    nemesis = [o for o in ops if o.process == "nemesis" and o.type == "info"]
    out = []
    for p in (o for o in nemesis if o.f == "pause-client"):
        proc = p.value["process"]
        resumed = next((o.time for o in nemesis if o.f == "resume-client"
                        and o.time > p.time), None)
        exit_ = next((o for o in ops if o.process == proc and o.f == "exit"
                      and o.time >= p.time), None)
        if resumed is not None and exit_ is not None:
            out.append((proc, exit_.value["reason"], (exit_.time - resumed) / 1e6))
    return out


def worked_on_untold(r: Any) -> list[tuple[int, str, float]]:
    """Woken holders that worked on for a second or more and left with `done`."""
    return [w for w in woken_holders(r) if w[1] == "done" and w[2] >= 1000]


@pytest.mark.needs_root_netns
def test_l10_without_a_callback_a_woken_holder_works_on_beside_the_next(
        runs: dict[str, Any]) -> None:
    r = runs["no_callback"]
    untold = worked_on_untold(r)
    assert untold, (woken_holders(r), r.explain())
    me = r.results()["checkers"]["mutual-exclusion"]
    assert me["valid"] is False
    overlapping = {p for v in me["violations"] for p in v["processes"]}
    assert {p for p, _, _ in untold} <= overlapping, (untold, me["violations"][:3])


@pytest.mark.needs_root_netns
def test_l10_with_the_adapters_callback_every_woken_holder_stops_at_once(
        runs: dict[str, Any]) -> None:
    r = runs["callback"]
    woken = woken_holders(r)
    assert woken, r.explain()
    assert not worked_on_untold(r), woken
    assert any(reason == "not-owner" for _, reason, _ in woken), woken
