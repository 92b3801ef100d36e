"""`lockcheck client-check`: a lock client's contract, checked in seconds against live servers.

No faults and no history: three clients of the factory (as three workers would get;
two more, with step 8's TTL, for step 8) go through the steps a run relies on, in
order, and each step says what the client did wrong. A long run of a client that
grants a held lock, or whose release frees someone else's lock, finds "overlapping
holders" without saying why; these steps say why.

1. acquire a free lock: a Lease for that name, valid in the future;
2. a second client's acquire while it is held: refused (None);
3. renew: no error, the lease does not end sooner;
4. release, and the lock is free again (the second client gets it);
5. that holder stops renewing: after the TTL a third client gets the lock, and the old
   holder's lease clock says it ran out (meanwhile its acquire may be refused with
   Definite or Indefinite, as in step 2);
6. the expired holder's renew and release: refused with NotOwner, and the release must
   not free the current holder's lock;
7. a lease of another lock, taken as step 5 begins and left to lapse with B's, is
   granted to another client, which releases it (the lock is free): the lapsed holder's
   renew and then its release are refused with NotOwner, and a third client gets the
   lock (a renew that re-creates a lock it no longer had leaves a ghost holder);
8. a lease of a TTL that is not whole seconds (1500 ms, or the backend's minimum in whole
   seconds plus a half) is held, not renewed: another client, acquiring again and again,
   must not get the lock before that TTL, less the clock-drift bound and 2 ms, has passed
   since the acquire was sent (a TTL rounded down to whole seconds ends sooner);
9. a lock taken away under its renewing holder (every lease ended on the server, as
   if its TTL had passed: `ExpiresLeases`): within one renewal interval (a third of the
   TTL) the client says the lease is lost, or its next renew is refused (NotOwner); a
   renew that succeeds leaves a holder working without a lock and never told;
10. every server stopped: acquire ends in Definite or Indefinite within the timeout, not
   in an exception the client does not map.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockcheck.backend import Backend
from lockcheck.backends import backend
from lockcheck.clients import ResolvedClient, check_shape, close_all, load_factory, resolve_client
from lockcheck.cluster.api import DB, ExpiresLeases, Killable
from lockcheck.cluster.state import Registry
from lockcheck.errors import BadInput
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, LockClient, NotOwner
from lockcheck.runner import Plan, Teardown, no_interrupts, plan, servers_up
from lockcheck.spec import TTL_NOT_GIVEN, TestSpec

KEY = "client-check"
# Step 7's lock: a lease that lapses beside step 5's, renewed and released only once,
# as a worker does (a client may forget a lease once it has released it).
GHOST_KEY = KEY + "-ghost"
SHORT_KEY = KEY + "-ttl"  # step 8's own lock: nothing earlier steps left on KEY bears on it
AWAY_KEY = KEY + "-away"  # step 9's lock, taken away under its holder
# Step 8's tolerance besides the drift bound: a service that keeps expiry times in whole
# milliseconds (Redis truncates its clock to the millisecond when it sets PX, and again
# when it compares) can free a lease up to a millisecond early at each end.
SHORT_TTL_SLACK_MS = 2.0


class StepTimeout(Exception):
    pass


def call(fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
    """`fn(*args)` on a thread of its own, so that a client that hangs is reported, not
    waited for (the thread is left behind; the check ends soon after)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise StepTimeout(f"did not return within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def describe(e: BaseException) -> str:
    if isinstance(e, (Definite, Indefinite)):
        return f"{type(e).__name__}({str(e)[:60]!r})"
    name = f"{type(e).__module__}.{type(e).__qualname__}".removeprefix("builtins.")
    return f"{name}: {' '.join(str(e).split())[:80]}"


def ends_in(lease: Lease) -> str:
    left_ms = (lease.valid_until_ns - time.monotonic_ns()) / 1e6
    if left_ms > 1e9:
        return "the lease has no end of its own (held until the client says it is lost)"
    return f"the lease ends in {left_ms:.0f} ms"


def lockcheck_error(e: BaseException) -> bool:
    return isinstance(e, (Definite, Indefinite))


@dataclass
class Report:
    say: Callable[[str], None]
    problems: list[str] = field(default_factory=list)

    def ok(self, step: str, detail: str) -> None:
        self.say(f"  ok    {step}: {detail}")

    def note(self, step: str, detail: str) -> None:
        self.say(f"  note  {step}: {detail}")

    def bad(self, step: str, detail: str) -> None:
        self.problems.append(f"{step}: {detail}")
        self.say(f"  FAIL  {step}: {detail}")


class Steps:
    """The steps, on three clients A, B and C of the same factory."""

    def __init__(self, clients: Mapping[str, LockClient], ghost: Mapping[str, LockClient],
                 ttl_ms: int, timeout: float, report: Report) -> None:
        self.a, self.b, self.c = clients["A"], clients["B"], clients["C"]
        self.ghost = ghost  # A, B and C's clients of GHOST_KEY
        self.ttl_ms, self.timeout, self.r = ttl_ms, timeout, report
        # step 7 reports a mistake step 6 already reported as a note, not a second FAIL
        self.expired_renew_succeeded = False
        self.non_owner_release_succeeded = False
        self.expires = False  # step 5 saw the lease end (step 8 needs a lease that does)

    def acquire(self, client: LockClient) -> Lease | None:
        lease: Lease | None = call(client.acquire, KEY, timeout=self.timeout)
        return lease

    def run(self) -> None:
        a = self.first_grant()
        if a is None:
            return
        self.second_refused()
        self.renew(a)
        if not self.release_frees(a):
            return
        self.expiry()

    def first_grant(self) -> Lease | None:
        step = "acquire a free lock"
        try:
            lease = self.acquire(self.a)
        except Exception as e:
            self.r.bad(step, f"raised {describe(e)}; nothing else can be checked")
            return None
        if lease is None:
            self.r.bad(step, "refused (None) although nobody holds it; nothing else can be "
                             "checked")
            return None
        if not isinstance(lease, Lease):
            self.r.bad(step, f"returned a {type(lease).__name__}; it must return a "
                             "lockcheck.api.Lease or None")
            return None
        wrong = []
        if lease.key != KEY:
            wrong.append(f"key {lease.key!r} (asked for {KEY!r})")
        if not lease.token:
            wrong.append("an empty token (each grant needs its own)")
        if lease.ttl_ms <= 0:
            wrong.append(f"ttl_ms {lease.ttl_ms}")
        if lease.valid_until_ns <= time.monotonic_ns():
            wrong.append("valid_until_ns already past (use lease_deadline)")
        if lease.fence is not None and not isinstance(lease.fence, int):
            wrong.append(f"a fence of type {type(lease.fence).__name__} (int or None)")
        if wrong:
            self.r.bad(step, "granted, but the lease has " + "; ".join(wrong))
        else:
            fence = "none" if lease.fence is None else str(lease.fence)
            self.r.ok(step, f"granted (fence {fence}; {ends_in(lease)})")
        return lease

    def second_refused(self) -> None:
        step = "a second client's acquire while it is held"
        try:
            lease = self.acquire(self.b)
        except Exception as e:
            if lockcheck_error(e):
                self.r.ok(step, f"refused ({describe(e)})")
            else:
                self.r.bad(step, f"raised {describe(e)}, which the client does not map; a "
                                 "lock held by someone else is None")
            return
        if lease is None:
            self.r.ok(step, "refused")
            return
        self.r.bad(step, "GRANTED while the first client holds the lock: no mutual "
                         "exclusion at all")
        with contextlib.suppress(Exception):
            call(self.b.release, lease, timeout=self.timeout)

    def renew(self, a: Lease) -> None:
        step = "renew"
        before = a.valid_until_ns
        try:
            call(self.a.renew, a, timeout=self.timeout)
        except Definite as e:
            if isinstance(e, NotOwner):
                self.r.bad(step, "the holder's renew said NotOwner")
            else:  # a client that cannot renew (the library has no way to)
                self.r.note(step, f"refused with {describe(e)}: a holder must finish "
                                  "within its lease")
            return
        except Exception as e:
            self.r.bad(step, f"the holder's renew raised {describe(e)}")
            return
        if a.valid_until_ns < before:
            self.r.bad(step, "the lease ends sooner after the renew (valid_until_ns went "
                             "down)")
        else:
            self.r.ok(step, f"renewed: {ends_in(a)}")

    def release_frees(self, a: Lease) -> bool:
        step = "release"
        try:
            call(self.a.release, a, timeout=self.timeout)
        except Exception as e:
            self.r.bad(step, f"the holder's release raised {describe(e)}")
            return False
        try:
            b = self.acquire(self.b)
        except Exception as e:
            self.r.bad(step, f"released, but the next acquire raised {describe(e)}")
            return False
        if b is None:
            self.r.bad(step, "released, but another client is still refused: the lock "
                             "was not freed")
            return False
        self.r.ok(step, "the lock is free again (another client got it)")
        self.b_lease = b
        return True

    def expiry(self) -> None:
        """B holds and stops renewing; C should get the lock after the TTL."""
        step = "the lease expires when its holder stops renewing"
        b = self.b_lease
        deadline = time.monotonic() + 3 * self.ttl_ms / 1000
        lapsing = self.lapse_beside()
        time.sleep(self.ttl_ms / 1000 * 1.2)
        c = None
        while True:
            try:
                c = self.acquire(self.c)
            except Exception as e:
                # a client that says "held" as Definite (as step 2 allows) polls on
                if not lockcheck_error(e):
                    self.r.bad(step, f"an acquire after the TTL raised {describe(e)}")
                    self.give_back(lapsing)
                    return
                c = None
            if c is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if c is None:
            self.r.note(step, f"still held {3 * self.ttl_ms} ms after its holder stopped "
                              "renewing: the lock has no TTL, or renews itself; the "
                              "expired-holder steps are skipped")
            self.give_back(lapsing)
            return
        if b.still_holds():
            self.r.bad(step, "another client got the lock while the old holder's lease "
                             "says it is still valid: valid_until_ns must end before the "
                             "service can grant the lock again (lease_deadline)")
        else:
            self.r.ok(step, "another client got it after the TTL, and the old holder's "
                            "lease clock had run out")
        self.expires = True
        self.renew_after_expiry(b)
        self.release_by_non_owner(b)
        with contextlib.suppress(Exception):
            call(self.c.release, c, timeout=self.timeout)
        if isinstance(lapsing, str):
            self.r.note("the expired holder after the lock was freed", lapsing)
        # a deadline of its own: a waiter that expires a lease by its own timer (dynamodb,
        # gcs) starts that timer at its first read, which comes only now
        elif self.regrant_and_free(lapsing, time.monotonic() + 3 * self.ttl_ms / 1000):
            renewed = self.renew_after_freed(lapsing)
            self.release_after_freed(lapsing, renewed)

    def give_back(self, lapsing: Lease | str) -> None:
        """Step 7's lease, released when step 7 is skipped (a lock without a TTL)."""
        if isinstance(lapsing, Lease):
            with contextlib.suppress(Exception):
                call(self.ghost["A"].release, lapsing, timeout=self.timeout)

    def lapse_beside(self) -> Lease | str:
        """Step 7's lease, taken by A on GHOST_KEY and left to lapse during step 5's
        wait (no time of its own); or why there is none."""
        try:
            g = call(self.ghost["A"].acquire, GHOST_KEY, timeout=self.timeout)
        except Exception as e:
            return f"skipped: the acquire of another free lock raised {describe(e)}"
        if not isinstance(g, Lease):
            return "skipped: the acquire of another free lock was refused"
        return g

    def regrant_and_free(self, g: Lease, deadline: float) -> bool:
        """C is granted GHOST_KEY after g lapsed, and releases it: g was superseded and
        the lock is free. False (said why) if that could not be done."""
        step = "the expired holder after the lock was freed"
        while True:
            try:
                got = call(self.ghost["C"].acquire, GHOST_KEY, timeout=self.timeout)
            except Exception as e:
                if not lockcheck_error(e):
                    self.r.bad(step, f"an acquire after the TTL raised {describe(e)}")
                    return False
                got = None
            if got is not None:
                break
            if time.monotonic() > deadline:
                self.r.note(step, "skipped: its lapsed lock was still held "
                                  f"{3 * self.ttl_ms} ms after another client first asked "
                                  "for it")
                return False
            time.sleep(0.05)
        try:
            call(self.ghost["C"].release, got, timeout=self.timeout)
        except Exception as e:
            self.r.note(step, f"skipped: the holder's release raised {describe(e)}")
            return False
        return True

    def renew_after_expiry(self, b: Lease) -> None:
        step = "renew by the expired holder"
        try:
            call(self.b.renew, b, timeout=self.timeout)
        except NotOwner:
            self.r.ok(step, "refused with NotOwner")
            return
        except Exception as e:
            if lockcheck_error(e):
                self.r.note(step, f"refused with {describe(e)}; NotOwner says what happened")
            else:
                self.r.bad(step, f"raised {describe(e)}, which the client does not map "
                                 "(NotOwner: the lock is no longer ours)")
            return
        self.expired_renew_succeeded = True
        self.r.bad(step, "SUCCEEDED although the lock belongs to another client now: the "
                         "renew must check the owner")

    def release_by_non_owner(self, b: Lease) -> None:
        step = "release by a non-owner (the expired holder)"
        raised: BaseException | None = None
        try:
            call(self.b.release, b, timeout=self.timeout)
        except Exception as e:
            raised = e
        if raised is None:
            self.non_owner_release_succeeded = True
        try:
            stolen = self.acquire(self.a)
        except Exception as e:
            if not lockcheck_error(e):  # Definite or Indefinite: refused, as in step 2
                self.r.bad(step, f"afterwards an acquire raised {describe(e)}")
                return
            stolen = None
        if stolen is not None:
            self.r.bad(step, "it FREED the current holder's lock (another client was "
                             "granted it right after): the release must check the owner, "
                             "in one step with the delete")
            with contextlib.suppress(Exception):
                call(self.a.release, stolen, timeout=self.timeout)
        elif raised is None:
            self.r.bad(step, "reported success; the lock stayed with its holder, but the "
                             "release must raise NotOwner")
        elif isinstance(raised, NotOwner):
            self.r.ok(step, "refused with NotOwner; the holder keeps the lock")
        elif lockcheck_error(raised):
            self.r.note(step, f"refused with {describe(raised)}; NotOwner says what "
                              "happened")
        else:
            self.r.bad(step, f"raised {describe(raised)}, which the client does not map "
                             "(NotOwner)")

    def take_and_give_back(self) -> Lease | BaseException | None:
        """B's acquire of GHOST_KEY (given back at once if granted): is it free?"""
        b = self.ghost["B"]
        try:
            got = call(b.acquire, GHOST_KEY, timeout=self.timeout)
        except Exception as e:
            return None if lockcheck_error(e) else e  # a refusal said as Definite: step 2
        if got is not None:
            with contextlib.suppress(Exception):
                call(b.release, got, timeout=self.timeout)
        return got

    def renew_after_freed(self, g: Lease) -> bool:
        """Step 7's renew: the lapsed lease was superseded by C's grant, and C let go.
        True if the renew succeeded."""
        step = "renew by the expired holder after the lock was freed"
        try:
            call(self.ghost["A"].renew, g, timeout=self.timeout)
        except NotOwner:
            self.r.ok(step, "refused with NotOwner")
            return False
        except Exception as e:
            if lockcheck_error(e):
                self.r.note(step, f"refused with {describe(e)}; NotOwner says what happened")
            else:
                self.r.bad(step, f"raised {describe(e)}, which the client does not map "
                                 "(NotOwner: the lock is no longer ours)")
            return False
        what = ("SUCCEEDED although another client had been granted the lock since this "
                "lease ran out, and had released it")
        probe = self.take_and_give_back()
        if isinstance(probe, BaseException):
            self.r.bad(step, f"{what}; then another client's acquire raised {describe(probe)}")
        elif probe is None:
            self.r.bad(step, f"{what}: the renew BROUGHT THE LOCK BACK (the next client's "
                             "acquire was refused); a renew must extend only the lock this "
                             "lease still holds, never take a free one")
        elif self.expired_renew_succeeded:
            self.r.note(step, "succeeded, as the renew above did; the lock stayed free")
        else:
            self.r.bad(step, f"{what}: its client now believes it holds a lock that is free "
                             "(another client got it); the renew must check the owner")
        return True

    def release_after_freed(self, g: Lease, renewed: bool) -> None:
        """Step 7's release, and a third client must then get the free lock."""
        step = "release by the expired holder after the lock was freed"
        raised: BaseException | None = None
        try:
            call(self.ghost["A"].release, g, timeout=self.timeout)
        except Exception as e:
            raised = e
        probe = self.take_and_give_back()
        if isinstance(probe, BaseException):
            self.r.bad(step, f"afterwards another client's acquire raised {describe(probe)}")
        elif probe is None:
            self.r.bad(step, "afterwards the lock is not free: another client's acquire was "
                             "refused, though the last client that was granted it released "
                             "it")
        elif isinstance(raised, NotOwner):
            self.r.ok(step, "refused with NotOwner; another client then got the lock")
        elif raised is not None and lockcheck_error(raised):
            self.r.note(step, f"refused with {describe(raised)}; NotOwner says what "
                              "happened")
        elif raised is not None:
            self.r.bad(step, f"raised {describe(raised)}, which the client does not map "
                             "(NotOwner)")
        elif renewed:
            self.r.note(step, "succeeded: it released what its renew had taken; another "
                              "client then got the lock")
        elif self.non_owner_release_succeeded:
            self.r.note(step, "reported success, as the release above did; another client "
                              "then got the lock")
        else:
            self.r.bad(step, "reported success for a lock it no longer held (it was free); "
                             "the release must raise NotOwner")


def take_free(client: LockClient, key: str, timeout: float, r: Report,
              step: str) -> Lease | None:
    """A step's own lock, free: its lease, or None with the step failed."""
    try:
        lease = call(client.acquire, key, timeout=timeout)
    except Exception as e:
        r.bad(step, f"the acquire of a free lock raised {describe(e)}")
        return None
    if not isinstance(lease, Lease):
        r.bad(step, "the acquire of a free lock was refused")
        return None
    return lease


def short_lease(holder: LockClient, other: LockClient, ttl_ms: int, drift: float,
                timeout: float, r: Report) -> None:
    """Step 8: a lease of `ttl_ms` (not whole seconds), never renewed, must keep `other`
    out for that long, by our clock less the drift bound (the lease_deadline rule).

    `other` polls. A grant that returns H ms after the holder's acquire was sent shows
    the lease lasted at most H ms (whenever the service applied either request); a
    refusal sent H ms after it shows it lasted at least H ms. The step ends at the first
    grant, or at the first refusal sent once the floor has passed: the lease lasted long
    enough, and its actual end (up to a second later on etcd, whose leases are whole
    seconds; twice the TTL on Consul) is not waited for."""
    step = f"a lease of {ttl_ms} ms lasts {ttl_ms} ms"
    t0 = time.monotonic_ns()
    lease = take_free(holder, SHORT_KEY, timeout, r, step)
    if lease is None:
        return
    floor_ms = ttl_ms * (1 - drift) - SHORT_TTL_SLACK_MS
    floor_ns = t0 + int(floor_ms * 1e6)
    while True:
        sent = time.monotonic_ns()
        try:
            got = call(other.acquire, SHORT_KEY, timeout=timeout)
        except Exception as e:
            if not lockcheck_error(e):  # a refusal said as Definite is a refusal (step 2)
                r.bad(step, f"another client's acquire raised {describe(e)}")
                return
            got = None
        now = time.monotonic_ns()
        if got is not None:
            break
        if sent >= floor_ns:
            r.ok(step, f"another client was still refused {(sent - t0) / 1e6:.0f} ms after "
                       "the acquire was sent")
            return
        time.sleep(min(0.02, max(0, floor_ns - now) / 1e9))
    held_ms = (now - t0) / 1e6
    with contextlib.suppress(Exception):
        call(other.release, got, timeout=timeout)
    if held_ms >= floor_ms:  # sent before the floor, answered after it: long enough
        r.ok(step, f"another client got it {held_ms:.0f} ms after the acquire was sent")
        return
    clock = (" (the holder's lease clock still said it held it)"
             if lease.valid_until_ns > now else "")
    r.bad(step, f"asked for {ttl_ms} ms, but another client was GRANTED the lock "
                f"{held_ms:.0f} ms after the acquire was sent{clock}: the lease is "
                "shorter than asked (a TTL rounded to whole seconds?)")


def short_ttl_ms(min_ttl_ms: int | None) -> int:
    """Step 8's TTL: whole seconds and a half (1500 ms), at least the service's minimum,
    so that a TTL cut to whole seconds loses 500 ms, far beyond any tolerance."""
    return max(1000, -(-(min_ttl_ms or 0) // 1000) * 1000) + 500


def taken_away(db: DB, holder: LockClient, other: LockClient, ttl_ms: int, timeout: float,
               r: Report) -> None:
    """Step 9: the holder's lease ended on the server while it holds the lock. A worker
    renews every third of the TTL; by then the client must have said the lease is lost
    (a library's own renewal thread sets `lost`), or that renew must be refused. A
    renewal thread that ignores a refusal, or dies on an error, is caught here: its
    holder's renew goes on succeeding."""
    step = "a lock taken away under its renewing holder"
    if not isinstance(db, ExpiresLeases):
        r.note(step, f"skipped: lockcheck cannot end {db.name}'s leases from outside")
        return
    lease = take_free(holder, AWAY_KEY, timeout, r, step)
    if lease is None:
        return
    try:
        did = call(db.expire_leases, timeout=timeout)
    except Exception as e:
        r.note(step, f"skipped: ending the leases on the server failed: {describe(e)}")
        return
    t0 = time.monotonic()
    # the lock must be gone on the server: another client takes it and lets it go (a
    # lock without a lease, such as one without a TTL, is not taken away: nothing to say)
    probe: Lease | BaseException | None = None
    for _ in range(3):  # that client's own session may have been ended too: it reconnects
        try:
            probe = call(other.acquire, AWAY_KEY, timeout=timeout)
            break
        except Exception as e:
            probe = e
    if not isinstance(probe, Lease):
        why = (f"another client's acquire raised {describe(probe)}"
               if isinstance(probe, BaseException) else
               "the lock was still held (it has no lease on the server to end)")
        r.note(step, f"skipped: {did}, and {why}")
        with contextlib.suppress(Exception):
            call(holder.release, lease, timeout=timeout)
        return
    with contextlib.suppress(Exception):
        call(other.release, probe, timeout=timeout)
    interval = ttl_ms / 3000
    while time.monotonic() - t0 < interval and not lease.lost:
        time.sleep(0.02)
    if lease.lost:
        r.ok(step, f"{did}; the client said the lease is lost "
                   f"{(time.monotonic() - t0) * 1000:.0f} ms later")
        return
    try:
        call(holder.renew, lease, timeout=timeout)
    except NotOwner:
        r.ok(step, f"{did}; the holder's next renew was refused with NotOwner")
        return
    except Exception as e:
        if lockcheck_error(e):
            r.note(step, f"{did}; the holder's next renew raised {describe(e)}: NotOwner "
                         "says the lock is gone; anything else leaves the holder working "
                         "until its lease clock runs out")
        else:
            r.bad(step, f"{did}; the holder's next renew raised {describe(e)}, which the "
                        "client does not map (NotOwner: the lock is no longer ours)")
        return
    if lease.lost:
        r.ok(step, f"{did}; the renew returned, and the client said the lease is lost")
        return
    try:
        got = call(other.acquire, AWAY_KEY, timeout=timeout)
    except Exception:
        got = None
    back = ("; and the lock is held again (another client's acquire was refused): the "
            "renew brought it back" if got is None else
            "; another client then got the lock, so two clients believe they hold it")
    r.bad(step, f"{did} (another client then took the lock and released it); the "
                f"holder's renew {(time.monotonic() - t0) * 1000:.0f} ms later SUCCEEDED, "
                "and the client never said the lease was lost: its holder keeps working "
                f"without a lock and is not told{back}")
    if isinstance(got, Lease):
        with contextlib.suppress(Exception):
            call(other.release, got, timeout=timeout)


def stopped_server(db: DB, client: LockClient, timeout: float, r: Report) -> None:
    step = "acquire with every server stopped"
    if not isinstance(db, Killable):
        r.note(step, "skipped: this backend's servers cannot be stopped")
        return
    for node in list(db.describe()):
        db.kill(node)
    try:
        lease = call(client.acquire, KEY + "-down", timeout=timeout)
    except StepTimeout as e:
        r.bad(step, f"{e}: give the client a timeout (ClientOptions.op_timeout_s)")
        return
    except Exception as e:
        if lockcheck_error(e):
            r.ok(step, f"{describe(e)}")
        else:
            r.bad(step, f"raised {describe(e)}, which the client does not map: a run "
                        "records it as info (outcome unknown); raise Definite if the "
                        "request never left, Indefinite if it may have been applied")
        return
    if lease is None:
        r.note(step, "returned None (busy): recorded as a refusal; if the request may have "
                     "reached a server, raise Indefinite")
    else:
        r.bad(step, "GRANTED with every server stopped")


def run_client_check(text: str, backend_name: str, *, ttl_ms: int | None = None,
                     say: Callable[[str], None] = print) -> int:
    """Bring up the backend's servers, run the steps, take it all down; 0 or 1."""
    b = backend(backend_name)
    r = resolve_client(text, b.name)
    p = plan(TestSpec(backend=b.name, nodes=b.default_nodes, concurrency=1, nemesis=(),
                      ttl_ms=TTL_NOT_GIVEN if ttl_ms is None else ttl_ms),
             command="lockcheck client-check")
    spec = p.spec
    t0 = time.monotonic()
    report = Report(say)
    say(f"client-check {text} on {b.name} ({spec.nodes} node(s), TTL {spec.ttl_ms} ms)")
    # a library's own log lines (a traceback per refused connection) are not ours to print
    quiet = logging.NullHandler()
    root = logging.getLogger()
    root.addHandler(quiet)
    try:
        with_servers(p, lambda db: check_on(db, b, r, spec, report), say)
    finally:
        root.removeHandler(quiet)
    n = len(report.problems)
    say(f"{n} problem(s) in {time.monotonic() - t0:.1f} s" if n else
        f"no problems in {time.monotonic() - t0:.1f} s")
    return 1 if n else 0


def with_servers(p: Plan, fn: Callable[[DB], None], say: Callable[[str], None]) -> None:
    """fn on the plan's database, serving on a cluster made the way `lockcheck test` and
    `cluster up` make theirs, then everything removed (also after an error)."""
    registry = Registry()
    p.provider.reap(registry)
    undo = Teardown()
    try:
        servers_up(p, registry, undo, kind="test", clients=0)
        fn(p.db)
    finally:
        with no_interrupts():
            for error in undo.run():
                say(f"teardown: {error}")


def check_on(db: DB, b: Backend, r: ResolvedClient, spec: TestSpec, report: Report) -> None:
    factory = load_factory(r)
    config = db.client_config()
    clients: dict[str, LockClient] = {}
    made: list[object] = []
    short_ttl = short_ttl_ms(b.min_ttl_ms)
    try:
        # A, B, C for steps 1-7; D and E, with step 8's TTL, for step 8
        ghost: dict[str, LockClient] = {}
        away: dict[str, LockClient] = {}
        for i, name in enumerate("ABCDE"):
            ttl, keys = (spec.ttl_ms, [KEY, KEY + "-down", GHOST_KEY, AWAY_KEY]) if (
                name in "ABC") else (short_ttl, [SHORT_KEY])
            opts = ClientOptions(ttl_ms=ttl, op_timeout_s=spec.op_timeout_s,
                                 drift=spec.clock_drift, worker=i,
                                 options={**b.options, **r.options})
            try:
                got = factory(config, keys, opts)
            except Exception as e:
                raise BadInput(f"--client {r.text} cannot use the servers of backend "
                               f"{b.name} (its client config has "
                               f"{', '.join(sorted(config))}): {describe(e)}") from None
            made.append(got)
            by_key = check_shape(got, keys, r)
            clients[name] = by_key[keys[0]]
            if GHOST_KEY in by_key:
                ghost[name] = by_key[GHOST_KEY]
            if AWAY_KEY in by_key:
                away[name] = by_key[AWAY_KEY]
        timeout = max(5.0, 4 * spec.op_timeout_s)
        steps = Steps(clients, ghost, spec.ttl_ms, timeout, report)
        steps.run()
        if steps.expires:
            short_lease(clients["D"], clients["E"], short_ttl, spec.clock_drift, timeout,
                        report)
        else:
            report.note(f"a lease of {short_ttl} ms lasts {short_ttl} ms",
                        "skipped: the lease did not expire above")
        taken_away(db, away["A"], away["B"], spec.ttl_ms, timeout, report)
        stopped_server(db, clients["A"], timeout, report)
    finally:
        for m in made:  # a client that hangs on close with its servers gone: not waited for
            with contextlib.suppress(StepTimeout):
                call(close_all, m, timeout=5.0)
