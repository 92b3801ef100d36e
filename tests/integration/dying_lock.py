"""The in-house lock in a worker that quits for good (exit status 0) at its 20th
acquire: every client worker of a run ends early, having learnt next to nothing."""

import os

from example_lock import clients_of, inhouse


class DiesEarly(inhouse.InhouseLock):
    acquires = 0

    def acquire(self, key):
        DiesEarly.acquires += 1
        if DiesEarly.acquires >= 20:
            os._exit(0)
        return super().acquire(key)


def make_clients(config, keys, opts):
    return clients_of(DiesEarly, config, keys, opts)
