"""GCS locks on generation preconditions, with google-cloud-storage (on fake-gcs-server).

lockcheck's own client. One object per lock name in one bucket (made once per run,
`create_bucket`, `Backend.options["setup"]`); its content is JSON, `{"owner": token or
null, "fence": n}`. Every write is a multipart upload with a generation precondition,
the one kind of conditional call the stand-in honours (`gcs_contract`): nothing here
deletes or patches.

* Acquire reads the object (content and generation in one download). No object: a
  create-only upload (`ifGenerationMatch=0`) with fence 1. Free (`owner` null): an
  overwrite on the generation read, with fence n+1. Held: the generation read starts
  (or keeps) this client's timer, on its own monotonic clock, taken when the read's
  reply is in; once the same generation has stood a whole TTL the waiter overwrites
  it (a takeover) with fence n+1. A holder renews every TTL/3, and each renewal is a
  new generation, so only a holder that stopped renewing for a whole TTL is taken
  over; its belief, which counts from its renewal's invoke, is over by then.
* Renew rewrites the same content on the lease's generation; release writes the free
  marker (`owner` null, the fence kept) on it, never a delete, so the counter carries
  on across releases: every grant is one conditional write of fence n+1 over the
  version that had n, so the fences of a name count its grants one by one.
* A 412 on renew or release is followed by one read: if the object is still this
  grant's (an earlier write of ours whose reply was lost moved the generation on), the
  write is made again on the generation read; else NotOwner.
* A 412 is definite (busy, not-owner); a write that may have reached the server with
  no reply (a read timeout, a connection lost after sending, a 5xx) is indefinite; a
  read that failed in any way is definite (it changed nothing, and an op whose read
  failed wrote nothing). The
  SDK's retries are off (`retry=None`), every request has a timeout, the session
  ignores proxy settings and opens a connection per request (`locks.http`).

Variants (`options`):

* `expiry: "client-clock"` (`gcs-client-clock`): gcslock's rule. A held object is
  taken over once its `updated` time (the server's) plus the TTL is behind the
  taker's wall clock: a client whose clock runs ahead takes a held lock.
* `retry: "default"` (`gcs-retry`): the SDK's default retry of a conditional upload
  (`DEFAULT_RETRY_IF_GENERATION_SPECIFIED`), its deadline cut to 10 s, on the SDK's
  own kind of session (connections kept open). A
  grant whose reply was lost is sent again and refused by its own first write (412):
  the client says busy for a grant the server made.
"""

from __future__ import annotations

import datetime
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
from lockcheck.locks.gcs_contract import refuse_unhonoured
from lockcheck.locks.http import http_session, request_error
from lockcheck.locks.takeover import Observations

BUCKET = "lockcheck-locks"
PROJECT = "lockcheck"
# the operations (of `gcs_contract.OPERATIONS`) this client's calls rely on
CALLS: dict[str, str] = {
    "create-only": "Blob.upload_from_string(if_generation_match=0) (acquire of a new name)",
    "overwrite-if-generation": "Blob.upload_from_string(if_generation_match=<generation>) "
                               "(acquire, renew, release)",
    "create-only-race": "racing create-only uploads (acquire of a new name)",
    "read-generation": "Blob.download_as_bytes and Bucket.get_blob (the generation and "
                       "`updated` a waiter reads)",
}


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextmanager
def mapped_errors() -> Iterator[None]:
    """The one place where what google-cloud-storage raises becomes Definite,
    Indefinite or NotOwner (a 412: the caller turns it into busy on an acquire)."""
    from google.api_core import exceptions as gx
    from google.auth import exceptions as ga
    from google.cloud.storage import exceptions as media

    try:
        yield
    except gx.PreconditionFailed as e:
        raise NotOwner("not-owner") from e
    except gx.GoogleAPICallError as e:  # the server answered with an error
        code = e.code if isinstance(e.code, int) else 0
        message = _short(f"{code} {e.message}")
        if 400 <= code < 500:
            raise Definite(message) from e  # refused as asked: bad request, no bucket
        raise Indefinite(message) from e  # 5xx: it may have been applied
    except gx.RetryError as e:  # the retry's deadline passed: any attempt may have landed
        raise Indefinite(_short(f"retries ran out: {e.cause or e}")) from e
    except media.InvalidResponse as e:  # an upload's reply with an unexpected status
        status = getattr(e.response, "status_code", 0)
        if status == 412:
            raise NotOwner("not-owner") from e
        raise (Definite if 400 <= status < 500 else Indefinite)(
            _short(f"{status} {e}")) from e
    except media.DataCorruption as e:  # a download whose checksum failed
        raise Indefinite(_short(str(e))) from e
    except (rqe.RequestException, OSError) as e:
        raise request_error(e) from e
    except ga.GoogleAuthError as e:  # before anything was sent
        raise Definite(_short(str(e))) from e


# -- the object's state ------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """One version of a lock's object: its generation, owner (None: free), fence and
    the server's `updated` time (read only by the client-clock rule)."""

    generation: int
    owner: str | None
    fence: int
    updated: datetime.datetime | None = None


def encode(owner: str | None, fence: int) -> bytes:
    return json.dumps({"owner": owner, "fence": fence}, sort_keys=True).encode()


def decode(generation: int, data: bytes,
           updated: datetime.datetime | None = None) -> State:
    try:
        body = json.loads(data)
        owner, fence = body["owner"], body["fence"]
    except (ValueError, KeyError, TypeError) as e:
        raise Indefinite(f"the lock object is not lockcheck's ({_short(repr(data), 40)})") \
            from e
    if (owner is not None and not isinstance(owner, str)) or not isinstance(fence, int):
        raise Indefinite("the lock object is not lockcheck's")
    return State(generation, owner, fence, updated)


# -- the client --------------------------------------------------------------------------


def storage_client(endpoint: str, keep_alive: bool = False) -> Any:
    """A google-cloud-storage client of the stand-in: anonymous, lockcheck's session
    (no proxies, no urllib3 retries, a connection per request); `keep_alive`: the
    SDK's own kind of session instead, which keeps its connections open (no proxies
    either)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    session = http_session()
    if keep_alive:
        session = requests.Session()
        session.trust_env = False  # traffic stays on the run's bridge
    return storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": endpoint}, _http=session)


RETRY_DEADLINE_S = 10.0  # the SDK's is 120 s: one op must not outlast a short run


def retry_policy(kind: str) -> Any:
    """None (one attempt), or the SDK's default for conditional uploads (first retry
    after 1 s, doubling) with its deadline cut to RETRY_DEADLINE_S."""
    if kind != "default":
        return None
    from google.cloud.storage.retry import (
        DEFAULT_RETRY,
        ConditionalRetryPolicy,
        is_generation_specified,
    )

    return ConditionalRetryPolicy(DEFAULT_RETRY.with_timeout(RETRY_DEADLINE_S),
                                  is_generation_specified, ["query_params"])


class GCSLockClient:
    """The lock client of `--backend gcs` and its variants; one per worker."""

    def __init__(self, client: Any, *, ttl_ms: int, timeout_s: float, drift: float = 0.01,
                 expiry: str = "generation", retry: str = "off",
                 monotonic_ns: Callable[[], int] = time.monotonic_ns,
                 wall: Callable[[], float] = time.time) -> None:
        self.client, self.ttl_ms, self.timeout_s, self.drift = client, ttl_ms, timeout_s, drift
        self.bucket = client.bucket(BUCKET)
        self.client_clock = expiry == "client-clock"
        self.retry = retry_policy(retry)
        self.now_ns, self.wall = monotonic_ns, wall
        self.observed: Observations[int] = Observations(lease_ns=ttl_ms * 1_000_000)
        self.generations: dict[str, int] = {}  # a lease's token -> its object's generation

    # -- requests

    def read(self, key: str) -> State | None:
        """The lock's object now (None: there is none). A read changes nothing, so a
        read that got no answer is a definite failure of the op that made it: an
        acquire that never wrote granted nothing."""
        try:
            return self._read(key)
        except Indefinite as e:
            raise Definite(f"read: {e}") from e

    def _read(self, key: str) -> State | None:
        from google.api_core import exceptions as gx

        blob = self.bucket.blob(key)
        try:
            with mapped_errors():
                if self.client_clock:  # `updated` is in the metadata, not the download
                    meta = self.bucket.get_blob(key, retry=None, timeout=self.timeout_s)
                    if meta is None:
                        return None
                    data = blob.download_as_bytes(if_generation_match=meta.generation,
                                                  retry=None, timeout=self.timeout_s)
                    return decode(int(meta.generation), data, meta.updated)
                data = blob.download_as_bytes(retry=None, timeout=self.timeout_s)
        except Definite as e:
            if isinstance(e.__cause__, gx.NotFound):
                return None
            raise
        if blob.generation is None:
            raise Indefinite("a download without its generation")
        return decode(int(blob.generation), data)

    def write(self, key: str, owner: str | None, fence: int, generation: int) -> int:
        """Upload the content if the object's generation is `generation` (0: there is
        none): the new generation."""
        blob = self.bucket.blob(key)
        with mapped_errors():
            blob.upload_from_string(encode(owner, fence), content_type="application/json",
                                    if_generation_match=generation, retry=self.retry,
                                    timeout=self.timeout_s)
        if blob.generation is None:
            raise Indefinite("an upload's reply without its generation")
        return int(blob.generation)

    # -- the lock

    def acquire(self, key: str) -> Lease | None:
        t0 = self.now_ns()
        token = uuid.uuid4().hex
        state = self.read(key)
        now = self.now_ns()  # after the read's reply: later than the holder's last write
        if state is None:
            generation, fence = 0, 1
        elif state.owner is None or self._expired(key, state, now):
            generation, fence = state.generation, state.fence + 1
        else:
            self.observed.observe(key, state.generation, now)
            return None
        try:
            new = self.write(key, token, fence, generation)
        except NotOwner:  # another grant, renewal or release came first
            return None
        self.observed.observe(key, None, now)
        self.generations[token] = new
        return Lease(key=key, token=token, fence=fence, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def _expired(self, key: str, state: State, now_ns: int) -> bool:
        if self.client_clock:
            if state.updated is None:
                return False
            expires = state.updated.timestamp() + self.ttl_ms / 1000.0
            return expires < self.wall()
        self.observed.observe(key, state.generation, now_ns)
        return self.observed.expired(key, state.generation, now_ns)

    def _rewrite(self, lease: Lease, owner: str | None) -> int:
        """A write of this grant's object on its generation; after a 412, once more on
        the generation read if the object is still this grant's."""
        try:
            return self.write(lease.key, owner, int(lease.fence or 0),
                              self.generations.get(lease.token, -1))
        except NotOwner:
            state = self.read(lease.key)
            if state is None or state.owner != lease.token:
                raise
            return self.write(lease.key, owner, int(lease.fence or 0), state.generation)

    def renew(self, lease: Lease) -> None:
        t0 = self.now_ns()
        try:
            self.generations[lease.token] = self._rewrite(lease, lease.token)
        except NotOwner:
            lease.lost = True
            raise
        lease.valid_until_ns = max(lease.valid_until_ns,
                                   lease_deadline(t0, self.ttl_ms, self.drift))

    def release(self, lease: Lease) -> None:
        try:
            self._rewrite(lease, None)
        finally:
            self.generations.pop(lease.token, None)

    def close(self) -> None:
        self.client.close()


def create_bucket(config: Mapping[str, Any], spec: object = None) -> None:
    """The lock bucket, once per run, from the controller (`Backend.options["setup"]`),
    before any worker starts; an existing one is kept. A variant that needs a call the
    stand-in does not honour is refused here first."""
    from google.api_core import exceptions as gx

    refuse_unhonoured("this backend", CALLS)
    client = storage_client(str(config["endpoint"]))
    try:
        client.create_bucket(BUCKET, retry=None, timeout=10.0)
    except gx.Conflict:
        pass
    finally:
        client.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """One client per worker, shared by every lock name."""
    o = opts.options
    retry = str(o.get("retry", "off"))
    # the retry variant runs the SDK's defaults: its retry and its keep-alive session
    client = GCSLockClient(storage_client(str(config["endpoint"]), keep_alive=retry != "off"),
                           ttl_ms=opts.ttl_ms,
                           timeout_s=opts.op_timeout_s, drift=opts.drift,
                           expiry=str(o.get("expiry", "generation")),
                           retry=retry)
    return {k: client for k in keys}
