"""Why a history in which no lock was ever held tested nothing, said so a user can act.

A run whose every acquire failed is `unknown`, never `valid`; but "nothing was tested"
alone hides the cause. Every acquire refused as held means the lock was taken before the
run began (a lock left behind, or one that came back); every acquire raising means the
client cannot take a free lock at all, which stops the work the lock guards as surely
as a lost lock would let it run twice.
"""

from __future__ import annotations

from collections import Counter

from lockcheck.history import Op, pair_ops

BUSY = "busy"


def never_held(ops: list[Op]) -> str:
    """The summary of a history without one granted acquire."""
    acquires = [p for p in pair_ops(ops) if p.invoke.f == "acquire"]
    if not acquires:
        return "no acquire was ever attempted: nothing was tested"
    errors = Counter((p.complete.error if p.complete is not None else None) or p.type
                     for p in acquires)
    n = len(acquires)
    if set(errors) == {BUSY}:
        return (f"no lock was ever acquired: all {n} acquires were refused as held by "
                "another, so the lock was taken before the run began (left behind by an "
                "earlier holder, or back from the dead); nothing was tested")
    first = next(p for p in acquires if ((p.complete.error if p.complete else None)
                                          or p.type) != BUSY)
    error = (first.complete.error if first.complete else None) or (
        "no reply before the run ended" if first.complete is None else first.type)
    kinds = ", ".join(f"{k} {c}" for k, c in errors.most_common(3))
    return (f"the client could not take a free lock: none of {n} acquires was granted "
            f"({kinds}); the first error: {error!r} at {first.invoke.time / 1e9:.1f} s "
            f"(process {first.invoke.process}). Nothing was tested, and a client that cannot "
            "take a free lock stops the work it guards: check its address, credentials "
            "and options, or its adapter's mapping of the library's errors")
