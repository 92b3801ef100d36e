"""The one place pottery's and redis-py's exceptions, and quorum rounds, become
Definite / Indefinite / NotOwner (`lockcheck.locks.redlock`).

Part 1 raises every pottery exception class (and every redis-py one) inside
`mapped_errors`. Part 2 is the table of quorum rounds (`failed_acquire`,
`failed_round`). Part 3 drives the real `RedlockClient` against real redis-servers on
localhost, mixed with masters that refuse connections and fake masters that read a
command and never answer, so the answers are the ones pottery and redis-py really
produce: a quorum missed because masters timed out is `info`, one refused outright
is `fail`.
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pottery.exceptions as pex
import pytest
import redis
import redis.exceptions as rex

from lockcheck.locks import redlock as rl
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, NotOwner
from lockcheck.locks.redis import RedisLockClient, redis_client
from lockcheck.locks.redlock import (
    FAILED,
    NO,
    UNKNOWN,
    YES,
    RedlockClient,
    TalliedRedlock,
    failed_acquire,
    failed_round,
    make_clients,
    mapped_errors,
)
from tests.conftest import did_not_hang, wait_for
from tests.unit.test_redis_errors import TABLE as REDIS_TABLE
from tests.unit.test_redis_errors import fake_redis, free_port
from tests.unit.test_redis_errors import kind_of as redis_kind_of

pytestmark = pytest.mark.filterwarnings("ignore:Call to '__init__' function with deprecated")


def kind_of(exc: BaseException, lock: TalliedRedlock | None = None,
            n: int = 5) -> tuple[str, str]:
    return redis_kind_of(exc, lambda: mapped_errors(lock, n))


# -- part 1: every exception class ------------------------------------------------------

M: list[redis.Redis] = []  # pottery's exceptions want masters; none is contacted

POTTERY_TABLE: list[tuple[str, BaseException, str, str | None]] = [
    # nothing was sent: pottery counts extensions itself
    ("TooManyExtensions", pex.TooManyExtensions("k", M), "Definite", "too many extensions"),
    # NextID could not read or set a majority: one of its sets may have landed
    ("QuorumNotAchieved", pex.QuorumNotAchieved("k", M), "Indefinite", "no quorum"),
    # without the round's answers (not ours), a missed quorum may have been applied
    ("ExtendUnlockedLock", pex.ExtendUnlockedLock("k", M), "Indefinite", "no quorum"),
    ("ReleaseUnlockedLock", pex.ReleaseUnlockedLock("k", M), "Indefinite", "no quorum"),
    ("QuorumIsImpossible", pex.QuorumIsImpossible("k", M), "Indefinite", None),
    ("PrimitiveError", pex.PrimitiveError("k", M), "Indefinite", None),
    # containers pottery has besides its primitives: conservative
    ("PotteryError", pex.PotteryError(redis.Redis()), "Indefinite", None),
    ("KeyExistsError", pex.KeyExistsError(redis.Redis()), "Indefinite", None),
    ("RandomKeyError", pex.RandomKeyError(redis.Redis()), "Indefinite", None),
    ("QueueEmptyError", pex.QueueEmptyError(redis.Redis()), "Indefinite", None),
    # warnings: pottery only warns with them; raised, they are not a lock outcome
    ("PotteryWarning", pex.PotteryWarning(), "passes", "PotteryWarning"),
    ("InefficientAccessWarning", pex.InefficientAccessWarning(), "passes",
     "InefficientAccessWarning"),
]


@pytest.mark.parametrize(("exc", "kind", "message"), [t[1:] for t in POTTERY_TABLE],
                         ids=[t[0] for t in POTTERY_TABLE])
def test_pottery_mapping_table(exc: BaseException, kind: str, message: str | None) -> None:
    got_kind, got_message = kind_of(exc)
    assert got_kind == kind
    if message is not None:
        assert got_message == message


def test_every_pottery_exception_class_is_in_the_table() -> None:
    """A new pottery exception class must be looked at, not silently mapped."""
    classes = {n for n, c in inspect.getmembers(pex, inspect.isclass)
               if issubclass(c, BaseException) and c.__module__ == pex.__name__}
    assert classes - {t[0] for t in POTTERY_TABLE} == set()


@pytest.mark.parametrize(("exc", "kind"), [(t[1], t[2]) for t in REDIS_TABLE],
                         ids=[t[0] for t in REDIS_TABLE])
def test_redis_errors_map_as_for_a_single_instance(exc: BaseException, kind: str) -> None:
    assert kind_of(exc)[0] == kind == redis_kind_of(exc)[0]


def test_not_an_error_of_theirs_passes_through() -> None:
    assert kind_of(KeyError("x")) == ("passes", "KeyError")
    assert kind_of(KeyboardInterrupt()) == ("passes", "KeyboardInterrupt")


def test_a_master_error_is_failed_only_when_nothing_was_sent() -> None:
    assert rl.answer_of(rex.ConnectionError("Error 111 connecting to x. Connection "
                                            "refused.")) == FAILED
    assert rl.answer_of(rex.TimeoutError("Timeout connecting to server")) == FAILED
    assert rl.answer_of(rex.TimeoutError("Timeout reading from x")) == UNKNOWN
    assert rl.answer_of(rex.ConnectionError("Connection closed by server.")) == UNKNOWN
    assert rl.answer_of(rex.ResponseError("ERR no")) == FAILED
    assert rl.answer_of(ValueError("odd")) == UNKNOWN


# -- part 2: quorum rounds --------------------------------------------------------------


def answers(*kinds: str) -> dict[Any, str]:
    return {f"m{i}": k for i, k in enumerate(kinds)}


ACQUIRE_TABLE: list[tuple[str, dict[Any, str], dict[Any, str], str | None]] = [
    # (what, acquire round, release round after it, expected: None = busy)
    ("refused by a majority", answers(YES, NO, NO, NO, NO), answers(YES, NO, NO, NO, NO),
     None),
    ("two granted, three busy", answers(YES, YES, NO, NO, NO),
     answers(YES, YES, NO, NO, NO), None),
    ("masters down", answers(YES, YES, FAILED, FAILED, FAILED),
     answers(YES, YES, FAILED, FAILED, FAILED), "Definite:no quorum: 3 of 5 masters"),
    ("all down", answers(*[FAILED] * 5), answers(*[FAILED] * 5),
     "Definite:no quorum: 5 of 5 masters"),
    # a SET that timed out may land later, whatever the release round said
    ("timeouts could make a majority", answers(YES, YES, UNKNOWN, NO, NO),
     answers(UNKNOWN, UNKNOWN, NO, NO, NO), "Indefinite"),
    # given back where granted: one timed-out SET cannot make a majority on its own
    ("a timeout, the grants given back", answers(YES, YES, UNKNOWN, NO, NO),
     answers(YES, YES, NO, NO, NO), "Definite:no quorum: 1 of 5 masters unreachable"),
    ("granted, released nowhere", answers(YES, YES, YES, NO, NO),
     answers(UNKNOWN, UNKNOWN, UNKNOWN, NO, NO), "Indefinite"),
    ("a timed-out SET that the release found", answers(YES, YES, UNKNOWN, NO, NO),
     answers(YES, YES, YES, NO, NO), "Definite:no quorum: 1 of 5 masters unreachable"),
    ("stragglers not yet answered count as unknown", answers(YES, YES), {}, "Indefinite"),
    ("timeouts, but a majority said no", answers(UNKNOWN, UNKNOWN, NO, NO, NO),
     answers(UNKNOWN, UNKNOWN, NO, NO, NO), None),
    # pottery's validity check: a quorum granted too slowly, given back everywhere
    ("validity expired", answers(YES, YES, YES, NO, NO), answers(YES, YES, YES, NO, NO),
     "Definite:validity expired"),
]


@pytest.mark.parametrize(("acq", "rel", "expected"), [t[1:] for t in ACQUIRE_TABLE],
                         ids=[t[0] for t in ACQUIRE_TABLE])
def test_failed_acquire(acq: dict[Any, str], rel: dict[Any, str], expected: str | None) -> None:
    got = failed_acquire(acq, rel, 5, "timeout")
    if expected is None:
        assert got is None
        return
    kind, _, message = expected.partition(":")
    assert type(got).__name__ == kind
    assert str(got).startswith(message)


ROUND_TABLE: list[tuple[str, dict[Any, str], str]] = [
    ("the masters say it is not ours", answers(YES, NO, NO, NO, FAILED), "NotOwner"),
    ("three say no", answers(YES, YES, NO, NO, NO), "NotOwner"),
    ("may have reached a majority", answers(YES, YES, UNKNOWN, NO, FAILED), "Indefinite"),
    ("a majority timed out", answers(UNKNOWN, UNKNOWN, UNKNOWN, NO, NO), "Indefinite"),
    ("masters down", answers(YES, YES, NO, FAILED, FAILED), "Definite"),
    ("all down", answers(*[FAILED] * 5), "Definite"),
]


@pytest.mark.parametrize(("got", "kind"), [t[1:] for t in ROUND_TABLE],
                         ids=[t[0] for t in ROUND_TABLE])
def test_failed_round(got: dict[Any, str], kind: str) -> None:
    assert type(failed_round(got, 5, "timeout")).__name__ == kind


def test_three_masters_need_two() -> None:
    assert failed_round(answers(YES, NO, NO), 3, "").__class__ is NotOwner
    assert failed_round(answers(YES, UNKNOWN, NO), 3, "t").__class__ is Indefinite
    assert failed_acquire(answers(YES, NO, NO), answers(YES, NO, NO), 3, "") is None
    assert isinstance(failed_acquire(answers(YES, NO, FAILED), answers(YES, NO, FAILED), 3,
                                     ""), Definite)


# -- part 3: real servers ---------------------------------------------------------------


@contextlib.contextmanager
def redis_servers(count: int, tmp: Path) -> Iterator[list[tuple[str, int]]]:
    """Real redis-servers on localhost, without persistence; stopped by PID."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not installed (scripts/install installs it)")
    procs, addrs = [], []
    try:
        for i in range(count):
            port = free_port()
            d = tmp / f"r{i}"
            d.mkdir()
            procs.append(subprocess.Popen(
                [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--dir", str(d), "--logfile", str(d / "log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            addrs.append(("127.0.0.1", port))
        for a, p in addrs:
            c = redis_client(a, p, 0.5)
            deadline = time.monotonic() + 10
            while True:
                with contextlib.suppress(rex.ConnectionError):
                    if c.ping():
                        break
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
            c.close()
        yield addrs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[str, int]]]:
    with redis_servers(5, tmp_path_factory.mktemp("redis")) as addrs:
        yield addrs


@pytest.fixture(autouse=True)
def empty_masters(request: pytest.FixtureRequest) -> None:
    if "servers" in request.fixturenames:
        for a, p in request.getfixturevalue("servers"):
            c = redis_client(a, p, 0.5)
            c.flushall()
            c.close()


OP_TIMEOUT = 0.3


def client(masters: list[tuple[str, int]], **kw: Any) -> RedlockClient:
    return RedlockClient(masters, ttl_ms=1000, op_timeout_s=OP_TIMEOUT, **kw)


def silent() -> Any:
    """A fake master that reads every command and never answers (a blackhole)."""
    return fake_redis(lambda c, cmd: True)


def test_grant_busy_renew_release(servers: list[tuple[str, int]]) -> None:
    a, b = client(servers), client(servers)
    t0 = time.monotonic_ns()
    lease = a.acquire("k0")
    assert lease is not None and lease.fence is None and lease.key == "k0"
    # the belief is Redlock's validity: TTL - drift (1% + 2 ms), counted from the invoke
    assert t0 + 980_000_000 <= lease.valid_until_ns <= time.monotonic_ns() + 988_000_000
    assert b.acquire("k0") is None
    for _ in range(5):  # more than pottery's default of 3 extensions
        a.renew(lease)
    a.release(lease)
    again = b.acquire("k0")
    assert again is not None and again.token != lease.token


def keys(addr: str, port: int) -> int:
    c = redis_client(addr, port, 0.5)
    try:
        return int(c.dbsize())
    finally:
        c.close()


def test_renew_and_release_of_a_lost_lock_are_not_owner(
        servers: list[tuple[str, int]]) -> None:
    a = client(servers)
    lease = a.acquire("k0")
    assert lease is not None
    # the grant returns once a quorum said yes: the other masters' writes may still be
    # on their way, and one that lands after the flush below would give the lock back
    # its quorum (seen once in a whole-suite run)
    wait_for(lambda: all(keys(a_, p_) for a_, p_ in servers), 2.0,
             "the lock's key on every master")
    for addr, port in servers[:3]:  # three masters forget it (restarted empty)
        redis_client(addr, port, 0.5).flushall()
    with pytest.raises(NotOwner):
        a.renew(lease)
    with pytest.raises(NotOwner):
        a.release(lease)


def test_a_grant_names_the_masters_that_said_yes_and_no(
        servers: list[tuple[str, int]]) -> None:
    """A grant on a bare quorum (two masters still hold another client's key, as when
    an acquire races the previous holder's release) says so; a restart of one of its
    three masters then lets a second client in."""
    names = [f"n{i}" for i in range(1, 6)]
    for addr, port in servers[3:]:  # the old holder's key, not yet deleted there
        redis_client(addr, port, 0.5).set("redlock:k0", "someone-else", px=5000)
    a, b = client(servers, names=names), client(servers, names=names)
    lease = a.acquire("k0")
    assert lease is not None
    assert lease.granted_by == ("n1", "n2", "n3")
    # pottery returns at the third yes: a no still on its way is not counted
    assert set(lease.refused_by) <= {"n4", "n5"}
    for addr, port in servers[3:]:  # the old key goes
        redis_client(addr, port, 0.5).delete("redlock:k0")
    assert b.acquire("k0") is None  # still a quorum of a's
    redis_client(*servers[0], 0.5).flushall()  # n1 restarted empty
    second = b.acquire("k0")
    assert second is not None and second.granted_by == ("n1", "n4", "n5")
    with pytest.raises(NotOwner):
        a.renew(lease)
    # without names (another caller) the client names nothing
    c = client(servers)
    assert c.acquire("k1") is not None and c._said({}, rl.YES) == ()


def test_all_masters_refusing_is_definite() -> None:
    c = client([("127.0.0.1", free_port()) for _ in range(5)])
    with pytest.raises(Definite) as ei:
        c.acquire("k0")
    assert not isinstance(ei.value, NotOwner)
    assert str(ei.value) == "no quorum: 5 of 5 masters unreachable"


def test_a_majority_down_is_definite(servers: list[tuple[str, int]]) -> None:
    c = client(servers[:2] + [("127.0.0.1", free_port()) for _ in range(3)])
    with pytest.raises(Definite) as ei:
        c.acquire("k0")
    assert str(ei.value) == "no quorum: 3 of 5 masters unreachable"
    # and it gave back what it got
    assert all(redis_client(a, p, 0.5).get("redlock:k0") is None for a, p in servers[:2])


def test_a_quorum_missed_because_masters_timed_out_is_indefinite(
        servers: list[tuple[str, int]]) -> None:
    with silent() as p1, silent() as p2, silent() as p3:
        c = client(servers[:2] + [("127.0.0.1", p) for p in (p1, p2, p3)])
        t = time.monotonic()
        with pytest.raises(Indefinite) as ei:
            c.acquire("k0")
        took = time.monotonic() - t
    assert str(ei.value) == "timeout"
    assert took < did_not_hang(OP_TIMEOUT), f"acquire took {took:.3f} s"


def test_two_blackholed_masters_do_not_stall_a_quorum(servers: list[tuple[str, int]]) -> None:
    # an op timeout of 6 s gives each master 2 s: an acquire that waited for one
    # blackholed master at all takes that long, the quorum's answers come in milliseconds
    with silent() as p1, silent() as p2:
        c = RedlockClient(servers[:3] + [("127.0.0.1", p) for p in (p1, p2)],
                          ttl_ms=10_000, op_timeout_s=6.0)
        t = time.monotonic()
        lease = c.acquire("k0")
        took = time.monotonic() - t
        assert lease is not None
        c.renew(lease)
        c.release(lease)
    assert took < 1.5, f"acquire took {took:.3f} s"


def grants_then_hangs() -> Any:
    """A fake master that grants every SET, then never answers anything else."""
    def answer(c: socket.socket, cmd: list[bytes]) -> bool:
        if cmd[0].upper() == b"SET":
            c.sendall(b"+OK\r\n")
        return True

    return fake_redis(answer)


def test_renew_and_release_with_a_majority_timing_out_are_indefinite(
        servers: list[tuple[str, int]]) -> None:
    with grants_then_hangs() as p1, grants_then_hangs() as p2, grants_then_hangs() as p3:
        c = client(servers[:2] + [("127.0.0.1", p) for p in (p1, p2, p3)])
        lease = c.acquire("k0")
        assert lease is not None
        with pytest.raises(Indefinite) as ei:
            c.renew(lease)
        assert str(ei.value) == "timeout"
        with pytest.raises(Indefinite):
            c.release(lease)


def test_fences_grow_and_regress_when_the_masters_restart_empty(
        servers: list[tuple[str, int]]) -> None:
    c = client(servers, fence="nextid")
    fences = []
    for _ in range(3):
        lease = c.acquire("k0")
        assert lease is not None and lease.fence is not None
        fences.append(lease.fence)
        c.release(lease)
    assert fences == sorted(fences) and len(set(fences)) == 3
    for a, p in servers:
        redis_client(a, p, 0.5).flushall()
    lease = c.acquire("k0")
    assert lease is not None and lease.fence == 1  # NextID lives in memory only


def test_make_clients_shares_one_client_over_every_master(
        servers: list[tuple[str, int]]) -> None:
    opts = ClientOptions(ttl_ms=1000, op_timeout_s=OP_TIMEOUT, options={"fence": "nextid"})
    clients = make_clients({"masters": [list(s) for s in servers]}, ["k0", "k1"], opts)
    c = clients["k0"]
    assert c is clients["k1"] and isinstance(c, RedlockClient)
    assert c.n == 5 and c.fenced
    lease = c.acquire("k1")
    assert lease is not None and lease.fence == 1
    c.release(lease)
    c.close()


# -- the single-instance variants, against one real server -------------------------------


def lease_of(c: RedisLockClient, key: str) -> Lease:
    lease = c.acquire(key)
    assert lease is not None
    return lease


def test_get_del_release_checks_the_owner(servers: list[tuple[str, int]]) -> None:
    a, p = servers[0]
    c = RedisLockClient(a, p, ttl_ms=200, op_timeout_s=OP_TIMEOUT, release="get-del")
    mine = lease_of(c, "k0")
    c.release(mine)
    assert redis_client(a, p, 0.5).get("k0") is None
    old = lease_of(c, "k0")
    time.sleep(0.25)  # expired; someone else takes it
    other = RedisLockClient(a, p, ttl_ms=1000, op_timeout_s=OP_TIMEOUT)
    theirs = lease_of(other, "k0")
    with pytest.raises(NotOwner):
        c.release(old)  # the GET sees their token: no DEL
    assert redis_client(a, p, 0.5).get("k0") == theirs.token.encode()


def test_no_ttl_never_expires_and_renew_confirms(servers: list[tuple[str, int]]) -> None:
    a, p = servers[0]
    c = RedisLockClient(a, p, ttl_ms=200, op_timeout_s=OP_TIMEOUT, ttl=False)
    lease = lease_of(c, "k0")
    raw = redis_client(a, p, 0.5)
    assert raw.pttl("k0") == -1 and lease.fence == 1
    assert lease.still_holds(time.monotonic_ns() + 10**12)
    c.renew(lease)
    raw.delete("k0")
    with pytest.raises(NotOwner):
        c.renew(lease)


def test_the_belief_is_redlocks_validity() -> None:
    """TTL minus pottery's drift (1% + 2 ms), counted from the invoke."""
    c = RedlockClient([("127.0.0.1", 1)] * 5, ttl_ms=1000, op_timeout_s=0.25)
    assert c._belief(5_000_000_000) == 5_000_000_000 + 1_000_000_000 - 10_000_000 - 2_000_000


def test_unknown_variant_options_are_refused() -> None:
    with pytest.raises(ValueError):
        RedisLockClient("127.0.0.1", 1, ttl_ms=1, op_timeout_s=0.1, release="del")
    with pytest.raises(ValueError):
        RedlockClient([("127.0.0.1", 1)], ttl_ms=1, op_timeout_s=0.1, fence="zxid")


def test_a_refused_master_answer_reaches_the_round(servers: list[tuple[str, int]]) -> None:
    down = ("127.0.0.1", free_port())
    c = client([*servers[:4], down])
    lease = c.acquire("k0")
    assert lease is not None
    kinds = sorted(c._locks[lease.token].answers("acquire").values())
    assert kinds.count(YES) >= 3 and set(kinds) <= {YES, FAILED}
