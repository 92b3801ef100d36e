"""What Azurite honours of Azure Blob Storage's lease contract, clause by clause.

A lock on Blob leases relies on a handful of the service's promises: a create that
refuses to overwrite, leases of 15-60 s or infinite, one lease at a time, writes to a
leased blob refused without the lease id, renew, release, break, expiry by time. Each
clause below says what Azure does (from the Lease Blob and Put Blob references) and
whether Azurite 3.37.0 does the same (`honoured`, as measured). The probes check a
running blob service against Azure's side: a clause's probe is True when the service
refused what Azure refuses and granted what Azure grants. A test runs them against a
real Azurite (the table must match it) and against a stand-in that grants everything
(they must catch it).

The backend refuses a variant whose `options["needs"]` names a clause the stand-in does
not honour (`refuse_unhonoured`), with one line naming it: a run could not show on
Azurite what the variant is about.

Clauses without a probe are known from elsewhere: restarts (in memory everything is
lost; the disk store brings held leases back expired) and the request date, which
Azurite never checks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lockcheck.errors import BadInput

CONTAINER = "lockcheck-contract"
MIN_LEASE_S = 15


@dataclass(frozen=True)
class Clause:
    name: str
    azure: str  # what Azure does
    honoured: bool  # whether Azurite 3.37.0 does the same (measured)
    # (container client) -> the service did what Azure does; None: not probed here
    probe: Callable[[Any], bool] | None = None
    timed: bool = False  # the probe waits out a 15 s lease
    note: str = ""  # where Azurite differs, and what that rules out


def _refusal(fn: Callable[[], object], status: int, *codes: str) -> bool:
    """`fn` was refused with `status` (and one of `codes`, when given)."""
    from azure.core.exceptions import HttpResponseError

    from lockcheck.locks.azure_blob import error_code

    try:
        fn()
    except HttpResponseError as e:
        code = error_code(e)
        return e.status_code == status and (not codes or code in codes)
    return False


def _granted(fn: Callable[[], object]) -> bool:
    from azure.core.exceptions import HttpResponseError

    try:
        fn()
    except HttpResponseError:
        return False
    return True


def _blob(container: Any) -> Any:
    """A fresh blob of the probe's own, with some content."""
    blob = container.get_blob_client(f"probe-{uuid.uuid4().hex}")
    blob.upload_blob(b"x")
    return blob


def _lease(blob: Any, seconds: int = MIN_LEASE_S) -> Any:
    from azure.storage.blob import BlobLeaseClient

    lease = BlobLeaseClient(blob, lease_id=str(uuid.uuid4()))
    lease.acquire(lease_duration=seconds)
    return lease


def _other(blob: Any) -> Any:
    from azure.storage.blob import BlobLeaseClient

    return BlobLeaseClient(blob, lease_id=str(uuid.uuid4()))


def create_if_absent(c: Any) -> bool:
    blob = _blob(c)
    fresh = c.get_blob_client(f"probe-{uuid.uuid4().hex}")
    return (_refusal(lambda: blob.upload_blob(b"y", overwrite=False), 409,
                     "BlobAlreadyExists")
            and _granted(lambda: fresh.upload_blob(b"y", overwrite=False)))


def lease_durations(c: Any) -> bool:
    def lease_of(seconds: int) -> Callable[[], object]:
        return lambda: _lease(_blob(c), seconds)

    ok = all(_granted(lease_of(s)) for s in (15, 60, -1))
    return ok and all(_refusal(lease_of(s), 400) for s in (10, 61, 0))


def one_lease_at_a_time(c: Any) -> bool:
    blob = _blob(c)
    _lease(blob)
    return _refusal(lambda: _other(blob).acquire(lease_duration=MIN_LEASE_S), 409,
                    "LeaseAlreadyPresent")


def same_id_acquires_again(c: Any) -> bool:
    blob = _blob(c)
    lease = _lease(blob)
    return _granted(lambda: lease.acquire(lease_duration=MIN_LEASE_S))


def _writes(blob: Any, lease: object) -> list[Callable[[], object]]:
    """Every kind of write the lock and its resource make, with `lease` (None: none)."""
    kw = {} if lease is None else {"lease": lease}
    return [lambda: blob.upload_blob(b"z", overwrite=True, **kw),
            lambda: blob.set_blob_metadata({"fence": "9"}, **kw),
            lambda: blob.delete_blob(**kw)]


def writes_need_the_lease_id(c: Any) -> bool:
    blob = _blob(c)
    _lease(blob)
    return all(_refusal(w, 412, "LeaseIdMissing") for w in _writes(blob, None))


def writes_need_the_right_lease_id(c: Any) -> bool:
    blob = _blob(c)
    _lease(blob)
    wrong = str(uuid.uuid4())
    return all(_refusal(w, 412, "LeaseIdMismatchWithBlobOperation")
               for w in _writes(blob, wrong))


def holder_writes_and_keeps_the_lease(c: Any) -> bool:
    blob = _blob(c)
    lease = _lease(blob)
    wrote = _granted(lambda: blob.upload_blob(b"z", overwrite=True, lease=lease.id)) \
        and _granted(lambda: blob.set_blob_metadata({"fence": "1"}, lease=lease.id))
    read = _granted(lambda: blob.download_blob().readall())  # reads need no lease
    props = blob.get_blob_properties()
    return wrote and read and props.lease.state == "leased" \
        and props.metadata.get("fence") == "1"


def renew(c: Any) -> bool:
    blob = _blob(c)
    lease = _lease(blob)
    return _granted(lease.renew) and _refusal(_other(blob).renew, 409)


def release(c: Any) -> bool:
    blob = _blob(c)
    lease = _lease(blob)
    return (_refusal(_other(blob).release, 409) and _granted(lease.release)
            and _granted(lambda: _other(blob).acquire(lease_duration=MIN_LEASE_S)))


def break_lease(c: Any) -> bool:
    blob = _blob(c)
    lease = _lease(blob)
    _other(blob).break_lease(lease_break_period=0)
    return (_refusal(lease.renew, 409, "LeaseIsBrokenAndCannotBeRenewed")
            and _refusal(lambda: blob.set_blob_metadata({"fence": "9"}, lease=lease.id), 412)
            and _granted(lambda: _other(blob).acquire(lease_duration=MIN_LEASE_S))
            and _refusal(lambda: blob.set_blob_metadata({"fence": "9"}, lease=lease.id), 412))


@dataclass
class Expired:
    """Blobs whose 15 s leases were left to run out (one wait for every timed clause)."""

    taken: tuple[Any, Any]  # blob, its lease: another client asks after expiry
    kept: tuple[Any, Any]  # the holder renews after expiry, nothing changed
    modified: tuple[Any, Any]  # written without a lease after expiry, then renewed


_expired: dict[int, Expired] = {}


def _expired_of(c: Any) -> Expired:
    """Lease three blobs, wait for their leases to run out (once per container)."""
    if id(c) not in _expired:
        made = [_blob(c) for _ in range(3)]
        pairs = [(b, _lease(b)) for b in made]
        time.sleep(MIN_LEASE_S + 1.0)
        _expired[id(c)] = Expired(*pairs)
    return _expired[id(c)]


def expiry_by_time(c: Any) -> bool:
    blob, old = _expired_of(c).taken
    return (_granted(lambda: _other(blob).acquire(lease_duration=MIN_LEASE_S))
            and _refusal(old.renew, 409))


def renew_after_expiry(c: Any) -> bool:
    _, lease = _expired_of(c).kept
    return _granted(lease.renew)


def renew_after_modify_refused(c: Any) -> bool:
    blob, lease = _expired_of(c).modified
    if not _granted(lambda: blob.upload_blob(b"w", overwrite=True)):
        return False  # an expired lease lets a write without the id through
    return _refusal(lease.renew, 409)


CLAUSES: tuple[Clause, ...] = (
    Clause("create-if-absent", "a create that must not overwrite (If-None-Match: *) "
           "is refused 409 BlobAlreadyExists on an existing blob", True, create_if_absent),
    Clause("lease-durations", "leases of 15-60 s or infinite (-1) are granted; 10, 61 "
           "and 0 s are refused 400", True, lease_durations),
    Clause("one-lease-at-a-time", "an acquire with another id on a leased blob is "
           "refused 409 LeaseAlreadyPresent", True, one_lease_at_a_time),
    Clause("same-id-acquires-again", "an acquire with the id of the lease the blob has "
           "is granted (a retried acquire is safe)", True, same_id_acquires_again),
    Clause("writes-need-the-lease-id", "a write, metadata write or delete of a leased "
           "blob without a lease id is refused 412 LeaseIdMissing", True,
           writes_need_the_lease_id),
    Clause("writes-need-the-right-lease-id", "with another lease id: refused 412 "
           "LeaseIdMismatchWithBlobOperation", True, writes_need_the_right_lease_id),
    Clause("holder-writes", "the holder's writes with its lease id are granted and "
           "keep the lease; reads need no lease", True, holder_writes_and_keeps_the_lease),
    Clause("renew", "the holder's renew is granted; another id's is refused 409", True,
           renew),
    Clause("release", "another id's release is refused 409; the holder's frees the "
           "blob for the next acquire", True, release),
    Clause("break", "after a break (period 0) the old id's renew is refused 409 and its "
           "writes 412; a new acquire is granted", True, break_lease),
    Clause("expiry-by-time", "a lease not renewed for its duration has expired: another "
           "id's acquire is granted and the old id's renew refused", True, expiry_by_time,
           timed=True),
    Clause("renew-after-expiry", "the holder may renew an expired lease nobody took "
           "and nobody wrote", True, renew_after_expiry, timed=True),
    Clause("renew-after-modify-refused", "an expired lease is not renewed once the "
           "blob was written after it expired (409)", True, renew_after_modify_refused,
           timed=True,
           note="reported open against Azurite (Azure/Azurite#2352), but 3.37.0 refuses "
                "the renewal after a Put Blob or a metadata write without a lease id "
                "(the write frees the lease)"),
    Clause("restart-keeps-leases", "leases are the service's durable state: a lease "
           "outlives any server's restart", False,
           note="a restarted Azurite loses every lease (in memory) or brings held "
                "leases back expired (disk store): kill is refused"),
    Clause("request-date-checked", "a Shared Key request whose date is too far from "
           "the service's clock is refused 403", False,
           note="Azurite takes any date: a client's clock cannot make its requests fail "
                "here as it would on Azure"),
)

BY_NAME = {c.name: c for c in CLAUSES}


def _probe(clause: Clause, container: Any) -> bool:
    assert clause.probe is not None
    try:
        return bool(clause.probe(container))
    except Exception:  # an answer the SDK cannot read, or an unexpected refusal: a
        return False  # service that does not do what Azure does


def check(container: Any, *, timed: bool = True,
          only: Iterable[str] | None = None) -> dict[str, bool]:
    """Run the probes against a blob service's container: clause -> the service did
    what Azure does. `timed=False` leaves out the clauses that wait out a lease."""
    names = set(only) if only is not None else None
    return {c.name: _probe(c, container) for c in CLAUSES
            if c.probe is not None and (timed or not c.timed)
            and (names is None or c.name in names)}


def disagreements(measured: dict[str, bool]) -> list[str]:
    """The clauses where a service behaved otherwise than the table says Azurite does,
    each with what Azure does."""
    return [f"{name}: {'honoured' if got else 'not honoured'} ({BY_NAME[name].azure})"
            for name, got in measured.items() if got != BY_NAME[name].honoured]


def honoured() -> dict[str, bool]:
    """The table: clause -> Azurite 3.37.0 honours it."""
    return {c.name: c.honoured for c in CLAUSES}


def refuse_unhonoured(backend: str, needs: Iterable[str]) -> None:
    """Refuse, in one line, a backend variant that needs a clause the stand-in does not
    honour: its runs could only show the emulator."""
    for name in needs:
        clause = BY_NAME.get(name)
        if clause is None:
            raise ValueError(f"unknown Azure lease clause {name!r}")
        if not clause.honoured:
            raise BadInput(f"backend {backend} needs Azure's {name} ({clause.azure}), "
                           f"which Azurite does not honour: {clause.note}")
