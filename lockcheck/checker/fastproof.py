"""A quick proof that one lock key is linearizable, on numpy columns, or a decline.

`fastpath.decide` decides a key exactly, one Python step per operation. Most keys of a
real history are fine, and proving that needs no step-by-step walk: `proves_ok` makes
`decide`'s checks on whole columns (sorts, cumulative maxima, scatter-min/max): every
grant of a client returned before the client's next one was invoked, every renew and
release belongs to exactly one grant, no fence repeats and none is named wrong, no
lease is released twice or renewed after its release. Then it tries one order of the
grants (by fence where every grant has one, else by earliest return) and checks it
against the criterion of `fastpath` (module doc): every earlier grant's closed U at
most every later grant's L, fences increasing. An order that passes is a
linearization, so True is as sound as `decide`'s OK. Anything else (a violation, a
history the fast path declines, or a valid history whose order is another) is False,
and the caller runs `decide`, which finds the order or says what is wrong.

The property tests in tests/checker check it against `decide` (and through it, the
brute-force oracle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lockcheck.checker.fastpath import ACQUIRE, RELEASE, RENEW

NEVER = np.iinfo(np.int64).max  # a crashed op's return; a block never closed


def proves_ok(f: Any, client: Any, call: Any, ret: Any, crashed: Any, fence: Any,
              has_fence: Any, named: Any, has_named: Any, fenced: bool) -> bool:
    """True if these columns are linearizable by the order tried (then `decide`
    returns OK too); False when unsure. Columns are numpy arrays of one key's lock operations:
    `f` (ACQUIRE, RENEW, RELEASE), `client` (int64: whose lease), `call`, `ret`
    (int64 ns; `ret` ignored where `crashed`), `fence`/`has_fence` (an ok acquire's
    fence), `named`/`has_named` (the fence a renew or release names)."""
    acq = f == ACQUIRE
    grants = np.flatnonzero(acq & ~crashed)
    nb = len(grants)
    if nb == 0:
        return False  # nothing to prove; `decide` says what the key is
    # the grants by client, then call: the blocks, numbered as `decide` numbers them
    g = grants[np.lexsort((call[grants], client[grants]))]
    gc, gcall, gret = client[g], call[g], ret[g]
    same_client = gc[1:] == gc[:-1]
    if np.any(same_client & (gret[:-1] >= gcall[1:])):
        return False  # a client with two grants in flight at once
    # the ops that belong to a grant: ok renews and releases, and in mutex the crashed
    # releases (a crashed release frees the lock at some point after its call)
    attached = ~acq & ~crashed
    if not fenced:
        attached |= (f == RELEASE) & crashed
    a = np.flatnonzero(attached)
    a_crashed = crashed[a]
    a_ret = np.where(a_crashed, NEVER, ret[a])
    a_client = client[a]
    if _after_a_crashed_acquire(client, call, acq & crashed, a_client, a_ret):
        return False
    block = _grant_before(gc, gcall, a_client, a_ret)
    found = block >= 0
    if np.any(~found & ~a_crashed):
        return False  # a renew or release with no grant before it
    a, block, a_crashed = a[found], block[found], a_crashed[found]
    if np.any(gret[block] >= call[a]):
        return False  # it overlaps its grant: `decide` cannot attribute it
    if fenced:
        g_has = has_fence[g][block]
        mismatch = g_has & has_named[a] & (named[a] != fence[g][block])
        if np.any(mismatch):
            return False  # it names another fence than its grant's
    a_f = f[a]
    ok_release = (a_f == RELEASE) & ~a_crashed
    renew = a_f == RENEW
    released = block[ok_release]
    if len(np.unique(released)) != len(released):
        return False  # a lease released twice
    release = np.full(nb, -1, dtype=np.int64)
    release[released] = a[ok_release]
    rel_of_renew = release[block[renew]]
    closed = rel_of_renew >= 0
    if np.any(ret[rel_of_renew[closed]] < call[a[renew]][closed]):
        return False  # renewed after its release
    # each block's L (earliest return) and closed U (latest invoke)
    low, high = gret.copy(), gcall.copy()
    counted = ok_release | renew
    np.minimum.at(low, block[counted], ret[a[counted]])
    np.maximum.at(high, block[counted], call[a[counted]])
    if not fenced:
        crashed_rel = np.full(nb, NEVER, dtype=np.int64)
        cr = (a_f == RELEASE) & a_crashed
        np.minimum.at(crashed_rel, block[cr], call[a[cr]])
        open_ = release < 0
        high = np.where(open_ & (crashed_rel < NEVER), np.maximum(high, crashed_rel), high)
        high = np.where(open_ & (crashed_rel == NEVER), NEVER, high)
    return _in_order(_candidate(low, has_fence[g], fence[g], fenced), low, high,
                     has_fence[g], fence[g], fenced)


def _candidate(low: Any, has_fence: Any, fence: Any, fenced: bool) -> Any:
    """An order of the blocks to try: with a fence on every grant, the fences fix it;
    otherwise by earliest return (a block that returned first most likely went first)."""
    if fenced and bool(np.all(has_fence)):
        return np.argsort(fence, kind="stable")
    return np.argsort(low, kind="stable")


def _in_order(order: Any, low: Any, high: Any, has_fence: Any, fence: Any,
              fenced: bool) -> bool:
    """Whether the blocks in this order respect real time (every earlier block's closed
    U at most every later block's L) and, with fences, the fences' order (strictly
    rising: a fence granted twice fails here)."""
    if len(order) > 1:
        before = np.maximum.accumulate(high[order[:-1]])
        if np.any(low[order[1:]] < before):
            return False
    if fenced:
        up = fence[order][has_fence[order]]
        if np.any(up[1:] <= up[:-1]):
            return False
    return True


def _after_a_crashed_acquire(client: Any, call: Any, crashed_acq: Any, a_client: Any,
                             a_ret: Any) -> bool:
    """Whether any op returned at or after the earliest crashed acquire of its client
    (that acquire may have taken effect before it: `decide` declines)."""
    ca = np.flatnonzero(crashed_acq)
    if len(ca) == 0:
        return False
    cc, ct = client[ca], call[ca]
    o = np.lexsort((ct, cc))
    cc, ct = cc[o], ct[o]
    first = np.concatenate(([True], cc[1:] != cc[:-1]))
    clients, earliest = cc[first], ct[first]
    pos = np.minimum(np.searchsorted(clients, a_client), len(clients) - 1)
    return bool(np.any((clients[pos] == a_client) & (earliest[pos] <= a_ret)))


def _grant_before(gc: Any, gcall: Any, a_client: Any, a_ret: Any) -> Any:
    """For each op, the last grant of its client invoked at or before the op returned
    (`bisect_right` on the client's calls), as an index into the sorted grants; -1 if
    none."""
    ng = len(gc)
    m_client = np.concatenate((gc, a_client))
    m_time = np.concatenate((gcall, a_ret))
    m_kind = np.concatenate((np.zeros(ng, dtype=np.int8), np.ones(len(a_client), dtype=np.int8)))
    merged = np.lexsort((m_kind, m_time, m_client))  # a grant first at an equal time
    is_grant = merged < ng
    last = np.maximum.accumulate(np.where(is_grant, merged, -1))
    ops = ~is_grant
    out = np.empty(len(a_client), dtype=np.int64)
    out[merged[ops] - ng] = last[ops]
    own = out >= 0
    own[own] = gc[out[own]] == a_client[own]
    return np.where(own, out, -1)
