"""What a run says about the lock client itself (`--client`): its fences, its errors.

Two things the checkers cannot say on their own: whether the client issued fencing
tokens at all (an adapter may return `fence=None`), and which of its exceptions it
left unmapped, so that lockcheck recorded them as `info` (the outcome unknown). The
second goes into the run's summary with what to do about it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from lockcheck.clients import UNMAPPED
from lockcheck.history import Op

HOW_TO_MAP = ("raise lockcheck.api.Definite (certainly not applied) or Indefinite (may "
              "have been applied) from the adapter (docs/your-own-lock.md)")


def client_notes(ops: Sequence[Op], test: Mapping[str, Any]) -> dict[str, Any]:
    """The client's fences and unmapped errors, with lines for the summary and report."""
    info = test.get("client") or {}
    grants = [o for o in ops if o.f == "acquire" and o.type == "ok"]
    fenced = sum(1 for o in grants if o.fence is not None)
    unmapped: Counter[str] = Counter()
    for o in ops:
        if o.type == "info" and isinstance(o.error, str) and o.error.startswith(UNMAPPED):
            unmapped[o.error[len(UNMAPPED):].split(":", 1)[0]] += 1
    if not grants:
        fence = "unknown: no lock was granted"
    elif fenced == 0:
        fence = f"none: the client returned fence=None on all {len(grants)} grants"
    else:
        fence = (f"the client's own{': ' + info['fence'] if info.get('fence') else ''} "
                 f"({fenced} of {len(grants)} grants carried one)")
    notes = [f"fence: {fence}"]
    if unmapped:
        notes.append(unmapped_line(unmapped))
    return {"name": info.get("name"), "factory": info.get("factory"), "fence": fence,
            "fenced_grants": fenced, "grants": len(grants),
            "unmapped_errors": dict(unmapped), "notes": notes}


def unmapped_line(unmapped: Mapping[str, int]) -> str:
    n = sum(unmapped.values())
    kinds = ", ".join(f"{name} x{c}" for name, c in sorted(unmapped.items(),
                                                            key=lambda kv: -kv[1]))
    return (f"the client maps none of these errors: {n} op(s) raised {kinds}, recorded "
            f"as info (outcome unknown); {HOW_TO_MAP}")
