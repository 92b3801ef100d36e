"""A planted mistake for client-check: the in-house lock that sets its TTL in whole
seconds (`EX int(ttl_ms / 1000)`), so a lease asked for 1500 ms ends after 1 s, while
its holder's lease clock still counts 1500 ms."""

import time
import uuid

from example_lock import clients_of, inhouse


class TtlInWholeSeconds(inhouse.InhouseLock):
    def acquire(self, key):
        token, t0 = uuid.uuid4().hex, time.monotonic_ns()
        # the mistake: seconds, rounded down
        if not self._do(lambda: self.r.set(key, token, nx=True, ex=int(self.ttl_ms / 1000))):
            return None
        return inhouse.Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                             valid_until_ns=inhouse.lease_deadline(t0, self.ttl_ms,
                                                                   self.drift))


def make_clients(config, keys, opts):
    return clients_of(TtlInWholeSeconds, config, keys, opts)
