"""The consul backends: a Consul cluster (one server agent per node) and lockcheck's own
client of its sessions and KV locks (`lockcheck/locks/consul.py`)."""

from __future__ import annotations

from typing import Any

from lockcheck.backend import Backend
from lockcheck.servers import program

# Consul 1.8.7 as Debian 11 built it: no newer build is on the registries lockcheck
# installs from; extracted under lockcheck's own folder, never installed as a package
SERVERS = {program("consul"): "deb:bullseye:consul=1.8.7+dfsg1-2+b3"}
MIN_TTL_MS = 10_000  # Consul refuses session TTLs under 10 s


def _consul(**kw: Any) -> Backend:
    base: dict[str, Any] = dict(
        family="consul", db="lockcheck.db.consul:ConsulDB",
        client="lockcheck.locks.consul:make_clients", library="requests",
        servers=SERVERS, server="consul", default_nodes=3, min_ttl_ms=MIN_TTL_MS)
    return Backend(**{**base, **kw})


BACKENDS: tuple[Backend, ...] = (
    _consul(
        name="consul",
        description="Consul 1.8 cluster: a session per grant (TTL = --ttl-ms, at least "
                    "10 s; lock-delay = TTL; behavior release) renewed every TTL/3, "
                    "PUT ?acquire on the lock key, released by ?release",
        fence="ModifyIndex of the acquire (a Raft index: cluster-wide monotonic, kept "
              "across restarts)",
        expect="safe under partition, kill and pause (a minority cannot grant; a killed "
               "server restarts on its data); a holder paused past its session "
               "(client-pause, more than 2x TTL + lock-delay) overlaps the next one, and "
               "the fence stops its stale write",
    ),
    _consul(
        name="consul-lockindex-fence", unsafe=True,
        description="consul as above, but the key's LockIndex is the fence, and a "
                    "release deletes the key when nobody took it meanwhile (a tidy KV)",
        fence="LockIndex of the lock key (counts the key's grants only while the key "
              "exists: 1 again after a delete)",
        expect="fences go back to 1 with no fault at all: the fencing checker reports "
               "regressions and the fenced resource refuses current holders",
        options={"fence": "lock-index"},
    ),
    _consul(
        name="consul-no-ttl", unsafe=True,
        description="consul with py-consul's default session: no TTL, lock-delay 15 s, "
                    "ended only by the serf health of the agent it was made on; renewal "
                    "only confirms the session exists",
        fence="ModifyIndex of the acquire",
        expect="a holder cut off from everyone (partition-holder) keeps its lock for as "
               "long as its agent lives: nobody takes it again and the recovery phase "
               "fails",
        options={"ttl": False},
    ),
)
