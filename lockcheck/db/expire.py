"""End every lease a lock service holds now, as if each one's TTL had just passed.

What a holder that renews must notice and be told: its lock gone on the server while
it still works (`client-check`'s step "a lock taken away under its renewing holder").
Each service's way keeps what has no TTL, so only what could expire does:

* Redis: every key with a TTL is deleted (fence counters, which have none, stay);
* etcd: every lease is revoked (its keys go with it, as at expiry);
* Consul: every session is destroyed (its locks are released, as at its TTL);
* PostgreSQL: every row of lockcheck's lease table expires, and every session that
  holds an advisory lock is ended (an advisory lock lives as long as its session).

Each returns what it did, in a few words, for the step's line.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

TIMEOUT_S = 5.0


def expire_redis(servers: Iterable[tuple[str, int]]) -> str:
    import redis
    import redis.exceptions as rex

    gone = 0
    for host, port in servers:
        r = redis.Redis(host=host, port=port, socket_timeout=TIMEOUT_S,
                        socket_connect_timeout=TIMEOUT_S)
        try:
            for k in list(r.scan_iter(count=1000)):
                if int(r.pttl(k)) > 0:
                    gone += int(r.delete(k))
        except rex.ReadOnlyError:  # a replica: its primary's deletions reach it
            continue
        finally:
            r.close()
    return f"deleted {gone} key(s) with a TTL"


def _post(url: str, body: Mapping[str, Any] | None, method: str = "POST") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def expire_etcd(endpoints: list[str]) -> str:
    """Every lease any member knows of, revoked, until none is left: a member that
    lags in applying the log does not list a lease granted a moment ago (seen on a
    loaded machine: the holder's lease missed, an old one revoked instead)."""
    revoked: set[str] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        ids: set[str] = set()
        for e in endpoints:
            listed = (_post(f"{e.rstrip('/')}/v3/lease/leases", {}) or {}).get("leases")
            ids |= {str(x["ID"]) for x in listed or []}
        if not ids or time.monotonic() > deadline:
            break
        for lid in ids:
            with contextlib.suppress(urllib.error.HTTPError):  # gone meanwhile (its TTL)
                _post(f"{endpoints[0].rstrip('/')}/v3/lease/revoke", {"ID": lid})
            revoked.add(lid)
    return f"revoked {len(revoked)} lease(s)"


def expire_consul(endpoints: list[str]) -> str:
    base = endpoints[0].rstrip("/")
    sessions = _post(f"{base}/v1/session/list", None, method="GET") or []
    for s in sessions:
        _post(f"{base}/v1/session/destroy/{s['ID']}", None, method="PUT")
    return f"destroyed {len(sessions)} session(s)"


def expire_postgres(conninfo: Mapping[str, Any], table: str) -> str:
    import psycopg

    with psycopg.connect(**conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        rows = 0
        if exists and exists[0]:
            cur = conn.execute(f"UPDATE {table} SET expires_at = clock_timestamp() "
                               "- interval '1 ms' WHERE owner IS NOT NULL")
            rows = cur.rowcount
        ended = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM (SELECT DISTINCT pid FROM pg_locks"
            " WHERE locktype = 'advisory' AND pid <> pg_backend_pid()) AS holders").fetchone()
    return (f"expired {rows} lease row(s), ended {ended[0] if ended else 0} session(s) "
            "holding advisory locks")
