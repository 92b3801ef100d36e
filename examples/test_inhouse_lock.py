"""The in-house lock in a project's own test suite (docs/your-own-lock.md).

`pytest examples/test_inhouse_lock.py` (as root, with redis-server installed): the
first test passes; the second fails, because a lock without a fence cannot survive a
paused holder, and its failure says which checker found what and where the report is.
"""

import pytest

CLIENT = "examples/inhouse_lock.py:make_clients"


@pytest.mark.lockcheck(backend="redis", client=CLIENT, nemesis="none", time_limit=10)
def test_inhouse_lock_without_faults(lockcheck_result):
    lockcheck_result.assert_safe()


# one lock name, long sections and a pause every second: there is nearly always a
# holder to pause, and the next holder is always waiting
@pytest.mark.lockcheck(backend="redis", client=CLIENT, nemesis="client-pause", keys=1,
                       hold_ms="300-800", nemesis_interval=1, time_limit=15)
def test_inhouse_lock_with_paused_holders(lockcheck_result):
    lockcheck_result.assert_safe()
