"""PostgreSQL, real servers: the database's faults, the lock SQL, and the findings.

Part 1 drives `PostgresDB` and the lock clients directly against one server in a
namespace (module-scoped): the lease table's grants, expiry and fences; the advisory
lock as `pg_locks` sees it, and keyed by Python's salted `hash()` (two processes, two
keys: `postgres-advisory-hash`); a crash that leaves no shared memory behind; a pause
of every server process; the termination of the holders' sessions.

Part 2 runs the `lockcheck` command once per finding (module-scoped) and looks at
what the checkers say:

* `postgres-advisory` + `failover`: the holder's session is terminated while it works;
  it learns at its next query, after another client took the lock (overlap).
* `postgres` + `client-pause`: the paused holder's lease expires by the server's clock,
  another client takes the lock, the holder wakes inside its section (overlap); with
  the `fenced` workload the resource rejects its stale write (saves, none accepted).
* `postgres-advisory-hash` with no fault: the workers lock different integers for one
  name, and the checkers see two holders inside the same lock.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lockcheck.cluster.faketime import runs_libfaketime, shm_files
from lockcheck.cluster.netns import LocalCluster
from lockcheck.cluster.state import DEFAULT_STATE_DIR, Registry
from lockcheck.db.postgres import OS_USER, PostgresDB
from lockcheck.history import read_history
from lockcheck.locks.api import ClientOptions, Indefinite, NotOwner
from lockcheck.locks.postgres import (
    AdvisoryClient,
    LeaseTableClient,
    Session,
    create_schema,
    session_params,
    stable_key,
)
from lockcheck.spec import TestSpec
from tests.conftest import faketime_files
from tests.integration.detect import first_showing

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

OP_TIMEOUT = 0.5


def postgres_uid() -> int:
    import pwd

    return pwd.getpwnam(OS_USER).pw_uid


def shm_segments_of_postgres() -> set[str]:
    """SysV segments owned by postgres in the host's IPC namespace (key, id)."""
    uid = str(postgres_uid())
    out = set()
    for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) > 7 and f[7] == uid:
            out.add(f"{f[0]}/{f[1]}")
    return out


def dev_shm_postgres() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("PostgreSQL.")}


def postgres_pids_in(netns: str) -> list[int]:
    from lockcheck.cluster.netns import netns_pids

    uid = postgres_uid()
    return [p for p in netns_pids(netns) if _uid_of(p) == uid and _state(p) not in ("Z", None)]


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


# -- part 1: the database and the SQL, driven directly ------------------------------------


SharedMemory = tuple[set[str], set[str]]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[PostgresDB, LocalCluster, SharedMemory]]:
    """One server, under a clock the tests can move (as in a run with clock faults: every
    other test here passes under libfaketime too), and the host's shared memory (SysV,
    /dev/shm) from before it started."""
    before = shm_segments_of_postgres(), dev_shm_postgres()
    cluster = LocalCluster(1, 0, Registry(DEFAULT_STATE_DIR))
    db = PostgresDB(TestSpec(backend="postgres", nemesis=()), {})
    db.fake_clock()
    try:
        cluster.up()
        db.setup(cluster)
        create_schema(db.client_config())
        yield db, cluster, before
    finally:
        db.teardown()
        cluster.down()
    # nothing of the server is left in the host's IPC namespace or in /dev/shm
    assert (shm_segments_of_postgres(), dev_shm_postgres()) == before
    assert faketime_files(SERVER_PIDS) == [], "libfaketime's files left in /dev/shm"


SERVER_PIDS: list[int] = []  # every postmaster the module's server had


def server_pid(db: PostgresDB) -> int:
    assert db.server is not None and db.server.daemon is not None
    SERVER_PIDS.append(db.server.daemon.pid)
    return db.server.daemon.pid


def clock_offset_ms(db: PostgresDB) -> float:
    """How far the server's wall clock is from this machine's."""
    with psycopg.connect(**db.client_config(), connect_timeout=2) as c:
        row = c.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
    assert row is not None
    return float(row[0]) * 1000 - time.time() * 1000


def session_for(db: PostgresDB, worker: int = 0) -> Session:
    opts = ClientOptions(ttl_ms=1000, op_timeout_s=OP_TIMEOUT, worker=worker)
    return Session(session_params(db.client_config(), opts), OP_TIMEOUT)


def test_lease_table_grants_expires_and_keeps_its_fences(server: Any) -> None:
    db, _, _ = server
    a = LeaseTableClient(session_for(db, 0), ttl_ms=300, drift=0.01)
    b = LeaseTableClient(session_for(db, 1), ttl_ms=300, drift=0.01)
    try:
        first = a.acquire("t-lease")
        assert first is not None and first.fence == 1
        assert b.acquire("t-lease") is None  # held, not expired
        a.renew(first)
        time.sleep(0.4)  # past the TTL, by the server's clock
        with pytest.raises(NotOwner):
            a.renew(first)  # expired: a lease is not renewed from the dead
        second = b.acquire("t-lease")
        assert second is not None and second.fence == 2  # +1 from the row
        with pytest.raises(NotOwner):
            a.release(first)  # someone else's now
        b.release(second)
        with pytest.raises(NotOwner):
            b.release(second)  # already free
        third = a.acquire("t-lease")  # free: granted at once, the counter kept
        assert third is not None and third.fence == 3
        a.release(third)
    finally:
        a.close()
        b.close()


def test_a_server_clock_moved_ahead_expires_a_valid_lease(server: Any) -> None:
    """The Clock capability: the lease table expires rows by the server's clock, so a
    jump forward hands a lock that is valid by every true clock to a second client."""
    db, _, _ = server
    pid = server_pid(db)
    assert runs_libfaketime(pid)
    assert abs(clock_offset_ms(db)) < 200
    a = LeaseTableClient(session_for(db, 0), ttl_ms=5000, drift=0.01)
    b = LeaseTableClient(session_for(db, 1), ttl_ms=5000, drift=0.01)
    try:
        first = a.acquire("t-clock")
        assert first is not None
        assert b.acquire("t-clock") is None
        db.set_clock("n1", 8000)
        assert abs(clock_offset_ms(db) - 8000) < 200
        second = b.acquire("t-clock")  # a's lease has about 5 s left by any true clock
        assert second is not None and first.fence is not None
        assert second.fence == first.fence + 1
        with pytest.raises(NotOwner):
            a.renew(first)
        db.reset_clock("n1")
        assert abs(clock_offset_ms(db)) < 200
        b.release(second)
    finally:
        db.reset_clock("n1")
        a.close()
        b.close()


def test_a_crashed_faked_server_leaves_no_clock_files_and_restarts_faked(server: Any) -> None:
    db, _, _ = server
    before = server_pid(db)
    db.set_clock("n1", -3000)  # a clock fault in progress when the server crashes
    try:
        db.kill("n1")
        assert not any(f.exists() for f in shm_files(before)), \
            "SIGKILL left libfaketime's files for a PID that will be reused"
        db.start("n1")
        after = server_pid(db)
        assert after != before and runs_libfaketime(after), "restarted without its fake clock"
        # the restarted server reads the clock as the fault left it
        assert abs(clock_offset_ms(db) + 3000) < 200
    finally:
        db.reset_clock("n1")
    assert abs(clock_offset_ms(db)) < 200


def test_advisory_lock_is_the_sessions_and_pg_locks_says_so(server: Any) -> None:
    db, _, _ = server
    a = AdvisoryClient(session_for(db, 0), ttl_ms=1000, drift=0.01, key_of=stable_key)
    b = AdvisoryClient(session_for(db, 1), ttl_ms=1000, drift=0.01, key_of=stable_key)
    try:
        # one key below zero, one above: pg_locks splits a bigint key in two halves
        assert stable_key("k1") < 0 < stable_key("k2")
        held = a.acquire("k1")
        assert held is not None and held.fence is None
        assert b.acquire("k1") is None
        a.renew(held)  # pg_locks: this session holds it
        with pytest.raises(NotOwner):
            b.renew(held)  # a session that does not hold it
        other = a.acquire("k2")
        assert other is not None
        a.renew(other)
        a.release(other)
        with pytest.raises(NotOwner):
            a.renew(other)
        # the failover terminates the holder's session; the holder learns at its next query
        done = db.failover(random.Random(1))
        assert done["targets"] == ["n1"] and done["pids"], done
        assert "lockcheck-w0" in done["sessions"], done
        assert "lockcheck-w1" not in done["sessions"], done  # it held nothing
        got = b.acquire("k1")  # the lock went with the session
        assert got is not None
        with pytest.raises(Indefinite) as ei:
            a.renew(held)
        assert str(ei.value) == "terminated"
        with pytest.raises(NotOwner):
            a.renew(held)  # a new session: it does not hold the lock
        b.release(got)
    finally:
        a.close()
        b.close()


def python_hash_in_a_new_process(name: str, seed: str) -> int:
    """`python_hash_key(name)` as a worker process with this PYTHONHASHSEED computes it."""
    code = f"from lockcheck.locks.postgres import python_hash_key; print(python_hash_key({name!r}))"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return int(out.stdout)


def test_python_hash_keys_let_two_processes_hold_one_name(server: Any) -> None:
    """`postgres-advisory-hash`: str hashes are salted per process, so two workers lock
    different keys for the same name, and both are granted it."""
    db, _, _ = server
    keys = [python_hash_in_a_new_process("k0", seed) for seed in ("1", "2")]
    assert keys[0] != keys[1]
    a, b = (AdvisoryClient(session_for(db, w), ttl_ms=1000, drift=0.01,
                           key_of={"k0": k}.__getitem__) for w, k in enumerate(keys))
    try:
        first, second = a.acquire("k0"), b.acquire("k0")
        assert first is not None and second is not None  # two holders of "k0"
        a.release(first)
        b.release(second)
    finally:
        a.close()
        b.close()


@pytest.mark.alone  # reads every file of /dev/shm
def test_a_crash_kills_every_server_process_and_leaves_no_shared_memory(server: Any) -> None:
    db, cluster, before = server
    ns = cluster.nodes[0].netns
    c = LeaseTableClient(session_for(db), ttl_ms=60_000, drift=0.01)
    try:
        held = c.acquire("t-crash")
        assert held is not None
        assert len(postgres_pids_in(ns)) >= 5  # postmaster, checkpointer, walwriter, ...
        db.kill("n1")
        assert not db.alive("n1")
        assert postgres_pids_in(ns) == []
        # all at once: no backend lived to see the postmaster gone and say goodbye
        assert db.server is not None
        assert "unexpected postmaster exit" not in db.server.log_path.read_text()
        # a SIGKILLed postmaster leaves its SysV segment, and posix DSM files, behind:
        # none in the host's IPC namespace, none in /dev/shm, even before a restart
        assert (shm_segments_of_postgres(), dev_shm_postgres()) == before
        assert (db.server.data / "postmaster.pid").exists()  # not a clean shutdown
        db.start("n1")  # crash recovery on the same data
        assert db.alive("n1")
        with pytest.raises(Indefinite):
            c.renew(held)  # the old session died with the server
        c.renew(held)  # the acknowledged grant survived the crash (synchronous commit)
        c.release(held)
    finally:
        c.close()


def test_a_pause_stops_every_server_process(server: Any) -> None:
    db, cluster, _ = server
    ns = cluster.nodes[0].netns
    c = LeaseTableClient(session_for(db), ttl_ms=1000, drift=0.01)
    try:
        c.acquire("t-pause")  # connected
        db.pause("n1")
        deadline = time.monotonic() + 2.0  # a signal takes effect when the process runs
        states = {p: _state(p) for p in postgres_pids_in(ns)}
        while set(states.values()) != {"T"} and time.monotonic() < deadline:
            time.sleep(0.01)
            states = {p: _state(p) for p in postgres_pids_in(ns)}
        assert len(states) >= 5 and set(states.values()) == {"T"}, states
        t0 = time.monotonic()
        with pytest.raises(Indefinite) as ei:
            c.acquire("t-pause-2")
        assert str(ei.value) == "timeout"
        assert time.monotonic() - t0 < OP_TIMEOUT + 1.0  # bounded by the op timeout
        assert db.failover(random.Random(1))["targets"] == []
        db.resume("n1")
        assert set(map(_state, postgres_pids_in(ns))) <= {"S", "R", "D"}
        assert c.acquire("t-pause-3") is not None
    finally:
        db.resume("n1")
        c.close()


# -- part 2: the findings, through the lockcheck command ----------------------------------


# A worker takes a second or more to start on a loaded machine, so a client pause due
# at 1 s may find no holder and be skipped: with 8 s (the last one quiet) there is
# room for two pauses of 2 x TTL, and for one even when the first is skipped.
# a detection, made alone after every other test (tests/integration/detect.py)
ADVISORY_FAILOVER = ("--backend", "postgres-advisory", "--nemesis", "failover",
                     "--time-limit", "6", "--nemesis-interval", "1.5", "--quiet", "1")
RUNS = {
    "pause_mutex": ("--backend", "postgres", "--nemesis", "client-pause",
                    "--time-limit", "8", "--nemesis-interval", "1"),
    "pause_fenced": ("--backend", "postgres", "--workload", "fenced",
                     "--nemesis", "client-pause", "--time-limit", "8",
                     "--nemesis-interval", "1"),
    "clock_bump": ("--backend", "postgres", "--nemesis", "clock-bump", "--time-limit", "8",
                   "--nemesis-interval", "1"),
}
HASH_KEYS = ("--backend", "postgres-advisory-hash", "--nemesis", "none", "--time-limit", "5",
             "--quiet", "1")


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> dict[str, Any]:
    """The three runs at once (they mostly wait: on a lease, a pause, a TTL), each with
    its own cluster; each completes, leaves nothing behind, and no shared memory."""
    before = shm_segments_of_postgres(), dev_shm_postgres()
    started = {name: module_cli.start("test", *args, "--quiet", "1")
               for name, args in RUNS.items()}
    done = {name: p.wait(timeout=180) for name, p in started.items()}
    for r in done.values():
        assert r.run_dir is not None, r.explain()
        assert r.code in (0, 1), r.explain()
        assert "failure" not in r.results(), r.results().get("failure")
        module_cli.assert_no_leftovers(r.test_json()["run_id"])
    assert (shm_segments_of_postgres(), dev_shm_postgres()) == before
    return done


@pytest.fixture(scope="module")
def pause_mutex(runs: dict[str, Any]) -> Any:
    return runs["pause_mutex"]


@pytest.fixture(scope="module")
def pause_fenced(runs: dict[str, Any]) -> Any:
    return runs["pause_fenced"]


def nemesis_values(r: Any, f: str) -> list[dict[str, Any]]:
    return [o.value for o in read_history(r.run_dir / "history.jsonl")
            if o.process == "nemesis" and o.type == "info" and o.f == f]


@pytest.mark.detection
def test_finding_advisory_lock_terminated_holder_overlaps(module_cli: Any) -> None:
    """The first of up to three runs whose failover terminated a holder's session
    while a rival waited: in 6 s, one run of the suite in several had no overlap (the
    failovers found no holder inside at the moment its session was cut)."""
    r = first_showing(module_cli, ADVISORY_FAILOVER, lambda r: r.code == 1, timeout=180)
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    # a termination between the two entries: the first holder was inside when its
    # session was terminated (somewhere between the failover's invoke and its info),
    # the second entered after, while the first was still inside
    cuts, began = [], 0
    for o in read_history(r.run_dir / "history.jsonl"):
        if o.process == "nemesis" and o.f == "failover":
            if o.type == "invoke":
                began = o.time
            elif o.value.get("pids"):
                cuts.append((began, o.time))
    assert cuts, "no session was terminated"
    assert any(a[0] < end and b[0] > start for v in me["violations"]
               for a, b in [v["sections"]] for start, end in cuts), (cuts, me["violations"][:3])
    assert res["recovery"]["valid"] is True


def test_finding_paused_lease_holder_overlaps_the_next(pause_mutex: Any) -> None:
    r = pause_mutex
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    paused = [v for v in nemesis_values(r, "pause-client") if "skipped" not in v]
    assert paused, "no holder was paused"
    # the service is not to blame: the second grant came after the first lease expired
    assert res["checkers"]["lease-safety"]["valid"] is True
    assert res["checkers"]["fencing"]["duplicate_fence_count"] == 0
    assert res["recovery"]["valid"] is True


def test_finding_the_fence_rejects_the_paused_holders_write(pause_fenced: Any) -> None:
    r = pause_fenced
    assert r.code == 1, r.explain()  # the lock failed (invalid); the resource held
    fe = r.results()["checkers"]["fencing"]
    assert fe["resource_valid"] is True
    assert fe["saves"] > 0, fe
    assert fe["stale_accepted_count"] == 0 and fe["interleaved_count"] == 0, fe
    assert fe["duplicate_fence_count"] == 0 and fe["regression_count"] == 0, fe
    assert fe["accepted"] > 0
    assert r.results()["summary"].startswith("the lock failed, the resource held")


def test_finding_a_server_clock_jump_grants_a_valid_lease_again(runs: dict[str, Any]) -> None:
    """P4: the lease table trusts the server's clock; a jump forward of 2 x TTL expires
    every lease at once, and the next client is granted a lock whose holder is inside
    with a valid lease (lease-safety), until the holder's next renewal is refused."""
    r = runs["clock_bump"]
    assert r.code == 1, r.explain()
    res = r.results()
    ls, me = res["checkers"]["lease-safety"], res["checkers"]["mutual-exclusion"]
    assert ls["valid"] is False and ls["violation_count"] > 0, ls
    assert me["valid"] is False and me["violation_count"] > 0, me
    ops = read_history(r.run_dir / "history.jsonl")
    nem = [o for o in ops if o.process == "nemesis"]
    bumps = [o for o in nem if o.f == "bump-clock" and o.type == "info"]
    assert bumps and all(b.value["offsets_ms"] == {"n1": 2000} for b in bumps), bumps
    # from the moment the jump was asked for until the clock was set back
    windows = [(o.time, next(x.time for x in nem if x.f == "reset-clock"
                             and x.type == "info" and x.time > o.time))
               for o in nem if o.f == "bump-clock" and o.type == "invoke"]
    # every such grant came while the server's clock was ahead
    for v in ls["violations"]:
        assert any(a <= v["granted"]["ok_ns"] <= z for a, z in windows), (v, windows)
    assert res["checkers"]["fencing"]["duplicate_fence_count"] == 0  # the row's counter
    assert res["recovery"]["valid"] is True


def test_server_log_and_version_in_the_results(pause_mutex: Any) -> None:
    d = pause_mutex.run_dir
    log = (d / "nodes" / "n1" / "postgres.log").read_text()
    assert "database system is ready to accept connections" in log
    assert (d / "nodes" / "n1" / "initdb.log").is_file()
    v = pause_mutex.test_json()["versions"]
    from lockcheck.db.postgres import find_install, run_here

    # the distribution's major (15 on Debian 12, 17 on Debian 13), read on the node
    assert v["postgres"].startswith(f"{find_install(run_here).major}.") and v["psycopg"][0] == "3"


def test_test_json_names_the_backend_and_its_capabilities(pause_mutex: Any) -> None:
    t = pause_mutex.test_json()
    info = t["backend_info"]
    assert info["family"] == "postgres" and info["client"] == "psycopg"
    assert set(info["capabilities"]) == {"kill", "pause", "failover", "clock", "logs"}


@pytest.fixture(scope="module")
def hash_keys(module_cli: Any) -> Any:
    """P3's run, after the others (five servers at once slow every start)."""
    r = module_cli("test", *HASH_KEYS, timeout=150)
    module_cli.assert_no_leftovers(r.test_json()["run_id"])
    return r


def test_finding_hash_keyed_advisory_locks_exclude_nobody(hash_keys: Any) -> None:
    """P3, detected by lockcheck: with no fault, holders of one name overlap, and the
    service granted each (lease-safety: a grant while another lease was valid)."""
    r = hash_keys
    assert r.code == 1, r.explain()
    res = r.results()
    assert res["stats"]["faults"] == 0
    c = res["checkers"]
    me = c["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    assert c["lease-safety"]["valid"] is False
    # the overlapping holders are different workers, that is different processes with
    # different hash seeds
    assert any(len(set(v["workers"])) == 2 for v in me["violations"])
