"""Backends by name: which database runs on the nodes and which client library locks.

A backend is a database (`db/`) plus a lock client (`locks/`) plus the switches of a
variant. Its definition also owns what must be installed for it: the server programs
and the Debian package of each (`servers`), and the client library on PyPI with its
extras. `preflight` (doctor, the one-line refusal, the ssh provider's apt-get) reads
them; `tests/unit/test_backend_definitions.py` checks that the node image, the
installer, pyproject.toml and the docs agree. Factories are named as "module:attr"
strings (`lockcheck/registry.py`) so that this table imports nothing heavy: a client
worker loads only its own client library, and the controller only the database it
runs.
"""

from __future__ import annotations

from typing import Any

from lockcheck.backend import Backend
from lockcheck.errors import BadInput
from lockcheck.registry import load

POSTGRES_PROGRAM = "/usr/lib/postgresql/*/bin/postgres"


# the Redis-protocol servers: Redis, and Valkey (its fork, which many distributions
# and managed services ship instead; Debian 13 and Ubuntu 25.04 have it)
VALKEY = {"valkey-server": "valkey-server"}
# the oldest version of each server program lockcheck runs (a database's `versions()`
# names them): older ones lack what a database here uses (Sentinel's
# `resolve-hostnames` came in Redis 6.2, etcd's /v3 JSON gateway in 3.4, ZooKeeper's
# four-letter-word allow list in 3.5, `pg_terminate_backend`'s timeout in PostgreSQL 14);
# a run on an older one is refused with one line
OLDEST = {"redis-server": "6.2", "redis-sentinel": "6.2", "valkey-server": "7.2",
          "valkey-sentinel": "7.2", "etcd": "3.4", "zookeeper": "3.5", "postgres": "14"}
# where a server's package exists, for the line that refuses a run without it
PACKAGED_IN = {"valkey-server": "Debian 13, Ubuntu 25.04 and newer",
               "valkey-sentinel": "Debian 13, Ubuntu 25.04 and newer"}
VALKEY_SENTINEL = {**VALKEY, "valkey-sentinel": "valkey-sentinel"}


def _redis(**kw: Any) -> Backend:
    """Single-instance Redis backends: redis-py on one master per lock name."""
    base: dict[str, Any] = dict(
        family="redis", db="lockcheck.db.redis:RedisDB",
        client="lockcheck.locks.redis:make_clients", library="redis",
        servers={"redis-server": "redis-server"}, server="redis",
        alternatives={"valkey": VALKEY})
    return Backend(**{**base, **kw})


def _redlock(**kw: Any) -> Backend:
    """Redlock backends: pottery's Redlock over N independent Redis masters."""
    base: dict[str, Any] = dict(
        family="redlock", db="lockcheck.db.redis:RedisDB",
        client="lockcheck.locks.redlock:make_clients", library="pottery",
        servers={"redis-server": "redis-server"}, server="redis",
        alternatives={"valkey": VALKEY}, default_nodes=5, min_nodes=3,
        stops_at_reply=True)
    return Backend(**{**base, **kw})


def _etcd(**kw: Any) -> Backend:
    """etcd 3.4 backends: our client of etcd's v3lock service over the JSON gateway."""
    base: dict[str, Any] = dict(
        family="etcd", db="lockcheck.db.etcd:EtcdDB",
        client="lockcheck.locks.etcd:make_clients", library="requests",
        servers={"etcd": "etcd-server"}, server="etcd", default_nodes=3)
    return Backend(**{**base, **kw})


def _sentinel(**kw: Any) -> Backend:
    """Redis with Sentinel failover: redis-py's Sentinel client on the current primary."""
    base: dict[str, Any] = dict(
        family="redis-sentinel", db="lockcheck.db.sentinel:SentinelDB",
        client="lockcheck.locks.sentinel:make_clients", library="redis",
        fence="INCR of a per-name counter on the primary, in the grant's Lua script; "
              "replicated asynchronously, so a failover can repeat or lower it",
        default_nodes=3, min_nodes=3,
        servers={"redis-server": "redis-server", "redis-sentinel": "redis-sentinel"},
        server="redis", alternatives={"valkey": VALKEY_SENTINEL})
    return Backend(**{**base, **kw})


def _postgres(**kw: Any) -> Backend:
    """One PostgreSQL server (the distribution's major); psycopg 3 on one autocommit
    session per worker."""
    base: dict[str, Any] = dict(
        family="postgres", db="lockcheck.db.postgres:PostgresDB",
        client="lockcheck.locks.postgres:make_clients", library="psycopg",
        library_extras=("binary",), max_nodes=1,
        # setpriv and unshare come with util-linux, which every Debian has
        # the `postgresql` package brings the distribution's own major (15 on Debian
        # 12, 17 on Debian 13, 16 on Ubuntu 24.04) into a folder named after it
        servers={POSTGRES_PROGRAM: "postgresql"}, server="postgres")
    return Backend(**{**base, **kw})


def _zookeeper(**kw: Any) -> Backend:
    """A ZooKeeper ensemble with kazoo's Lock recipe, one session per worker."""
    base: dict[str, Any] = dict(
        family="zookeeper", db="lockcheck.db.zookeeper:ZooKeeperDB",
        client="lockcheck.locks.kazoo:make_clients", library="kazoo", default_nodes=3,
        # the zookeeper package brings java and the jars (checked at setup)
        servers={"java": "zookeeper"}, server="zookeeper",
        fence="czxid of the lock's own znode (ensemble-wide zxid of its create)")
    return Backend(**{**base, **kw})


def _memory(**kw: Any) -> Backend:
    """lockcheck's own in-memory lock server: runs without root on `--provider inproc`."""
    base: dict[str, Any] = dict(
        family="memory", db="lockcheck.db.memory:MemoryDB",
        client="lockcheck.locks.memory:make_clients", library="lockcheck",
        fence="a counter of the server's, in memory only: a restart counts from 1 again",
        own_server=True)
    return Backend(**{**base, **kw})


_BUILT_IN: dict[str, Backend] = {
    b.name: b
    for b in [
        _redis(
            name="redis",
            description="single-instance Redis per lock name: redis-py Lock (SET NX PX, "
                        "token-checked Lua release/renew), a Lua fence counter",
            fence="INCR of a per-name counter in the same Lua script as the grant",
            expect="safe without faults; a master restarted empty (kill) or a paused "
                   "holder (client-pause) gives overlapping holders",
        ),
        _redis(
            name="redis-get-del",
            description="single-instance Redis, released by GET, a compare in the client, "
                        "then DEL: two commands, no Lua",
            fence="INCR of a per-name counter in the same Lua script as the grant",
            expect="a holder paused between its GET and its DEL (client-pause --pause-at "
                   "release) deletes the next holder's lock: another client is granted it "
                   "while that holder's lease is valid",
            options={"release": "get-del"}, unsafe=True, stops_at_release=True,
        ),
        _redis(
            name="redis-no-ttl",
            description="single-instance Redis, SET NX without PX (redis-py's default "
                        "timeout=None); renewal only confirms ownership",
            fence="INCR of a per-name counter in the same Lua script as the grant",
            expect="a paused holder keeps the lock (no overlap under client-pause), but a "
                   "lost release or an acquire whose reply was lost (partition) leaves the "
                   "lock held forever: the recovery phase fails",
            options={"ttl": False}, unsafe=True,
        ),
        _redlock(
            name="redlock",
            description="Redlock on N independent masters: pottery Redlock (SET NX PX on a "
                        "quorum, validity = TTL - elapsed - drift), per-master timeouts, "
                        "no retries",
            fence=None,
            expect="a paused holder overlaps the next (client-pause); masters restarted "
                   "empty inside one TTL grant twice: a majority (kill --kill-targets "
                   "majority), or a single master of a holder's bare quorum, a grant that "
                   "raced the previous release (kill --kill-targets holder-quorum; now and "
                   "then under the default kill); neither with --restart-delay-ms above "
                   "the TTL",
        ),
        _redlock(
            name="redlock-fenced",
            description="redlock plus a fence from pottery NextID (a quorum counter on the "
                        "same masters), taken right after each grant",
            fence="pottery NextID over the same masters (in memory: masters restarted "
                  "empty make it go back)",
            expect="with the fenced workload the resource rejects a paused holder's stale "
                   "write (client-pause); a majority restarted empty makes fences regress",
            options={"fence": "nextid"},
        ),
        _redlock(
            name="redlock-no-validity", unsafe=True,
            description="redlock without Redlock's elapsed-time check: a quorum of "
                        "grants is the lock however late its replies are read, and the "
                        "lease runs a whole TTL from then",
            fence=None,
            expect="a client stopped with its grants unread (client-pause --pause-at "
                   "acquire, a pause longer than the TTL) wakes up holding keys that "
                   "expired meanwhile and overlaps the next holder; pottery's check "
                   "(redlock) refuses the same late grant",
            options={"validity": False},
        ),
        _etcd(
            name="etcd",
            description="etcd 3.4 cluster: v3lock (the server-side Mutex recipe) over the "
                        "JSON gateway with a lease per grant, renewed by keepalive, released "
                        "by revoke; a watcher thread reports a lost lease",
            fence="create_revision of the lock key (cluster-wide monotonic, one per grant)",
            expect="safe under partition, kill and pause; a holder paused past its lease "
                   "(client-pause) gives overlapping holders, which the fence stops at "
                   "the resource",
        ),
        _etcd(
            name="etcd-lease-fence",
            description="etcd as above, but the lease ID is used as the fence (etcd's own "
                        "contrib/lock example); workers start on different members",
            fence="lease ID (high bits: the member that granted it; not monotonic)",
            expect="fences go backwards across members even without faults: the fencing "
                   "checker reports regressions and the fenced resource refuses current "
                   "holders",
            options={"fence": "lease"}, unsafe=True,
        ),
        _etcd(
            name="etcd-no-keepalive",
            description="etcd as above, but nothing keeps the lease alive: renew() only "
                        "extends the client's own belief (a keepalive thread that died "
                        "silently)",
            fence="create_revision of the lock key",
            expect="a critical section longer than the lease (--hold-ms above 2 s) overlaps "
                   "the next holder with no fault at all",
            options={"keepalive": False}, unsafe=True,
        ),
        _etcd(
            name="etcd-jepsen", unsafe=True,
            description="etcd as above with the discipline of Jepsen's etcd lock client: "
                        "each client talks to one member, and a failed or refused "
                        "keepalive never stops its critical section (no watcher)",
            fence="create_revision of the lock key",
            expect="with --workload lock-set, a holder whose member is paused, killed or "
                   "cut off (pause, kill, partition) loses its lease, finishes its "
                   "section anyway and writes over the next holder's add: lost updates, "
                   "as Jepsen found; the default etcd client stops instead",
            options={"heed_lease": False, "stick": True},
        ),
        _etcd(
            name="etcd3gw-with",
            description="etcd3gw's Lock (one transaction on /locks/<name>) used through "
                        "`with`, which enters whether or not acquire() got the lock",
            client="lockcheck.locks.etcd3gw_lock:make_clients", library="etcd3gw",
            fence=None,
            expect="overlapping holders with no fault at all: every contended acquire "
                   "enters the critical section; the release then says not-owner",
            unsafe=True,
        ),
        _sentinel(
            name="redis-sentinel",
            description="a Redis primary, replicas and a Sentinel per node (quorum: a "
                        "majority); redis-py Sentinel.master_for finds the primary, the "
                        "redis backend's Lua lock and fence counter run there",
            expect="safe without faults; a failover (partition-primary, failover) loses "
                   "keys the old primary granted, so the lock is granted twice, and a "
                   "primary restarted empty (kill, kill-primary) wipes its replicas",
        ),
        _sentinel(
            name="redis-sentinel-wait", unsafe=True,
            description="redis-sentinel, and every grant and renewal waits for all "
                        "replicas to acknowledge it (WAIT); fewer in time is info",
            expect="no overlapping holders under partition-primary or failover in our "
                   "runs (a grant the replicas lack is never believed), at the cost of no "
                   "lock while any replica is missing; a primary restarted empty (kill) "
                   "still wipes its replicas",
            options={"wait_replicas": "all"},
        ),
        _sentinel(
            name="redis-sentinel-wait-one", unsafe=True, default_nodes=5,
            description="redis-sentinel, and every grant and renewal waits for one "
                        "replica to acknowledge it (WAIT 1), not for all of them",
            expect="with 5 nodes, a partition that leaves the primary and one replica on "
                   "one side (partition-halves) lets the primary's holders renew, WAIT "
                   "satisfied by that replica, while the other side fails over to a "
                   "replica that never saw their grants and grants the lock again",
            options={"wait_replicas": 1},
        ),
        _sentinel(
            name="redis-sentinel-min-replicas", unsafe=True,
            description="redis-sentinel, and each Redis refuses writes unless a replica "
                        "acknowledged it within 1 s (min-replicas-to-write 1)",
            expect="a cut-off primary refuses writes within 1-2 s (NOREPLICAS), so in our "
                   "runs holders' 1 s leases ran out before the failover: no overlap, by "
                   "timing; fences still repeat, and a primary restarted empty still wipes "
                   "its replicas",
            options={"min_replicas": 1},
        ),
        _postgres(
            name="postgres",
            description="a lease table: INSERT ... ON CONFLICT DO UPDATE WHERE "
                        "expired by the server's clock, renew/release by owner and fence",
            fence="the lease row's counter, +1 from the row on every grant, kept across "
                  "releases",
            fence_counts_grants=True,
            expect="safe under partitions, kills, pauses and failover (the lease lives in "
                   "a row, expired by the server's clock); that clock moved forward "
                   "(clock-bump, clock-rate) grants a held lease again; a paused holder "
                   "(client-pause) overlaps the next one, and the fence stops its stale "
                   "write",
            options={"lock": "lease-table",
                     "setup": "lockcheck.locks.postgres:create_schema"},
        ),
        _postgres(
            name="postgres-advisory",
            description="session pg_try_advisory_lock on the worker's one autocommit "
                        "connection (tooz, django-pglocks); no TTL",
            fence=None,
            expect="a holder whose session is terminated (failover) keeps working until "
                   "its next query while another client already holds the lock; a paused "
                   "holder (client-pause) keeps its lock: there is no TTL",
            options={"lock": "advisory", "advisory_key": "stable"},
            unsafe=True,
        ),
        _postgres(
            name="postgres-advisory-hash",
            description="session advisory lock keyed by Python's hash(name) & 0x7FFFFFFF, "
                        "which is salted per process",
            fence=None,
            expect="no mutual exclusion even without faults: each worker process locks a "
                   "different key for the same name",
            options={"lock": "advisory", "advisory_key": "python-hash"},
            unsafe=True,
        ),
        _zookeeper(
            name="zookeeper",
            description="ZooKeeper ensemble (session timeout = TTL): kazoo's Lock recipe, "
                        "retries off, SUSPENDED treated as lost, a lease clock, renewal by "
                        "sync + exists of the lock's own znode",
            expect="safe under partition, kill and pause (a minority cannot grant); a "
                   "paused holder (client-pause) overlaps the next holder, stops at once "
                   "when it resumes, and its stale write is refused by the czxid fence",
        ),
        _zookeeper(
            name="zookeeper-no-listener", unsafe=True,
            options={"listen": None, "trust_flag": True},
            description="kazoo's Lock trusted as users often do: no state listener, no "
                        "lease clock, lock.is_acquired as the only belief",
            expect="a holder paused past its session timeout (client-pause) keeps working "
                   "after it resumes while another client holds the lock (is_acquired "
                   "stays True); the czxid fence still refuses its stale write",
        ),
        _zookeeper(
            name="zookeeper-lost-only", unsafe=True,
            options={"listen": "lost", "trust_flag": True},
            description="kazoo's Lock with a listener that reacts to LOST only (the common "
                        "usage), no lease clock",
            expect="a holder cut off by a partition stays SUSPENDED and keeps working after "
                   "its session expired and the lock went to another client, until it "
                   "reconnects and hears LOST (partition-holder cuts off a holder at every "
                   "fault)",
        ),
        _zookeeper(
            name="zookeeper-seq-fence", options={"fence": "sequence"},
            fence="sequence suffix of the lock's own znode (per lock path)",
            description="the default zookeeper client, fenced with the znode's sequence "
                        "number instead of its czxid",
            expect="the same as zookeeper: the sequence grows per lock path while the path "
                   "is never deleted, so the resource refuses stale writes just as well",
        ),
        _memory(
            name="memory",
            description="lockcheck's own lock server, one process per node: leases with "
                        "a TTL by the server's wall clock, a fence per grant, nothing "
                        "kept on disk",
            expect="safe without faults; a server restarted empty (kill) grants a held "
                   "lock again and its fences go back; a paused holder (client-pause) "
                   "overlaps the next one; a server clock moved forward (clock-bump) "
                   "expires a held lease",
        ),
        _memory(
            name="memory-no-ttl", unsafe=True,
            description="lockcheck's own lock server with leases that never expire: a "
                        "lock is held until its holder releases it",
            expect="a server paused with an acquire in flight (pause) grants it after "
                   "the client gave up on the reply: nobody releases that lock, so the "
                   "recovery phase fails; a restart empty (kill) still gives overlapping "
                   "holders",
            options={"ttl": False},
        ),
        _memory(
            name="memory-no-lock", unsafe=True,
            description="no lock at all: lockcheck's own lock server granting every "
                        "acquire at once, each with the next fence; for what a resource's "
                        "own concurrency control does alone (--workload settlement "
                        "--resource row-lock or version)",
            expect="mutual exclusion fails at once, with no fault; a resource that "
                   "keeps itself consistent (a row lock, a version check, an idempotency "
                   "key) still settles each merchant-day once",
            options={"exclusion": False},
        ),
    ]
}


# families whose entries live beside their own modules, each a "module:attr" naming a
# tuple of Backend (`lockcheck/families/`)
FAMILIES = ("lockcheck.families.dynamodb:BACKENDS", "lockcheck.families.consul:BACKENDS",
            "lockcheck.families.azure_blob:BACKENDS", "lockcheck.families.gcs:BACKENDS")


def _with_families(built_in: dict[str, Backend]) -> dict[str, Backend]:
    table = dict(built_in)
    for ref in FAMILIES:
        for b in load(ref):
            if b.name in table:
                raise RuntimeError(f"backend {b.name} is defined twice ({ref})")
            table[b.name] = b
    return table


BACKENDS: dict[str, Backend] = _with_families(_BUILT_IN)


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise BadInput(f"unknown backend {name!r}; available: {', '.join(BACKENDS)} "
                       "(see: lockcheck backends)") from None
