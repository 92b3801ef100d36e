"""Checkers by name, and which ones a workload runs by default."""

from __future__ import annotations

from lockcheck.checker.api import Checker
from lockcheck.checker.fencing import check_fencing
from lockcheck.checker.lease_safety import check_lease_safety
from lockcheck.checker.linearizable import check_linearizable
from lockcheck.checker.lock_set import check_lock_set
from lockcheck.checker.mutual_exclusion import check_mutual_exclusion
from lockcheck.checker.settlement import check_settlement
from lockcheck.workloads.registry import WORKLOADS

CHECKERS: dict[str, Checker] = {
    "mutual-exclusion": check_mutual_exclusion,
    "fencing": check_fencing,
    "lease-safety": check_lease_safety,
    "linearizable": check_linearizable,
    "lock-set": check_lock_set,
    "settlement": check_settlement,
}

# for histories whose test.json names no checkers (runs written before it did): the
# workload's own list
DEFAULT_CHECKERS: dict[str, list[str]] = {name: list(w.checkers) for name, w in WORKLOADS.items()}
