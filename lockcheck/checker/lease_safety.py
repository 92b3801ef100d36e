"""Lease safety: was a lock granted while another client's lease was provably valid?

This checker works in real time, per key, and needs no search.

An ok `acquire` or `renew` invoked at `t` with TTL `T` is a *certificate*: the service
applied it at some moment `g` in `[t, ok]`, and from `g` the lease lasts `T` by the
service's clock, so by ours it lasts at least until `t + T * (1 - e)`, where `e` is the
clock-rate bound (`CheckOptions.clock_drift`). The holder may give the lease up earlier:
its claim ends when it next invokes `release` (or `acquire`) on that key, whatever the
outcome of that op.

Two certificates of different processes certainly overlap when each completed before
the other's bound: whatever the moments the service applied them, the later one was
applied while the earlier lease was still valid. That is a violation: "granted while a
lease was provably still valid". It catches a master that restarts with an empty state,
a failover that loses a lease, a server clock jump. It does not blame the service for a
client that paused past its TTL: the other client's grant then completes after the
bound.

TTL comes from the invoke's `ttl_ms`, else from `CheckOptions.ttl_ms`; a certificate
with neither is skipped (and counted).

It also names each *superseded renewal*: an ok `renew` of a lease after another
client's `acquire` of the same key was granted, certainly after that lease's own grant
and certainly before the renew. Once the service grants the lock to someone else, the
earlier lease is over for good, however it ended; renewing it brings a dead lock back
(a renew that sets the key whatever it holds, or takes the lock when it finds it free).
The order is certain, and needs no TTL and no clock bound: the other acquire was
invoked after the lease's acquire completed, and completed before the renew was
invoked (one host clock orders them all). A renew in flight while the other grant was
made, an `info` renew, and a grant whose outcome is unknown are never blamed. A renew
names its lease (`lease`); in a history without names, it renews its process's last
ok acquire of the key.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.history import Op, Pair, Process, pair_ops

MAX_REPORTED = 100


@dataclass(frozen=True, slots=True)
class _Cert:
    process: Process
    f: str  # "acquire" or "renew"
    invoke_ns: int
    ok_ns: int
    until_ns: float  # the lease is provably valid until here (exclusive)
    ttl_ms: float
    fence: int | None
    index: int  # the invoke's index, for reports

    def describe(self) -> dict[str, Any]:
        return {
            "process": self.process,
            "f": self.f,
            "fence": self.fence,
            "invoke_ns": self.invoke_ns,
            "ok_ns": self.ok_ns,
            "valid_until_ns": int(self.until_ns),
            "ttl_ms": self.ttl_ms,
            "index": self.index,
        }


def _ttl(inv: Op, default: int | None) -> float | None:
    v = inv.value
    if isinstance(v, dict):
        ttl = v.get("ttl_ms")
        if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl > 0:
            return float(ttl)
    return float(default) if default is not None and default > 0 else None


def _lease(op: Op | None) -> str | None:
    v = op.value if op is not None else None
    token = v.get("lease") if isinstance(v, dict) else None
    return token if isinstance(token, str) else None


def _fence(*ops: Op | None) -> int | None:
    for op in ops:
        if op is not None and op.fence is not None:
            return op.fence
    return None


def check_lease_safety(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    """Find grants (or renewals) that overlap another process's provably valid lease."""
    e = opts.clock_drift
    if not 0 <= e < 1:
        return {"valid": "unknown", "error": f"clock_drift must be in [0, 1), got {e}"}

    # A renew or release that names its lease (a `lease` token) belongs to the process
    # whose ok acquire returned it: after an `info` the worker releases under a new id.
    lock_pairs = [p for p in pair_ops(ops)
                  if p.invoke.key is not None and p.invoke.f in ("acquire", "renew", "release")]
    owners: dict[str, Process] = {}
    for pair in lock_pairs:
        token = _lease(pair.complete) if pair.invoke.f == "acquire" else None
        if token is not None and pair.complete is not None and pair.complete.type == "ok":
            owners[token] = pair.invoke.process

    def owner(inv: Op) -> Process:
        token = _lease(inv) if inv.f != "acquire" else None
        return owners.get(token, inv.process) if token is not None else inv.process

    # Per (key, owner): times of acquire/release invokes, which end a process's claim.
    boundaries: dict[tuple[str, Process], list[tuple[int, int, str]]] = defaultdict(list)
    for pair in lock_pairs:
        inv = pair.invoke
        if inv.f in ("acquire", "release"):
            assert inv.key is not None
            boundaries[(inv.key, owner(inv))].append((inv.time, inv.index, inv.f))
    for b in boundaries.values():
        b.sort()

    certs: dict[str, list[_Cert]] = defaultdict(list)
    skipped_no_ttl = 0
    skipped_after_release = 0
    for pair in lock_pairs:
        inv, comp = pair.invoke, pair.complete
        if inv.f == "release" or comp is None or comp.type != "ok":
            continue
        assert inv.key is not None
        ttl = _ttl(inv, opts.ttl_ms)
        if ttl is None:
            skipped_no_ttl += 1
            continue
        who = owner(inv)
        bounds = boundaries.get((inv.key, who), [])
        pos = bisect.bisect_right(bounds, (inv.time, inv.index, "~"))
        if inv.f == "renew" and pos > 0 and bounds[pos - 1][2] == "release":
            # a renew sent after the holder started releasing proves nothing lasting
            skipped_after_release += 1
            continue
        until = inv.time + ttl * 1e6 * (1 - e)
        if pos < len(bounds):
            until = min(until, bounds[pos][0])
        certs[inv.key].append(
            _Cert(
                process=who,
                f=inv.f,
                invoke_ns=inv.time,
                ok_ns=comp.time,
                until_ns=until,
                ttl_ms=ttl,
                fence=_fence(comp, inv),
                index=inv.index,
            )
        )

    superseded = _superseded_renewals(lock_pairs)

    violations: list[dict[str, Any]] = []
    count = 0
    per_key: dict[str, int] = {}
    for key in sorted(certs):
        n = _sweep(key, certs[key], violations)
        count += n
        if n:
            per_key[key] = n

    checked = sum(len(c) for c in certs.values())
    result: dict[str, Any] = {
        "certificates": checked,
        "skipped_no_ttl": skipped_no_ttl,
        "skipped_renew_after_release": skipped_after_release,
        "clock_drift": e,
        "violation_count": count,
        "violations_per_key": per_key,
        "violations": violations,
        "superseded_renewal_count": len(superseded),
        "superseded_renewals": superseded[:MAX_REPORTED],
    }
    if count or superseded:
        result["valid"] = False
        said = []
        if count:
            first = violations[0]
            said.append(
                f"{count} grant(s) while a lease was provably still valid; first on key "
                f"{first['key']!r}: process {first['granted']['process']} "
                f"{first['granted']['f']} ok while process {first['holder']['process']}'s "
                f"lease (fence {first['holder']['fence']}) was valid"
            )
        if superseded:
            s0 = superseded[0]
            said.append(
                f"{len(superseded)} renewal(s) of a lease another client had since been "
                f"granted the lock over; first on key {s0['key']!r}: process "
                f"{s0['renew']['process']} renewed its lease (fence "
                f"{s0['lease']['fence']}) after process {s0['superseded_by']['process']} "
                f"was granted the lock (fence {s0['superseded_by']['fence']})"
            )
        result["summary"] = "; ".join(said)
    elif checked == 0 and skipped_no_ttl > 0:
        result["valid"] = "unknown"
        result["summary"] = "no TTL known (neither ttl_ms on invokes nor a default)"
    elif checked == 0:  # nothing was checked: that is not a pass
        why = "no ok acquire or renew in the history: no lease to check"
        result.update(valid="unknown", summary=why, nothing_checked=why)
    else:
        result["valid"] = True
    return result


def _sweep(key: str, certs: list[_Cert], out: list[dict[str, Any]]) -> int:
    """Report each certificate that overlaps an earlier-completed one of another process."""
    certs.sort(key=lambda c: (c.ok_ns, c.index))
    # process -> its certificate with the latest bound among those seen so far
    active: dict[Process, _Cert] = {}
    count = 0
    for x in certs:
        stale = [p for p, y in active.items() if y.until_ns <= x.ok_ns]
        for p in stale:
            del active[p]
        for p, y in active.items():
            # y completed no later than x (sort order) and its bound is after x's ok;
            # the overlap is certain if y also completed before x's own bound.
            if p != x.process and y.ok_ns < x.until_ns:
                count += 1
                if len(out) < MAX_REPORTED:
                    out.append(
                        {
                            "key": key,
                            "kind": f"{'granted' if x.f == 'acquire' else 'renewed'}-while-held",
                            "holder": y.describe(),
                            "granted": x.describe(),
                            "message": (
                                f"process {x.process} {x.f} ok at {x.ok_ns} ns (fence {x.fence}) "
                                f"while process {y.process}'s lease (fence {y.fence}, "
                                f"{y.f} invoked at {y.invoke_ns} ns, TTL {y.ttl_ms:g} ms) "
                                f"was provably valid until {int(y.until_ns)} ns"
                            ),
                        }
                    )
                break
        prev = active.get(x.process)
        if prev is None or x.until_ns > prev.until_ns:
            active[x.process] = x
    return count


@dataclass(frozen=True, slots=True)
class _Grant:
    process: Process
    invoke_ns: int
    ok_ns: int
    fence: int | None
    token: str | None
    index: int

    def describe(self) -> dict[str, Any]:
        return {"process": self.process, "fence": self.fence, "lease": self.token,
                "invoke_ns": self.invoke_ns, "ok_ns": self.ok_ns, "index": self.index}


def _superseded_renewals(pairs: list[Pair]) -> list[dict[str, Any]]:
    """Each ok renew of a lease that another process's grant certainly superseded."""
    grants: dict[str, list[_Grant]] = defaultdict(list)
    by_token: dict[str, _Grant] = {}
    mine: dict[tuple[str, Process], list[_Grant]] = defaultdict(list)  # by completion
    for pair in pairs:
        inv, comp = pair.invoke, pair.complete
        if inv.f != "acquire" or comp is None or comp.type != "ok":
            continue
        assert inv.key is not None
        g = _Grant(inv.process, inv.time, comp.time, _fence(comp, inv), _lease(comp),
                   inv.index)
        grants[inv.key].append(g)
        mine[(inv.key, inv.process)].append(g)
        if g.token is not None:
            by_token[g.token] = g
    for gs in mine.values():
        gs.sort(key=lambda g: (g.ok_ns, g.index))
    mine_ok = {k: [g.ok_ns for g in gs] for k, gs in mine.items()}

    # Per key, grants by invoke time, and for each suffix the two earliest-completing
    # grants of different processes: the earliest grant invoked after a lease's grant
    # completed, by a process other than the lease's, is one of those two.
    starts: dict[str, list[tuple[int, int]]] = {}
    best: dict[str, list[tuple[_Grant | None, _Grant | None]]] = {}
    for key, gs in grants.items():
        gs.sort(key=lambda g: (g.invoke_ns, g.index))
        starts[key] = [(g.invoke_ns, g.index) for g in gs]
        suffix: list[tuple[_Grant | None, _Grant | None]] = [(None, None)] * (len(gs) + 1)
        for i in range(len(gs) - 1, -1, -1):
            suffix[i] = _two_earliest(suffix[i + 1], gs[i])
        best[key] = suffix

    out: list[dict[str, Any]] = []
    for pair in pairs:
        inv, comp = pair.invoke, pair.complete
        if inv.f != "renew" or comp is None or comp.type != "ok":
            continue
        assert inv.key is not None
        token = _lease(inv)
        lease = by_token.get(token) if token is not None else _last_grant(
            mine.get((inv.key, inv.process), []), mine_ok.get((inv.key, inv.process), []),
            inv.time)
        if lease is None:  # a lease whose grant is not in the history: no order known
            continue
        who = lease.process
        pos = bisect.bisect_right(starts.get(inv.key, []), (lease.ok_ns, 1 << 62))
        first, second = best[inv.key][pos] if inv.key in best else (None, None)
        other = first if first is not None and first.process != who else second
        if other is None or other.process == who or other.ok_ns >= inv.time:
            continue
        out.append({
            "key": inv.key,
            "kind": "renewed-after-superseded",
            "renew": {"process": who, "invoke_ns": inv.time, "ok_ns": comp.time,
                      "index": inv.index},
            "lease": lease.describe(),
            "superseded_by": other.describe(),
            "message": (
                f"process {who} renew ok at {comp.time} ns (invoked at {inv.time} ns) of "
                f"its lease (fence {lease.fence}, granted by {lease.ok_ns} ns), after "
                f"process {other.process}'s acquire (fence {other.fence}) was invoked at "
                f"{other.invoke_ns} ns and granted by {other.ok_ns} ns: that lease was "
                "over, and the renew brought it back"
            ),
        })
    out.sort(key=lambda v: (v["renew"]["invoke_ns"], v["renew"]["index"]))
    return out


def _two_earliest(pair: tuple[_Grant | None, _Grant | None], g: _Grant
                  ) -> tuple[_Grant | None, _Grant | None]:
    """The earliest-completing grant and the earliest of another process, with g added."""
    first, second = pair
    if first is None or g.ok_ns < first.ok_ns:
        keep = first if first is not None and first.process != g.process else second
        return g, keep
    if g.process != first.process and (second is None or g.ok_ns < second.ok_ns):
        return first, g
    return first, second


def _last_grant(mine: list[_Grant], ok_ns: list[int], before_ns: int) -> _Grant | None:
    """A history without lease names: the process's last grant completed before."""
    i = bisect.bisect_left(ok_ns, before_ns)
    return mine[i - 1] if i else None
