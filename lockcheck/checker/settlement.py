"""Settlement: was each merchant-day paid exactly once, and which layer stopped the
double runs the lock let through?

Evidence, per lock name (merchant-day):

* the `settle` ops: `ok` is a committed payment, `fail` a settlement that a layer
  refused (`stale-fence`: the fence; `duplicate-payment`: the idempotency key;
  `stale-version`: the version check; `row-lock-lost`: the row lock the read took was
  gone), `info` one whose commit is unknown;
* the `read` ops that found the day already `paid` (the job's own check, done under
  the lock: it stops a second run only while the lock still excludes; a read that
  took the row's lock, `row_locked`, counts for the row lock: it waited for the run
  before it to commit);
* the store's own count of payments at the end (a `final-state` event of process
  `"resource"`), which settles what the `info` ops left open.

A merchant-day with two payments is a violation (a double settlement), named with the
ops that paid. Without the final count, an `info` next to an `ok` is a possible double:
the verdict is then "unknown" rather than a guess. No settlement attempted at all is
"unknown" too: nothing was tested.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lockcheck.checker.api import CheckOptions
from lockcheck.history import Op, pair_ops

MAX_REPORTED = 50


def final_payments(ops: list[Op]) -> dict[str, int] | None:
    for o in reversed(ops):
        if o.process == "resource" and o.f == "final-state" and isinstance(o.value, dict):
            counts = o.value.get("payments")
            if isinstance(counts, dict):
                return {str(k): int(v) for k, v in counts.items()}
    return None


def check_settlement(ops: list[Op], opts: CheckOptions) -> dict[str, Any]:
    paid: dict[str, list[dict[str, Any]]] = defaultdict(list)
    maybe: dict[str, int] = defaultdict(int)
    stopped = {"fence": 0, "idempotency": 0, "already-paid": 0, "row-lock": 0,
               "version": 0, "other": 0}
    attempts = 0
    for p in pair_ops(o for o in ops if o.f in ("settle", "read") and o.key is not None):
        inv, done = p.invoke, p.complete
        if inv.f == "read":
            if done is not None and done.type == "ok" and isinstance(done.value, dict) \
                    and done.value.get("status") == "paid":
                stopped["row-lock" if done.value.get("row_locked") else "already-paid"] += 1
            continue
        attempts += 1
        key = str(inv.key)
        if done is None or done.type == "info":
            maybe[key] += 1
        elif done.type == "ok":
            paid[key].append({"process": inv.process, "fence": inv.fence,
                              "invoke_ns": inv.time, "ok_ns": done.time, "index": inv.index})
        else:
            kind = {"stale-fence": "fence", "duplicate-payment": "idempotency",
                    "stale-version": "version", "row-lock-lost": "row-lock"}.get(
                done.error or "", "other")
            stopped[kind] += 1
    if attempts == 0:
        return {"valid": "unknown", "nothing_checked": "no settlement was attempted",
                "attempts": 0, "stopped": stopped}
    final = final_payments(ops)
    keys = sorted(set(paid) | set(maybe) | set(final or {}))
    doubles, possible = [], []
    for k in keys:
        count = final[k] if final is not None and k in final else len(paid[k])
        if count > 1:
            doubles.append({"key": k, "payments": count, "settles": paid[k]})
        elif final is None and len(paid[k]) + maybe[k] > 1:
            possible.append({"key": k, "ok": len(paid[k]), "unknown": maybe[k]})
    settled = sum(1 for k in keys if (final or {}).get(k, len(paid[k])) >= 1)
    out: dict[str, Any] = {
        "attempts": attempts, "merchant_days_settled": settled,
        "double_settlements": doubles[:MAX_REPORTED],
        "double_settlement_count": len(doubles), "possible_doubles": possible[:MAX_REPORTED],
        "stopped": stopped, "ground_truth": "store" if final is not None else "history",
    }
    layers = (f"stopped by the fence {stopped['fence']}, by the idempotency key "
              f"{stopped['idempotency']}, by the job's own check {stopped['already-paid']}")
    for kind, name in (("row-lock", "the row lock"), ("version", "the version check")):
        if stopped[kind]:
            layers += f", by {name} {stopped[kind]}"
    if doubles:
        d = doubles[0]
        out.update(valid=False, summary=f"{len(doubles)} merchant-day(s) settled more than "
                   f"once (first: {d['key']}, {d['payments']} payments); {layers}")
    elif possible:
        out.update(valid="unknown", summary=f"{len(possible)} merchant-day(s) may have been "
                   f"settled twice (a settlement's commit is unknown); {layers}")
    else:
        out.update(valid=True, summary=f"every merchant-day settled at most once "
                   f"({settled} settled); {layers}")
    return out
