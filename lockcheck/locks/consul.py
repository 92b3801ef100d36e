"""Consul's sessions and KV locks over its HTTP API, with `requests`.

lockcheck's own client, the way Consul's documentation builds a lock. Python's
libraries offer the session and KV calls, not a lock recipe, and this client does
not use py-consul for those calls either: the Consul lock libraries on PyPI
(consul-lock, consullock, consulock) depend on python-consul, which installs a module
of the same name, `consul`, over py-consul's, so the two cannot share a virtualenv.
Plain HTTP with `requests` also gives each request its own timeout and no retries,
which the error mapping below relies on. The calls are the ones py-consul's
`session.create`, `kv.put(acquire=...)` and `session.renew` make:

* A session per grant (`/v1/session/create`) with TTL = the run's TTL (Consul refuses
  TTLs under 10 s: `Backend.min_ttl_ms`), `behavior=release`, and a lock-delay of the
  TTL. The session keeps Consul's default health check, the serf health of the agent
  that created it, so it may be invalidated early when that agent fails; the lock-delay
  then keeps the lock from anyone else for as long as a holder's belief can last.
* Acquire is `PUT /v1/kv/<key>?acquire=<session>`; the session ID is the owner token.
* The fence is the ModifyIndex of the acquire, read back with a consistent read that
  also checks the key is still locked by our session: a Raft index, cluster-wide
  monotonic, unique to the grant, and kept across restarts (the data directory).
  Not the LockIndex, which starts again at 1 whenever the key is deleted (the
  `consul-lockindex-fence` variant shows it going back).
* Renewal every TTL/3 is `/v1/session/renew`; a session not found is not-owner. The
  client believes it holds the lock for the TTL from the renewal's invoke, never
  longer: Consul may keep a session up to twice its TTL, but what a rival can rely on
  is the TTL, so the belief must not outlast it.
* Release is `PUT ?release=<session>` (no lock-delay, unlike a destroyed session),
  then the session is destroyed; `false` means the session no longer held the key.
* An acquire whose reply is lost destroys its session: once that went through, no key
  can be locked by it, and the acquire is a definite failure; otherwise it is `info`.
* Every request has a timeout, goes over a fresh connection, is never retried,
  ignores proxy settings, and after an error the next request goes to the next agent.

Variants (`options`):

* `fence: "lock-index"` (`consul-lockindex-fence`): the LockIndex is the fence, and a
  release tidies up by deleting the key when nobody took it meanwhile (a `cas` delete
  on the index the release left): the next grant of that key gets LockIndex 1 again.
* `ttl: False` (`consul-no-ttl`): py-consul's default session, with no TTL and a
  lock-delay of 15 s, tied only to the serf health of the agent it was made on. A
  holder cut off from everyone (partition-holder) leaves its lock held as long as
  that agent lives: nobody can take it again.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import requests
import requests.exceptions as rqe

from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    NotOwner,
    lease_deadline,
)
from lockcheck.locks.http import http_session, request_error
from lockcheck.locks.http import short as _short

PREFIX = "lockcheck-locks/"
NO_EXPIRY_NS = 2**63 - 1  # the no-TTL variant: a session that never expires by itself
PY_CONSUL_LOCK_DELAY = "15s"  # py-consul's default session (consul-no-ttl)
# replies after which nothing was applied: the request never reached a leader, or the
# state machine refused it (a session that no longer exists)
DEFINITE_MESSAGES = ("no cluster leader", "invalid session", "permission denied")


class ConsulReplyError(Exception):
    """Consul answered with an HTTP error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


class SessionGone(ConsulReplyError):
    """The session named in a renewal does not exist any more (404)."""


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place where what `requests` and Consul raise becomes Definite,
    Indefinite or NotOwner."""
    try:
        yield
    except SessionGone as e:
        raise NotOwner("not-owner") from e
    except ConsulReplyError as e:
        raise _reply_kind(e) from e
    except (rqe.RequestException, OSError) as e:
        raise request_error(e) from e


def _reply_kind(e: ConsulReplyError) -> Definite | Indefinite:
    if any(m in e.message.lower() for m in DEFINITE_MESSAGES):
        return Definite(_short(e.message))
    if 400 <= e.status < 500:  # refused as asked: bad request, ACL, rate limit
        return Definite(_short(e.message))
    return Indefinite(_short(e.message))  # 5xx: may come after the write was proposed


def duration(ms: int) -> str:
    """A Go duration, as Consul's API takes TTLs and lock-delays."""
    return f"{ms}ms"


def kv_path(key: str) -> str:
    return "/v1/kv/" + urllib.parse.quote(PREFIX + key, safe="/:")


class Agents:
    """HTTP calls to the Consul servers, one at a time, moving on after an error."""

    def __init__(self, endpoints: Sequence[str], first: int = 0) -> None:
        self.endpoints = list(endpoints)
        self.at = first % len(self.endpoints)
        self.http: requests.Session = http_session()

    def call(self, method: str, path: str, timeout: float, *,
             params: Mapping[str, str] | None = None, body: Any = None,
             missing_ok: bool = False) -> Any:
        """The reply as JSON (None for a 404 when `missing_ok`); ConsulReplyError or a
        `requests` exception otherwise."""
        timeout = max(timeout, 0.001)
        try:
            r = self.http.request(method, self.endpoints[self.at] + path,
                                  params=dict(params or {}),
                                  json=body, timeout=(timeout, timeout),
                                  allow_redirects=False)
        except rqe.RequestException:
            self.move_on()
            raise
        if r.status_code == 404 and missing_ok:
            return None
        if r.status_code != 200:
            text = r.text.strip()[:120] or f"HTTP {r.status_code}"
            if r.status_code == 404 and path.startswith("/v1/session/"):
                raise SessionGone(text, 404)
            if r.status_code >= 500:
                self.move_on()
            raise ConsulReplyError(text, r.status_code)
        return r.json()

    def move_on(self) -> None:
        self.at = (self.at + 1) % len(self.endpoints)

    def close(self) -> None:
        self.http.close()


class ConsulLockClient:
    """The lock client for `--backend consul` and its variants; one per worker."""

    def __init__(self, endpoints: Sequence[str], *, first: int = 0, ttl_ms: int,
                 op_timeout_s: float, drift: float = 0.01, fence: str = "modify-index",
                 ttl: bool = True) -> None:
        self.ttl_ms, self.op_timeout_s, self.drift = ttl_ms, op_timeout_s, drift
        self.fence_source = fence
        self.expires = ttl
        self.agents = Agents(endpoints, first)

    def _left(self, deadline: float) -> float:
        return deadline - time.monotonic()

    def _deadline(self, t0: int) -> int:
        return lease_deadline(t0, self.ttl_ms, self.drift) if self.expires else NO_EXPIRY_NS

    def session_body(self) -> dict[str, Any]:
        if not self.expires:  # what py-consul's session.create() sends by default
            return {"LockDelay": PY_CONSUL_LOCK_DELAY, "Behavior": "release"}
        return {"Name": "lockcheck", "TTL": duration(self.ttl_ms),
                "LockDelay": duration(self.ttl_ms), "Behavior": "release"}

    def acquire(self, key: str) -> Lease | None:
        t0 = time.monotonic_ns()
        deadline = t0 / 1e9 + self.op_timeout_s
        try:
            with mapped_errors():
                session = str(self.agents.call("PUT", "/v1/session/create",
                                               self._left(deadline),
                                               body=self.session_body())["ID"])
        except Indefinite as e:
            # a session nobody locks with holds nothing (and one with a TTL expires)
            raise Definite(f"session: {e}") from e
        except (KeyError, TypeError) as e:
            raise Definite("session: no ID in the reply") from e
        # keep a third of the time to destroy a session whose grant went unanswered
        reserve = self.op_timeout_s / 3
        try:
            with mapped_errors():
                got = self.agents.call("PUT", kv_path(key), self._left(deadline) - reserve,
                                       params={"acquire": session})
        except Definite:
            self._destroy_quietly(session, deadline)
            raise
        except Indefinite as e:
            if self._destroy_quietly(session, deadline):
                raise Definite(f"no grant in time ({e}); session destroyed") from e
            raise
        if got is not True:  # held by another session, or within a lock-delay
            self._destroy_quietly(session, deadline)
            return None
        lease = Lease(key=key, token=session, fence=None, ttl_ms=self.ttl_ms,
                      valid_until_ns=self._deadline(t0))
        try:
            with mapped_errors():
                entry = self._read(key, self._left(deadline))
        except (Definite, Indefinite) as e:
            # granted, but with no fence it is no use: give it back, outcome unknown
            self._release_quietly(key, session, deadline)
            raise Indefinite(f"fence: {e}") from e
        if entry is None or entry.get("Session") != session:
            lease.lost = True  # granted, and already gone (the session was invalidated)
        else:
            lease.fence = int(entry["LockIndex" if self.fence_source == "lock-index"
                                    else "ModifyIndex"])
        return lease

    def _read(self, key: str, timeout: float) -> dict[str, Any] | None:
        entries = self.agents.call("GET", kv_path(key), timeout, params={"consistent": ""},
                                   missing_ok=True)
        return entries[0] if isinstance(entries, list) and entries else None

    def _destroy_quietly(self, session: str, deadline: float) -> bool:
        """Destroy a session with what is left of the op's time; True if it is gone (no
        key can then be locked by it)."""
        try:
            with mapped_errors():
                self.agents.call("PUT", f"/v1/session/destroy/{session}",
                                 max(self._left(deadline), 0.05))
        except NotOwner:
            return True
        except (Definite, Indefinite):
            return False
        return True

    def _release_quietly(self, key: str, session: str, deadline: float) -> None:
        try:
            with mapped_errors():
                self.agents.call("PUT", kv_path(key), max(self._left(deadline), 0.05),
                                 params={"release": session})
        except (Definite, Indefinite):
            pass  # the session's TTL ends it
        self._destroy_quietly(session, deadline)

    def renew(self, lease: Lease) -> None:
        t0 = time.monotonic_ns()
        try:
            with mapped_errors():
                reply = self.agents.call("PUT", f"/v1/session/renew/{lease.token}",
                                         self.op_timeout_s)
        except NotOwner:
            lease.lost = True
            raise
        if not reply:  # an empty list: no such session
            lease.lost = True
            raise NotOwner("not-owner")
        lease.valid_until_ns = max(lease.valid_until_ns, self._deadline(t0))

    def release(self, lease: Lease) -> None:
        deadline = time.monotonic() + self.op_timeout_s
        with mapped_errors():
            released = self.agents.call("PUT", kv_path(lease.key), self.op_timeout_s,
                                        params={"release": lease.token})
        if released is not True:
            self._destroy_quietly(lease.token, deadline)
            raise NotOwner("not-owner")
        if self.fence_source == "lock-index":
            self._tidy_up(lease.key, deadline)
        self._destroy_quietly(lease.token, deadline)

    def _tidy_up(self, key: str, deadline: float) -> None:
        """Delete the released key unless someone locked or changed it since: the next
        grant of it then starts from LockIndex 1 again."""
        try:
            with mapped_errors():
                entry = self._read(key, max(self._left(deadline), 0.05))
                if entry is not None and not entry.get("Session"):
                    self.agents.call("DELETE", kv_path(key), max(self._left(deadline), 0.05),
                                     params={"cas": str(entry["ModifyIndex"])})
        except (Definite, Indefinite):
            pass  # the lock is released either way

    def close(self) -> None:
        self.agents.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker for every lock name; workers start on different agents."""
    o = opts.options
    client = ConsulLockClient(
        [str(e) for e in config["endpoints"]], first=opts.worker, ttl_ms=opts.ttl_ms,
        op_timeout_s=opts.op_timeout_s, drift=opts.drift,
        fence=str(o.get("fence", "modify-index")), ttl=bool(o.get("ttl", True)))
    return {k: client for k in keys}
