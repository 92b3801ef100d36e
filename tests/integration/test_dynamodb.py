"""DynamoDB locks on dynalite, through the `lockcheck` command, and the stand-in's own
fidelity.

Four runs start together (one dynalite node each, their own run ids and subnets):

* `dynamodb` under `kill`: dynalite is killed and restarted on its LevelDB data; the
  lock stays safe and every lock's fence counter carries on above what it had reached
  (a restart that lost the table would start the fences again at 1, or fail every
  acquire);
* `dynamodb-release-delete` with the `fenced` workload and no fault: each release
  deletes the item, so the next grant's fence is 1 again: the same fence granted
  again and again, and the fenced resource refuses current holders;
* `dynamodb-wallclock` under `clock-bump` of the clients' clocks: a client whose wall
  clock jumped ahead finds every `expires_at` in its past and takes held locks;
* `dynamodb` with the `fenced` workload under `client-pause`: a holder stopped past its
  lease is taken over, wakes inside its section, and the resource refuses its write,
  whose fence is below the new holder's. It depends on a pause landing on a holder
  whose write comes after the takeover: a run that shows no refused write is tried
  again, up to twice more, one at a time (tests/integration/detect.py).

And, against a dynalite of the test's own on loopback: racing conditional writes
(create-if-absent, then take-over-from-a-version) have exactly one winner per item and
the `ADD` counter counts every win, so a double grant in a run is the lock's doing,
never the stand-in's; and the client's takeover rules on that server, each client on
a clock the test sets: the monotonic one (a version must stand a whole TTL) and the
wall-clock recipe's.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockcheck.db.dynalite import PROBE_HEADERS, lists_tables
from lockcheck.history import Op, read_history
from lockcheck.locks import dynamodb as ddb_lock
from lockcheck.locks.api import NotOwner
from lockcheck.servers import program
from tests.conftest import wait_for
from tests.integration.detect import first_showing
from tests.integration.test_redlock import run_all

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

RUNS: dict[str, tuple[str, ...]] = {
    # kills every 2 s of quiet; the restarts come 100 ms later
    "kill": ("--backend", "dynamodb", "--nemesis", "kill", "--time-limit", "12",
             "--nemesis-interval", "2", "--quiet", "2"),
    "release_delete": ("--backend", "dynamodb-release-delete", "--workload", "fenced",
                       "--nemesis", "none", "--time-limit", "8", "--quiet", "1"),
    # one or two of the five clients jump 2x TTL ahead for 2 s, twice or more
    "wallclock": ("--backend", "dynamodb-wallclock", "--nemesis", "clock-bump",
                  "--clock-targets", "clients", "--time-limit", "12",
                  "--nemesis-interval", "2", "--quiet", "2"),
    # pauses of 2x TTL, the first after 1.5 s once the workers hold locks, all over
    # before the quiet second at the end
    "pause_fenced": ("--backend", "dynamodb", "--workload", "fenced", "--nemesis",
                     "client-pause", "--time-limit", "12", "--nemesis-interval", "1.5",
                     "--quiet", "1"),
}


def dynalite_or_skip() -> str:
    path = program("dynalite")
    if not Path(path).exists():
        pytest.skip(f"dynalite is not installed at {path} (lockcheck servers install "
                    "--backend dynamodb)")
    return path


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    dynalite_or_skip()
    yield from run_all(module_cli, RUNS)


def ops_of(r: Any) -> list[Op]:
    return read_history(r.run_dir / "history.jsonl")


def test_a_killed_dynalite_restarts_with_its_locks_and_fences(runs: dict[str, Any]) -> None:
    r = runs["kill"]
    assert r.code == 0, r.explain()
    res = r.results()
    assert res["checkers"]["mutual-exclusion"]["valid"] is True
    assert res["checkers"]["lease-safety"]["valid"] is True
    fe = res["checkers"]["fencing"]
    assert fe["regression_count"] == 0 and fe["duplicate_fence_count"] == 0, fe
    assert res["recovery"]["valid"] is True, res["recovery"]
    ops = ops_of(r)
    restarts = [o.time for o in ops if o.f == "restart" and o.type == "info"]
    kills = [o.time for o in ops if o.f == "kill" and o.type == "info"]
    assert kills and restarts, "no kill and restart in the run"
    # every lock's counter went on from where it was: the grants after the first
    # restart are numbered above every grant before the first kill
    grants = [o for o in ops if o.f == "acquire" and o.type == "ok" and o.fence is not None]
    before: dict[str | None, int] = {}
    after: dict[str | None, int] = {}
    for o in grants:
        if o.time < kills[0]:
            before[o.key] = max(before.get(o.key, 0), int(o.fence or 0))
        elif o.time > restarts[0]:
            after[o.key] = min(after.get(o.key, 1 << 62), int(o.fence or 0))
    both = set(before) & set(after)
    assert both, (before, after)
    assert all(after[k] > before[k] for k in both), (before, after)
    assert r.test_json()["versions"]["dynalite"] == "4.0.0"


def test_release_by_delete_sends_fences_back_to_one(runs: dict[str, Any]) -> None:
    r = runs["release_delete"]
    assert r.code == 1, r.explain()
    res = r.results()
    assert res["stats"]["faults"] == 0
    fe = res["checkers"]["fencing"]
    # every grant after a release got fence 1 again: the same token twice, per lock
    assert fe["duplicate_fence_count"] > 0, fe
    # current holders' writes refused because their fence went back: lost work
    assert fe["saves_regressed_fence"] > 0 and fe["stale_accepted_count"] == 0, fe
    # the lock itself held: it is the fence that is broken
    assert res["checkers"]["mutual-exclusion"]["valid"] is True
    ones = [o for o in ops_of(r) if o.f == "acquire" and o.type == "ok" and o.fence == 1]
    assert len(ones) > len({o.key for o in ones})  # some lock granted fence 1 again


def test_a_client_clock_ahead_takes_held_locks(runs: dict[str, Any]) -> None:
    r = runs["wallclock"]
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    # granted while the holder's lease was provably valid: the service did what the
    # recipe asked, on a wall clock that was wrong
    ls = res["checkers"]["lease-safety"]
    assert ls["valid"] is False and ls["violation_count"] > 0
    bumps = [o for o in ops_of(r) if o.f == "bump-clock" and o.type == "info"
             and isinstance(o.value, dict) and o.value.get("targets")]
    assert bumps, "no client clock was moved"
    assert all(t.startswith("c") for o in bumps for t in o.value["targets"])
    # an overlap involves a client whose clock was moved (worker i runs on host c<i>)
    bumped = {int(t[1:]) for o in bumps for t in o.value["targets"]}
    assert any(bumped & set(v["workers"]) for v in me["violations"]), me["violations"][:3]
    assert r.test_json()["clock_targets"] == "clients"


def refused_a_stale_write(r: Any) -> bool:
    return bool(r.results()["checkers"]["fencing"]["saves_stale_holder"] > 0)


def test_the_fence_stops_a_paused_holders_write(module_cli: Any,
                                                runs: dict[str, Any]) -> None:
    r = runs["pause_fenced"]
    if not refused_a_stale_write(r):  # no pause met a holder that wrote late: again
        r = first_showing(module_cli, RUNS["pause_fenced"], refused_a_stale_write,
                          tries=2, timeout=150)
    assert r.code == 1, r.explain()
    res = r.results()
    assert res["summary"].startswith("the lock failed, the resource held"), res["summary"]
    fe = res["checkers"]["fencing"]
    assert fe["saves_stale_holder"] > 0, fe  # the woken holder's write was refused
    assert fe["resource_valid"] is True and fe["stale_accepted_count"] == 0, fe
    assert fe["regression_count"] == 0 and fe["duplicate_fence_count"] == 0, fe
    # the takeover came after the paused holder's lease had ended: the lock kept its
    # promise, the pause is what no lock can prevent
    assert res["checkers"]["lease-safety"]["valid"] is True, res["checkers"]["lease-safety"]
    assert res["checkers"]["mutual-exclusion"]["violation_count"] > 0
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


# -- the stand-in's fidelity -------------------------------------------------------------

RACERS, ITEMS = 8, 100


@pytest.fixture
def dynalite(tmp_path: Path) -> Iterator[str]:
    """A dynalite of this test's own on loopback, with its data in tmp_path; stopped
    by its PID."""
    binary = dynalite_or_skip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "dynalite.log").open("w")
    proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port),
                             "--path", str(tmp_path / "data"), "--createTableMs", "0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: lists_tables("127.0.0.1", port), 30, "dynalite to answer",
                 detail=lambda: (tmp_path / "dynalite.log").read_text())
        endpoint = f"http://127.0.0.1:{port}"
        ddb_lock.create_table({"endpoint": endpoint})
        yield endpoint
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()


def update_item(conn: http.client.HTTPConnection, request: dict[str, Any]) -> int | None:
    """One UpdateItem over DynamoDB's JSON protocol (what boto3 sends, without its
    per-request cost, so the racers' writes arrive together): the fence granted, or
    None when the condition failed."""
    headers = {**PROBE_HEADERS, "X-Amz-Target": "DynamoDB_20120810.UpdateItem"}
    conn.request("POST", "/", body=json.dumps(request).encode(), headers=headers)
    r = conn.getresponse()
    reply = json.loads(r.read())
    if r.status == 400 and str(reply.get("__type", "")).endswith(
            "#ConditionalCheckFailedException"):
        return None
    assert r.status == 200, reply
    return int(reply["Attributes"]["fence"]["N"])


def race(port: int, requests: list[list[dict[str, Any]]]) -> list[list[int]]:
    """Each racer sends its list of UpdateItems on a connection of its own, all racers
    released at once; per item, the fences granted (one per winner)."""
    barrier = threading.Barrier(len(requests))
    wins: list[list[int]] = [[] for _ in range(len(requests[0]))]
    lock = threading.Lock()
    failures: list[BaseException] = []

    def racer(mine: list[dict[str, Any]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            barrier.wait(30)
            for i, request in enumerate(mine):
                fence = update_item(conn, request)
                if fence is not None:
                    with lock:
                        wins[i].append(fence)
        except BaseException as e:  # surfaced below
            failures.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=racer, args=(mine,)) for mine in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures[:3]
    return wins


def test_racing_conditional_writes_on_dynalite_have_one_winner(dynalite: str) -> None:
    port = int(dynalite.rsplit(":", 1)[1])
    names = [f"race-{uuid.uuid4().hex[:8]}" for _ in range(ITEMS)]
    # create-if-absent: every racer asks for every item, the same item at the same time
    firsts = [[ddb_lock.acquire_request(n, f"r{r}-{n}", uuid.uuid4().hex) for n in names]
              for r in range(RACERS)]
    wins = race(port, firsts)
    assert all(w == [1] for w in wins), wins
    # take-over-from-a-version: each item's version as it is now, raced for again
    client = ddb_lock.dynamodb_client(dynalite, 30.0)
    versions = [client.get_item(TableName=ddb_lock.TABLE, Key={"name": {"S": n}},
                                ConsistentRead=True)["Item"]["rvn"]["S"] for n in names]
    client.close()
    seconds = [[ddb_lock.acquire_request(n, f"s{r}-{n}", uuid.uuid4().hex, seen=v)
                for n, v in zip(names, versions, strict=True)] for r in range(RACERS)]
    wins = race(port, seconds)
    assert all(w == [2] for w in wins), wins  # one winner each; the counter saw both


# -- the takeover rules on a real server, each client on a clock of the test's ----------

MS = 1_000_000


class Clock:
    def __init__(self, now: float = 0) -> None:
        self.now = now

    def __call__(self) -> Any:
        return self.now


def lock_client(endpoint: str, **kw: Any) -> ddb_lock.DynamoDBLockClient:
    return ddb_lock.DynamoDBLockClient(ddb_lock.dynamodb_client(endpoint, 10.0),
                                       ttl_ms=1000, **kw)


def test_a_waiter_takes_over_only_a_version_that_stood_a_whole_ttl(dynalite: str) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    a, b = Clock(), Clock()
    holder = lock_client(dynalite, monotonic_ns=a)
    waiter = lock_client(dynalite, monotonic_ns=b)
    lease = holder.acquire(key)
    assert lease is not None and lease.fence == 1
    assert waiter.acquire(key) is None  # sees the grant's version at b = 0
    b.now = 999 * MS
    assert waiter.acquire(key) is None
    holder.renew(lease)  # a new version: the waiter must start again
    b.now = 1000 * MS
    assert waiter.acquire(key) is None  # the takeover is refused; it reads the renewal
    b.now = 1999 * MS
    assert waiter.acquire(key) is None
    b.now = 2000 * MS  # the renewal's version stood a whole TTL: the holder is gone
    taken = waiter.acquire(key)
    assert taken is not None and taken.fence == 2
    with pytest.raises(NotOwner):
        holder.renew(lease)
    assert lease.lost
    with pytest.raises(NotOwner):
        holder.release(lease)
    waiter.release(taken)
    again = holder.acquire(key)  # free, and the counter kept
    assert again is not None and again.fence == 3
    holder.close()
    waiter.close()


def test_the_wall_clock_recipe_trusts_the_takers_clock(dynalite: str) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    holder = lock_client(dynalite, expiry="wallclock", wall=Clock(1_000_000.0))
    true_taker = lock_client(dynalite, expiry="wallclock", wall=Clock(1_000_000.5))
    fast_taker = lock_client(dynalite, expiry="wallclock", wall=Clock(1_000_002.0))
    lease = holder.acquire(key)  # expires_at = 1_000_001.0 by the holder's clock
    assert lease is not None
    assert true_taker.acquire(key) is None
    taken = fast_taker.acquire(key)  # 2 s ahead: the holder's expiry is in its past
    assert taken is not None and taken.fence == 2
    assert not lease.lost  # and the holder was told nothing
    for c in (holder, true_taker, fast_taker):
        c.close()
