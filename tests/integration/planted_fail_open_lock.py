"""A planted mistake for the outage fault: the in-house lock that fails open. When the
lock service does not answer (a refused connection, a timeout), its acquire says
"granted" rather than stop the business: "the timeout swallowed the error and we
proceeded". With every server down, every holder works without a lock."""

import time
import uuid

from example_lock import clients_of, inhouse


class FailOpenLock(inhouse.InhouseLock):
    def acquire(self, key):
        try:
            return super().acquire(key)
        except (inhouse.Definite, inhouse.Indefinite):  # the mistake: no lock, no stop
            return inhouse.Lease(key=key, token=uuid.uuid4().hex, fence=None,
                                 ttl_ms=self.ttl_ms,
                                 valid_until_ns=inhouse.lease_deadline(
                                     time.monotonic_ns(), self.ttl_ms, self.drift))


def make_clients(config, keys, opts):
    return clients_of(FailOpenLock, config, keys, opts)
