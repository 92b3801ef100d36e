"""etcd's own lock service (v3lock) over its JSON gateway, with `requests`.

No Python library wraps v3lock, so this is a small client of ours: one lease per grant
(`/v3/lease/grant`), `/v3/lock/lock` with it (the server runs etcd's concurrency Mutex
recipe with our lease: a key `<name>/<lease hex>`, the lowest create revision under the
name holds the lock), `/v3/lease/keepalive` to renew, `/v3/lease/revoke` to release.

* The fence is the lock key's `create_revision`: cluster-wide monotonic and unique to
  this grant. Not the reply's header revision (after a wait it is the revision of the
  recipe's last read) and not the lease ID (which member answered decides its high
  bits: the `etcd-lease-fence` variant shows it going backwards).
* A lease per grant makes the lock key unique per grant, so a stale release can never
  delete a later lock of ours (etcd-io/etcd#22082), and the lease ID is the owner token.
* Release revokes the lease, which deletes the lock key in the same raft entry and
  answers "lease not found" when the lease had already expired: the not-owner signal.
  `/v3/lock/unlock` is a delete by name that answers OK whether or not the key was
  still there, so it cannot say that.
* A lock request blocks on the server while another holds the name; it is bounded by
  the op timeout. After a timeout the waiter may still be granted later, to nobody, so
  the lease is revoked: once that is done no key of the lease exists or can appear, and
  the acquire is a definite failure. If the revoke does not go through either, the
  acquire is `info`.
* Every request has a timeout, goes over a fresh connection (a refused or timed-out
  connect certainly sent nothing), is never retried, ignores proxy settings, and after
  an error the next request goes to the next member.
* A watcher thread asks the service (`/v3/lease/timetolive`, which extends nothing)
  whether a held lease still exists and sets `lease.lost` when it is gone. Renewal
  stays the worker's recorded keepalive: a thread that renewed too would extend
  leases the history never shows, and the lease-safety checker would then under-count
  how long a lease was valid.
* `heed_lease: False` and `stick: True` (the `etcd-jepsen` variant) are the discipline
  of Jepsen's etcd lock client: each client talks to one member only, and nothing
  about its lease stops its critical section. A failed, timed-out or refused
  keepalive is a `fail` of the renewal and the section carries on; no watcher. (A
  timed-out keepalive may still have gone through: recorded as `fail`, the
  lease-safety checker counts that lease shorter than it may have been, which can
  hide a fault of the service but never invent one.)
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

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

GRANT, KEEPALIVE, REVOKE = "/v3/lease/grant", "/v3/lease/keepalive", "/v3/lease/revoke"
TIME_TO_LIVE, LOCK, RANGE = "/v3/lease/timetolive", "/v3/lock/lock", "/v3/kv/range"

# gRPC codes etcd uses for requests it refused before proposing anything
DEFINITE_CODES = {3: "InvalidArgument", 5: "NotFound", 6: "AlreadyExists",
                  7: "PermissionDenied", 8: "ResourceExhausted", 9: "FailedPrecondition",
                  11: "OutOfRange", 12: "Unimplemented", 16: "Unauthenticated"}
# every other code (Canceled, Unknown, DeadlineExceeded, Aborted, Internal,
# Unavailable, DataLoss) may come after a proposal: the request may still be applied
LEASE_GONE = "requested lease not found"
SESSION_EXPIRED = "session is expired"  # the Mutex recipe found its key gone after a wait


class EtcdReplyError(Exception):
    """The gateway answered with an error: gRPC `code` (None if the reply had none)."""

    def __init__(self, message: str, code: int | None, status: int) -> None:
        super().__init__(message)
        self.message, self.code, self.status = message, code, status


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place where what `requests` and etcd raise becomes Definite or Indefinite."""
    try:
        yield
    except EtcdReplyError as e:
        raise _reply_kind(e) from e
    except (rqe.RequestException, OSError) as e:
        raise request_error(e) from e


def _reply_kind(e: EtcdReplyError) -> Definite | Indefinite:
    if LEASE_GONE in e.message:
        return NotOwner("not-owner")
    if SESSION_EXPIRED in e.message:
        return Definite("lease expired")
    if e.code in DEFINITE_CODES or (e.code is None and 400 <= e.status < 500):
        return Definite(_short(e.message))
    return Indefinite(_short(e.message))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def server_ttl_s(ttl_ms: int) -> int:
    """etcd grants whole seconds (and at least 1.5x its election timeout); the client's
    own lease clock keeps counting `ttl_ms`, the shorter of the two."""
    return max(1, -(-ttl_ms // 1000))


class Gateway:
    """JSON calls to an etcd cluster, one member at a time, moving on after an error."""

    def __init__(self, endpoints: Sequence[str], first: int = 0, stick: bool = False) -> None:
        self.endpoints = list(endpoints)
        self.at = first % len(self.endpoints)
        self.stick = stick  # one member for good, as Jepsen's clients
        self.http = http_session()

    def move_on(self) -> None:
        if not self.stick:
            self.at = (self.at + 1) % len(self.endpoints)

    def call(self, path: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """POST `body`; the reply, or EtcdReplyError / a `requests` exception."""
        timeout = max(timeout, 0.001)
        try:
            r = self.http.post(self.endpoints[self.at] + path, json=dict(body),
                               timeout=(timeout, timeout), allow_redirects=False)
        except rqe.RequestException:
            self.move_on()
            raise
        if r.status_code != 200:
            err = reply_error(r.text, r.status_code)
            if err.code not in DEFINITE_CODES:
                self.move_on()
            raise err
        data = r.json()
        if not isinstance(data, dict):
            raise rqe.JSONDecodeError("not an object", r.text, 0)
        # a streaming call (keepalive) reports its error inside a 200 reply
        if isinstance(data.get("error"), dict):
            raise reply_error(r.text, r.status_code, data["error"])
        return data

    def close(self) -> None:
        self.http.close()


def reply_error(text: str, status: int, err: Mapping[str, Any] | None = None
                 ) -> EtcdReplyError:
    if err is None:
        try:
            err = json.loads(text)
        except ValueError:
            err = None
    if not isinstance(err, Mapping):
        return EtcdReplyError(f"HTTP {status}: {text.strip()[:60]}", None, status)
    code = err.get("code", err.get("grpc_code"))
    message = str(err.get("message") or err.get("error") or f"HTTP {status}")
    return EtcdReplyError(message, code if isinstance(code, int) else None, status)


class LeaseWatcher:
    """A thread that asks the service whether held leases still exist (read-only)."""

    def __init__(self, gateway: Gateway, interval_s: float, timeout_s: float) -> None:
        self.gateway, self.interval_s, self.timeout_s = gateway, interval_s, timeout_s
        self.held: dict[str, tuple[int, Lease]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="etcd-lease-watcher",
                                       daemon=True)
        self.thread.start()

    def watch(self, lease_id: int, lease: Lease) -> None:
        with self.lock:
            self.held[lease.token] = (lease_id, lease)

    def forget(self, lease: Lease) -> None:
        with self.lock:
            self.held.pop(lease.token, None)

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            with self.lock:
                held = list(self.held.values())
            for lease_id, lease in held:
                try:
                    reply = self.gateway.call(TIME_TO_LIVE, {"ID": str(lease_id)},
                                              self.timeout_s)
                except (EtcdReplyError, rqe.RequestException, ValueError):
                    continue  # no answer tells nothing; the worker's own clock decides
                # -1: no such lease. 0 only means under a second left: not lost yet
                if int(reply.get("TTL", 0)) < 0:
                    lease.lost = True
                    self.forget(lease)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2 * self.timeout_s + self.interval_s)
        self.gateway.close()


class EtcdLockClient:
    """The lock client for `--backend etcd` and its variants; one per worker."""

    def __init__(self, endpoints: Sequence[str], *, first: int = 0, ttl_ms: int,
                 op_timeout_s: float, drift: float = 0.01, fence: str = "create_revision",
                 keepalive: bool = True, heed_lease: bool = True,
                 stick: bool = False) -> None:
        self.ttl_ms, self.op_timeout_s, self.drift = ttl_ms, op_timeout_s, drift
        self.fence_source = fence
        self.keepalive = keepalive
        self.heed_lease = heed_lease
        self.gateway = Gateway(endpoints, first, stick)
        self.server_ttl_s = server_ttl_s(ttl_ms)
        self.leases: dict[str, int] = {}  # token -> lease ID
        self.watcher = (LeaseWatcher(Gateway(endpoints, first, stick), ttl_ms / 4000.0,
                                     op_timeout_s) if keepalive and heed_lease else None)

    def _left(self, deadline: float) -> float:
        return deadline - time.monotonic()

    def acquire(self, key: str) -> Lease | None:
        t0 = time.monotonic_ns()
        deadline = t0 / 1e9 + self.op_timeout_s
        gw = self.gateway
        try:
            with mapped_errors():
                lease_id = int(gw.call(GRANT, {"TTL": self.server_ttl_s},
                                       self._left(deadline))["ID"])
        except Indefinite as e:
            # a lease nobody uses expires by itself; no lock was asked for yet
            raise Definite(f"grant: {e}") from e
        # keep a third of the time to revoke a lease whose lock did not come in time
        reserve = self.op_timeout_s / 3
        try:
            with mapped_errors():
                reply = gw.call(LOCK, {"name": b64(key), "lease": str(lease_id)},
                                self._left(deadline) - reserve)
        except NotOwner as e:
            raise Definite("lease expired") from e
        except Definite:
            self._revoke_quietly(lease_id, deadline)
            raise
        except Indefinite as e:
            if self._revoke_quietly(lease_id, deadline):
                raise Definite(f"no grant in time ({e}); lease revoked") from e
            raise
        lock_key = base64.b64decode(reply["key"]).decode()
        token = f"{lease_id:x}"
        lease = Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                      valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))
        if self.fence_source == "lease":
            lease.fence = lease_id
        else:
            try:
                with mapped_errors():
                    kvs = gw.call(RANGE, {"key": b64(lock_key)},
                                  self._left(deadline)).get("kvs", [])
            except (Definite, Indefinite) as e:
                # granted, but with no fence it is no use: give it back, outcome unknown
                self._revoke_quietly(lease_id, deadline)
                raise Indefinite(f"fence: {e}") from e
            if kvs:
                lease.fence = int(kvs[0]["create_revision"])
            elif self.heed_lease:
                lease.lost = True  # granted, and its lease already gone
        self.leases[token] = lease_id
        if self.watcher is not None:
            self.watcher.watch(lease_id, lease)
        return lease

    def _revoke_quietly(self, lease_id: int, deadline: float) -> bool:
        """Revoke with what is left of the op's time; True if no key of it can exist."""
        try:
            with mapped_errors():
                self.gateway.call(REVOKE, {"ID": str(lease_id)},
                                  max(self._left(deadline), 0.01))
        except NotOwner:
            return True  # already gone: its keys went with it
        except (Definite, Indefinite):
            return False
        return True

    def renew(self, lease: Lease) -> None:
        t0 = time.monotonic_ns()
        if self.keepalive:
            try:
                self._keepalive(lease)
            except (Definite, Indefinite) as e:
                if self.heed_lease:
                    raise
                # etcd-jepsen: noted, and the section carries on
                raise Definite(f"{e or type(e).__name__} (ignored)"[:80]) from e
        # (etcd-no-keepalive: nothing is sent, yet the client believes it renewed)
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def _keepalive(self, lease: Lease) -> None:
        with mapped_errors():
            reply = self.gateway.call(KEEPALIVE, {"ID": str(self.leases[lease.token])},
                                      self.op_timeout_s)
        # an unknown or expired lease comes back without a TTL
        if int(reply.get("result", {}).get("TTL", 0)) <= 0:
            if self.heed_lease:
                lease.lost = True
            raise NotOwner("not-owner")

    def release(self, lease: Lease) -> None:
        if self.watcher is not None:
            self.watcher.forget(lease)
        lease_id = self.leases.pop(lease.token)
        with mapped_errors():
            self.gateway.call(REVOKE, {"ID": str(lease_id)}, self.op_timeout_s)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
        self.gateway.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker for every lock name; workers start on different members."""
    o = opts.options
    client = EtcdLockClient(
        [str(e) for e in config["endpoints"]], first=opts.worker, ttl_ms=opts.ttl_ms,
        op_timeout_s=opts.op_timeout_s, drift=opts.drift,
        fence=str(o.get("fence", "create_revision")), keepalive=bool(o.get("keepalive", True)),
        heed_lease=bool(o.get("heed_lease", True)), stick=bool(o.get("stick", False)))
    return {k: client for k in keys}

