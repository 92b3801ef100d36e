"""Checkers by name, and which ones a workload runs by default."""

from __future__ import annotations

from typing import Any

from lockcheck.checker.api import Checker
from lockcheck.checker.deadlock import check_deadlock
from lockcheck.checker.fencing import check_fencing
from lockcheck.checker.hidden_grants import check_hidden_grants
from lockcheck.checker.leadership import check_leadership
from lockcheck.checker.lease_safety import check_lease_safety
from lockcheck.checker.linearizable import check_linearizable
from lockcheck.checker.lock_set import check_lock_set
from lockcheck.checker.mutual_exclusion import check_mutual_exclusion
from lockcheck.checker.outage import check_outage
from lockcheck.checker.settlement import check_settlement
from lockcheck.workloads.registry import WORKLOADS

CHECKERS: dict[str, Checker] = {
    "mutual-exclusion": check_mutual_exclusion,
    "fencing": check_fencing,
    "lease-safety": check_lease_safety,
    "linearizable": check_linearizable,
    "lock-set": check_lock_set,
    "settlement": check_settlement,
    "leadership": check_leadership,
    "hidden-grants": check_hidden_grants,
    "outage": check_outage,
    "deadlock": check_deadlock,
}

# for histories whose test.json names no checkers (runs written before it did): the
# workload's own list
DEFAULT_CHECKERS: dict[str, list[str]] = {name: list(w.checkers) for name, w in WORKLOADS.items()}

# checkers every run whose lock is checked (its checkers include linearizable) gets
# beside its workload's own; each abstains where it does not apply (hidden-grants: a
# backend whose fence does not count grants one by one; outage: a run without
# `--nemesis outage`)
WITH_LOCK_CHECKERS: tuple[str, ...] = ("hidden-grants", "outage")


def checkers_of(test: dict[str, Any], workload: str) -> list[str]:
    """The checkers a run is checked with: its test.json's list (or its workload's),
    and those every lock check gets."""
    names = list(test.get("checkers") or DEFAULT_CHECKERS.get(workload, []))
    if "linearizable" in names:
        names += [n for n in WITH_LOCK_CHECKERS if n not in names]
    return names
