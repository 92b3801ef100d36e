"""The `mutex` workload: acquire, hold for a while (renewing), release.

The lock itself is on trial: any two holders at once is a violation.
"""

from __future__ import annotations

from lockcheck.workloads.api import Reason, Section


def body(section: Section) -> Reason:
    return section.work(section.hold_time())
