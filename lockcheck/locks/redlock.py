"""Redlock over N independent Redis masters, with pottery's `Redlock` (and `NextID`).

Each master gets its own redis-py client with short socket and connect timeouts and
no retries (a third of the op timeout each: pottery waits for the slowest master it
needs, and a failed acquire also sends a release round), so one blackholed master
cannot stall the quorum.

pottery answers only "quorum or not". Whether a round that missed its quorum is a
definite no or may have taken effect depends on which masters said no, which were
down and which timed out, so `TalliedRedlock` notes each master's answer (its
per-master steps are pottery's name-mangled privates, hence the `pottery<4` pin), and
`failed_acquire` / `failed_round` turn a round into the verdict:

* acquire: the masters that may still hold our key (granted and not released again,
  or timed out) form a majority -> `Indefinite`; pottery's own validity check refused
  a quorum it got -> `Definite("validity expired")`; the "no"s alone rule out a
  quorum -> busy; otherwise masters were down -> `Definite("no quorum ...")`.
* extend and release: the "no"s rule out that our key is on a quorum -> `NotOwner`;
  what was applied or may have been could be a majority -> `Indefinite`; otherwise
  `Definite`.

Redlock issues no fencing token (`fence: null`). The `fence: "nextid"` variant takes
one from pottery's `NextID` (a quorum counter: read the max of a majority, then a Lua
set-if-greater on a majority) right after each grant. Its counter lives in the
masters' memory only: masters restarted empty make it go back (a fence regression).

The client's belief is Redlock's validity: TTL minus the elapsed time (counted from
the invoke) minus the drift (TTL * drift + 2 ms, pottery's formula). Renewal is
pottery's `extend` (a Lua compare-and-PEXPIRE on a quorum) with `num_extensions` set
out of reach, so a long run is never cut short by `TooManyExtensions`.

`validity: False` (the `redlock-no-validity` variant) is a client that skips that
check: a quorum of grants is the lock, and its lease runs a whole TTL from the moment
the replies were read. A client stopped with its grants unread (`client-pause
--pause-at acquire`) then wakes up believing in keys that expired while it slept.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pottery.exceptions as pex
import redis
import redis.exceptions as rex
from pottery import NextID, Redlock

from lockcheck.locks import redis as single
from lockcheck.locks.api import (
    ClientOptions,
    Definite,
    Indefinite,
    Lease,
    LockClient,
    LockClientError,
    NotOwner,
)

YES, NO, FAILED, UNKNOWN = "yes", "no", "failed", "unknown"  # one master's answer
DRIFT_FLOOR_NS = 2_000_000  # pottery's drift: TTL * factor + 2 ms

Answers = dict[Any, str]  # master -> its answer in one round


def quorum(n: int) -> int:
    return n // 2 + 1


def answer_of(error: BaseException) -> str:
    """A master's error as FAILED (certainly not applied) or UNKNOWN, by the same rules
    as single-instance Redis."""
    try:
        with single.mapped_errors():
            raise error
    except Definite:
        return FAILED
    except Exception:
        return UNKNOWN


@dataclass(frozen=True)
class Round:
    """How the masters answered one quorum round; a master that has not answered yet
    (a straggler pottery did not wait for) counts as unknown."""

    yes: int
    no: int
    failed: int
    unknown: int

    @staticmethod
    def of(answers: Mapping[Any, str], n: int) -> Round:
        kinds = list(answers.values())
        return Round(yes=kinds.count(YES), no=kinds.count(NO), failed=kinds.count(FAILED),
                     unknown=kinds.count(UNKNOWN) + n - len(kinds))


def _unreachable(r: Round, n: int) -> Definite:
    return Definite(f"no quorum: {r.failed + r.unknown} of {n} masters unreachable")


def failed_acquire(acquired: Mapping[Any, str], released: Mapping[Any, str], n: int,
                   why: str) -> LockClientError | None:
    """pottery missed its quorum (and released what it got): None if the lock is busy."""
    maybe_ours = n - len(acquired) + sum(
        1 for m, a in acquired.items()
        if (a == YES and released.get(m) not in (YES, NO))
        or (a == UNKNOWN and released.get(m) != YES))  # a late SET may still land
    if maybe_ours >= quorum(n):
        return Indefinite(why or "timeout")
    r = Round.of(acquired, n)
    if r.yes >= quorum(n):
        return Definite("validity expired")  # granted too slowly: pottery gave it back
    if r.no > n - quorum(n):
        return None
    return _unreachable(r, n)


def failed_round(answers: Mapping[Any, str], n: int, why: str) -> LockClientError:
    """An extend or release that pottery says missed its quorum."""
    r = Round.of(answers, n)
    if r.no > n - quorum(n):
        return NotOwner("not-owner")  # our key cannot be on a quorum any more
    if r.yes + r.unknown >= quorum(n):
        return Indefinite(why or "timeout")
    return _unreachable(r, n)


class TalliedRedlock(Redlock):
    """pottery's Redlock that notes what each master answered in its latest rounds.

    `at_grant_reply(key)` is called (in the executor thread of the master whose answer
    made it) the moment a quorum of masters has granted, before pottery's own thread
    reads those answers and checks the elapsed time: where `client-pause --pause-at
    acquire` stops the worker. The other masters' answers wait until it returns."""

    def __init__(self, *, key: str, at_grant_reply: Callable[[str], None] | None = None,
                 **kw: Any) -> None:
        super().__init__(key=key, **kw)
        self.name = key  # the lock name (pottery prefixes its Redis key)
        self.at_grant_reply = at_grant_reply
        self.rounds: dict[str, Answers] = {}
        self.errors: list[str] = []
        self.guard = threading.Lock()
        self.new_rounds()

    def new_rounds(self) -> None:
        with self.guard:
            self.rounds = {"acquire": {}, "extend": {}, "release": {}}
            self.errors = []

    def answers(self, phase: str) -> Answers:
        with self.guard:
            return dict(self.rounds[phase])

    def why(self) -> str:
        with self.guard:
            return self.errors[0] if self.errors else ""

    def _noted(self, phase: str, master: redis.Redis, step: Callable[..., Any]) -> bool:
        answers = self.rounds[phase]  # this round's, even if pottery stops waiting for us
        try:
            ok = bool(step(self, master))
        except Exception as e:
            kind = answer_of(e)
            with self.guard:
                answers[master] = kind
                # an unknown outcome explains an indefinite verdict best: it goes first
                self.errors.insert(0 if kind == UNKNOWN else len(self.errors),
                                   single._short(str(e)))
            raise
        with self.guard:
            answers[master] = YES if ok else NO
            if (phase == "acquire" and ok and self.at_grant_reply is not None
                    and list(answers.values()).count(YES) == quorum(len(self.masters))):
                # under the guard: a later master's grant cannot complete its future
                # while the hook records and stops, or pottery's thread could count a
                # quorum without ours and check the elapsed time before the stop lands
                self.at_grant_reply(self.name)
        return ok

    # pottery calls these once per master, in its executor threads
    def _Redlock__acquire_master(self, master: redis.Redis) -> bool:
        return self._noted("acquire", master, _STEPS["acquire"])

    def _Redlock__extend_master(self, master: redis.Redis) -> bool:
        return self._noted("extend", master, _STEPS["extend"])

    def _Redlock__release_master(self, master: redis.Redis) -> bool:
        return self._noted("release", master, _STEPS["release"])


class NoValidityRedlock(TalliedRedlock):
    """A Redlock client that takes a quorum of grants as the lock however long they
    took to come back: pottery's elapsed-time check (validity = TTL - elapsed - drift
    must stay above zero) is made void by an infinitely negative drift, so the check
    always passes. The `redlock-no-validity` variant."""

    def _Redlock__drift(self) -> float:
        return -math.inf


_STEPS: dict[str, Callable[..., Any]] = {
    phase: getattr(Redlock, f"_Redlock__{phase}_master")
    for phase in ("acquire", "extend", "release")
}


@contextmanager
def mapped_errors(lock: TalliedRedlock | None = None, n: int = 0) -> Iterator[None]:
    """The one place pottery's and redis-py's exceptions become Definite or Indefinite."""
    try:
        yield
    except (pex.ExtendUnlockedLock, pex.ReleaseUnlockedLock) as e:
        if lock is None:
            raise Indefinite("no quorum") from e
        phase = "extend" if isinstance(e, pex.ExtendUnlockedLock) else "release"
        raise failed_round(lock.answers(phase), n, lock.why()) from e
    except pex.TooManyExtensions as e:
        raise Definite("too many extensions") from e  # refused before anything was sent
    except pex.QuorumNotAchieved as e:
        # NextID read or set no majority; one of its sets may still have landed
        raise Indefinite("no quorum") from e
    except (pex.PrimitiveError, pex.PotteryError) as e:
        raise Indefinite(type(e).__name__) from e
    except (rex.RedisError, OSError) as e:
        with single.mapped_errors():
            raise e


class RedlockClient:
    """One pottery Redlock per grant over every master; optionally a NextID fence."""

    def __init__(self, masters: Sequence[tuple[str, int]], *, ttl_ms: int,
                 op_timeout_s: float, drift: float = 0.01, fence: str | None = None,
                 names: Sequence[str] = (), validity: bool = True,
                 at_grant_reply: Callable[[str], None] | None = None) -> None:
        if fence not in (None, "nextid"):
            raise ValueError(f"fence must be None or 'nextid', not {fence!r}")
        # False: the grant is believed, and its lease counted from when the replies
        # were read, not from when the requests left (redlock-no-validity)
        self.validity = validity
        self.at_grant_reply = at_grant_reply
        self.ttl_ms = ttl_ms
        self.drift = drift
        self.masters = [single.redis_client(a, p, op_timeout_s / 3) for a, p in masters]
        self.n = len(self.masters)
        # master -> its node's name, for the history's `granted_by` (none if not given)
        self._names = {id(m): str(name)
                       for m, name in zip(self.masters, names, strict=False)}
        self.fenced = fence == "nextid"
        self._fences: dict[str, NextID] = {}
        self._locks: dict[str, TalliedRedlock] = {}

    def _belief(self, t0: int) -> int:
        ttl_ns = self.ttl_ms * 1_000_000
        return t0 + ttl_ns - int(ttl_ns * self.drift) - DRIFT_FLOOR_NS

    def _said(self, answers: Answers, what: str) -> tuple[str, ...]:
        """The names of the masters that answered `what` (none if not given)."""
        return tuple(sorted(self._names.get(id(m), "?") for m, a in answers.items()
                            if a == what)) if self._names else ()

    def _next_fence(self, key: str) -> int:
        ids = self._fences.get(key)
        if ids is None:
            ids = self._fences[key] = NextID(key=key, masters=self.masters, num_tries=1)
        return next(ids)

    def acquire(self, key: str) -> Lease | None:
        kind = TalliedRedlock if self.validity else NoValidityRedlock
        lock = kind(key=key, masters=self.masters, auto_release_time=self.ttl_ms / 1000.0,
                    num_extensions=sys.maxsize, at_grant_reply=self.at_grant_reply)
        t0 = time.monotonic_ns()
        with mapped_errors(lock, self.n):
            got = lock.acquire(blocking=False)
        if not self.validity:
            t0 = time.monotonic_ns()
        if not got:
            err = failed_acquire(lock.answers("acquire"), lock.answers("release"), self.n,
                                 lock.why())
            if err is not None:
                raise err
            return None
        answers = lock.answers("acquire")  # before NextID's rounds, at the grant
        fence = self._fence_for(lock, key) if self.fenced else None
        token = lock._uuid
        self._locks[token] = lock
        return Lease(key=key, token=token, fence=fence, ttl_ms=self.ttl_ms,
                     valid_until_ns=self._belief(t0),
                     granted_by=self._said(answers, YES), refused_by=self._said(answers, NO))

    def _fence_for(self, lock: TalliedRedlock, key: str) -> int:
        """The grant stands; without a fence it is given back, and the acquire is
        definite only if the give-back reached a quorum."""
        try:
            with mapped_errors():
                return self._next_fence(key)
        except LockClientError as e:
            lock.new_rounds()
            try:
                with mapped_errors(lock, self.n):
                    lock.release()
            except LockClientError:
                raise Indefinite(f"fence: {e}") from e
            raise Definite(f"fence: {e}") from e

    def renew(self, lease: Lease) -> None:
        lock = self._locks[lease.token]
        t0 = time.monotonic_ns()
        lock.new_rounds()
        with mapped_errors(lock, self.n):
            lock.extend()
        lease.valid_until_ns = max(lease.valid_until_ns, self._belief(t0))
        answers = lock.answers("extend")
        lease.granted_by, lease.refused_by = self._said(answers, YES), self._said(answers, NO)

    def release(self, lease: Lease) -> None:
        lock = self._locks.pop(lease.token)
        lock.new_rounds()
        with mapped_errors(lock, self.n):
            lock.release()

    def close(self) -> None:
        for m in self.masters:
            m.close()


def make_clients(config: Mapping[str, Any], keys: Sequence[str],
                 opts: ClientOptions) -> dict[str, LockClient]:
    """Every lock name lives on every master; one client (one connection per master)."""
    # every master's error is in the round's answers; pottery would also log a
    # traceback for each one, which floods a worker's log during a partition
    logging.getLogger("pottery").setLevel(logging.CRITICAL)
    masters = [(str(a), int(p)) for a, p in config["masters"]]
    client = RedlockClient(masters, ttl_ms=opts.ttl_ms, op_timeout_s=opts.op_timeout_s,
                           drift=opts.drift, fence=opts.options.get("fence"),
                           names=config.get("names", ()),
                           validity=bool(opts.options.get("validity", True)),
                           at_grant_reply=opts.at_grant_reply)
    return {k: client for k in keys}
