"""The published record on locks, reproduced with real clusters (docs/findings.md,
"The published record").

* Kleppmann's third scenario, a client stopped with its grant's replies unread
  (`client-pause --pause-at acquire`), both ways of antirez's rebuttal: pottery's
  Redlock checks the elapsed time after reading them and refuses the late grant;
  `redlock-no-validity`, which does not, wakes up holding expired keys and overlaps.
* Jepsen's etcd 3.4.3 lock-set: with Jepsen's client discipline (`etcd-jepsen`: one
  member per client, a failed keepalive never stops the section) server pauses lose
  acknowledged adds.
* Jepsen's positive control (lock-etcd-set, `--resource etcd-txn`): the same clients
  and pauses, the sets in etcd and every write guarded by the writer's own lock key:
  the sections still overlap, and no add is lost.
* aphyr's "Redis redux": `WAIT` for one replica does not survive a Sentinel failover
  when that replica stays with the old primary (`redis-sentinel-wait-one`); `WAIT` for
  every replica (`redis-sentinel-wait`) does, in the same cut.
* etcd-io/etcd#11456 in the etcd every run uses: a lock granted on an expired lease,
  which lockcheck's etcd client notices (one member on loopback, no run).

The Redis runs go in two waves of two (each has its own run id and subnet); each test
looks at one. The etcd runs are detections (server pauses hit a member at random):
each is the first of up to three runs that shows its scenario, made one at a time
after every other test.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockcheck.db.etcd import healthy
from lockcheck.history import Op, read_history
from lockcheck.locks.etcd import EtcdLockClient
from tests.conftest import free_ports
from tests.integration.detect import first_showing

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

# One lock name, three clients and short sections: an armed client is granted the lock
# within a second; TTL 1 s and a 2 s pause (2x TTL): its keys expire while it sleeps
# and another client holds the lock when it wakes. 16 s: on a loaded machine the
# workers may take 5 s to start, and a pause comes only once one has held a lock.
PAUSE_AT_ACQUIRE = ("--nemesis", "client-pause", "--pause-at", "acquire", "--keys", "1",
                    "--concurrency", "3", "--hold-ms", "100-300", "--time-limit", "16",
                    "--nemesis-interval", "1", "--quiet", "1")
# Three server pauses of 5 s (= --nemesis-interval) against a 2 s lease (two missed
# once in a suite run: no holder was bound to the paused member), sections of
# 6-10 s: a holder whose member is paused outlives its lease, even when etcd's new
# leader extends every lease on election. Nine clients (three per member) on six
# names: some holder is almost surely bound to whichever member is paused, and the
# free clients on the members that still serve take its name once its lease is gone.
JEPSEN = ("--workload", "lock-set", "--nemesis", "pause", "--nemesis-interval", "5",
          "--ttl-ms", "2000", "--hold-ms", "6000-10000", "--keys", "6", "--concurrency", "9",
          "--time-limit", "32", "--quiet", "1")
# aphyr's "Redis redux": five nodes, and seed 10's first cut of random halves (at about
# 5 s, for 5 s) leaves the primary (n1) with one replica and two clients on one side,
# three Sentinels on the other, which fail over within about 3 s.
REDUX = ("--nodes", "5", "--nemesis", "partition-halves", "--nemesis-interval", "5",
         "--time-limit", "16", "--quiet", "1", "--seed", "10")
RUNS: dict[str, tuple[str, ...]] = {
    "no_validity": ("--backend", "redlock-no-validity", *PAUSE_AT_ACQUIRE),
    "pottery": ("--backend", "redlock", *PAUSE_AT_ACQUIRE),
    "jepsen": ("--backend", "etcd-jepsen", *JEPSEN),
    "jepsen_txn": ("--backend", "etcd-jepsen", "--resource", "etcd-txn", *JEPSEN),
    "wait_one": ("--backend", "redis-sentinel-wait-one", *REDUX),
    "wait_all": ("--backend", "redis-sentinel-wait", *REDUX),
}


# the etcd runs (nine clients each) are not here: they are detections, made alone
WAVES = (("no_validity", "wait_one"), ("pottery", "wait_all"))


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> dict[str, Any]:
    done: dict[str, Any] = module_cli.in_waves(WAVES, RUNS.__getitem__, 240)
    for r in done.values():
        assert r.run_dir is not None and r.code in (0, 1, 2), r.explain()
    return done


def ops_of(r: Any) -> list[Op]:
    return read_history(r.run_dir / "history.jsonl")


def stopped_at_acquire(ops: list[Op]) -> list[Op]:
    """The workers that stopped with a grant's replies unread (their own event)."""
    return [o for o in ops if o.type == "event" and o.f == "stop-at-acquire"]


def test_a_client_without_the_validity_check_overlaps_after_a_pause_at_acquire(
        module_cli: Any, runs: dict[str, Any]) -> None:
    r = runs["no_validity"]
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    ops = ops_of(r)
    stops = stopped_at_acquire(ops)
    assert stops, "no client stopped at acquire"
    # the overlapping section is the one the stopped client entered when it woke
    stopped_workers = {o.worker for o in stops}
    assert any(set(v["workers"]) & stopped_workers for v in me["violations"]), me
    # the service did nothing wrong: the keys had expired before anyone else got them
    assert res["checkers"]["lease-safety"]["valid"] is True, res["checkers"]["lease-safety"]
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_pottery_refuses_the_grant_it_read_too_late(module_cli: Any,
                                                    runs: dict[str, Any]) -> None:
    r = runs["pottery"]
    res = r.results()
    assert res["checkers"]["mutual-exclusion"]["valid"] is True, res["checkers"]
    ops = ops_of(r)
    stops = stopped_at_acquire(ops)
    assert stops, "no client stopped at acquire"
    # each stopped acquire came back refused by pottery's own elapsed-time check
    refused = {(o.process, o.key) for o in ops if o.f == "acquire" and o.type == "fail"
               and o.error == "validity expired"}
    assert refused >= {(o.process, o.key) for o in stops}, (refused, stops)
    assert r.code == 0, r.explain()
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


@pytest.mark.detection
def test_jepsen_client_discipline_loses_updates_under_server_pauses(module_cli: Any) -> None:
    r = first_showing(module_cli, RUNS["jepsen"], lambda r: r.code == 1)
    assert r.code == 1, r.explain()
    checkers = r.results()["checkers"]
    ls = checkers["lock-set"]
    assert ls["valid"] is False and ls["lost_count"] > 0, ls
    assert checkers["mutual-exclusion"]["valid"] is False
    ops = ops_of(r)
    assert any(o.f == "pause" and o.process == "nemesis" for o in ops)
    # the writer that lost the lock had been told: its keepalives failed, it went on
    ignored = [o for o in ops if o.f == "renew" and o.type == "fail"
               and (o.error or "").endswith("(ignored)")]
    assert ignored
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


@pytest.mark.detection
def test_a_write_guarded_by_the_lock_key_loses_nothing(module_cli: Any) -> None:
    r = first_showing(module_cli, RUNS["jepsen_txn"], lambda r: r.code in (0, 1)
                      and r.results()["checkers"]["mutual-exclusion"]["valid"] is False)
    checkers = r.results()["checkers"]
    ls = checkers["lock-set"]
    assert ls["valid"] is True, ls
    # the same pauses made the sections overlap: the guard, not luck, kept the sets
    assert checkers["mutual-exclusion"]["valid"] is False, checkers["mutual-exclusion"]
    final = [o for o in ops_of(r) if o.f == "final-state"]
    assert final and final[-1].value["sets"], "the sets were not read back from etcd"
    assert r.code == 0, r.explain()
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_wait_for_one_replica_does_not_survive_a_failover(module_cli: Any,
                                                          runs: dict[str, Any]) -> None:
    r = runs["wait_one"]
    assert r.code == 1, r.explain()
    checkers = r.results()["checkers"]
    assert checkers["mutual-exclusion"]["valid"] is False, checkers["mutual-exclusion"]
    # the service's fault: granted again while a renewed, acknowledged lease was valid
    ls = checkers["lease-safety"]
    assert ls["valid"] is False and ls["violation_count"] > 0, ls
    cuts = [o.value for o in ops_of(r) if o.f == "start-partition" and o.type == "info"]
    assert cuts and "n1" not in cuts[0]["grudge"]["n2"], cuts  # n1 and n2 on one side
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_wait_for_every_replica_survives_the_same_failover(module_cli: Any,
                                                           runs: dict[str, Any]) -> None:
    r = runs["wait_all"]
    checkers = r.results()["checkers"]
    assert checkers["mutual-exclusion"]["valid"] is True, checkers["mutual-exclusion"]
    assert checkers["lease-safety"]["valid"] is True, checkers["lease-safety"]
    # the same cut happened: the primary with one replica on one side
    cuts = [o.value for o in ops_of(r) if o.f == "start-partition" and o.type == "info"]
    assert cuts and "n1" not in cuts[0]["grudge"]["n2"], cuts
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


# -- etcd-io/etcd#11456 in the etcd lockcheck runs --------------------------------------


@pytest.fixture()
def lone_etcd(tmp_path: Path) -> Iterator[str]:
    """One etcd member on loopback (the binary every etcd run uses), torn down by PID."""
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd not found (apt-get install -y etcd-server)")
    client, peer = free_ports(2)
    c_url, p_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = (tmp_path / "etcd.log").open("w")
    proc = subprocess.Popen(
        [etcd, "--name", "p", "--data-dir", str(tmp_path / "data"),
         "--listen-client-urls", c_url, "--advertise-client-urls", c_url,
         "--listen-peer-urls", p_url, "--initial-advertise-peer-urls", p_url,
         "--initial-cluster", f"p={p_url}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not healthy("127.0.0.1", client):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "etcd.log").read_text()[-2000:]
            time.sleep(0.1)
        yield c_url
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def fixed_11456(version: str) -> bool:
    """etcd-io/etcd#11456 is fixed in 3.4.31 and 3.5.13 (Debian 12 ships 3.4.23, with the
    bug; Debian 13 ships 3.5.16, without)."""
    v = tuple(int(x) for x in version.split("+")[0].split(".")[:3])
    return v >= (3, 5, 13) or (3, 4, 31) <= v < (3, 5, 0)


def test_etcd_grants_a_lock_on_an_expired_lease_and_our_client_notices(
        lone_etcd: str) -> None:
    """etcd-io/etcd#11456: a waiter whose lease expires while it waits is still told it
    has the lock. lockcheck's etcd client reads its lock key right after every grant
    (for the fence) and finds it gone: the lease is marked lost and the section never
    runs. (In a run the client never waits that long: its lock request gets two thirds
    of the op timeout, a fraction of the lease.) Where the server has the fix, the
    waiter is refused instead: no grant at all."""
    from lockcheck.db.etcd import etcd_version

    holder = EtcdLockClient([lone_etcd], ttl_ms=4000, op_timeout_s=2.0)
    waiter = EtcdLockClient([lone_etcd], ttl_ms=2000, op_timeout_s=12.0, keepalive=False)

    def wait() -> None:
        try:
            got["lease"] = waiter.acquire("k")
        except Exception as e:  # the fixed server's refusal, as the client maps it
            got["error"] = e

    try:
        held = holder.acquire("k")
        assert held is not None and held.fence is not None
        got: dict[str, Any] = {}
        t = threading.Thread(target=wait)
        t.start()
        # the waiter's 2 s lease runs out while the holder keeps its own alive
        for _ in range(5):
            time.sleep(1.0)
            holder.renew(held)
        holder.release(held)
        t.join(15)
        assert not t.is_alive(), "the waiter's acquire did not return"
        if fixed_11456(etcd_version()):
            assert got.get("lease") is None, got  # refused, or no lease granted
            return
        lease = got["lease"]
        # the server's answer: granted (no error, no "session is expired")...
        assert lease is not None
        # ...on a lease that no longer exists: no lock key, no fence, lost
        assert lease.lost is True and lease.fence is None
    finally:
        holder.close()
        waiter.close()
