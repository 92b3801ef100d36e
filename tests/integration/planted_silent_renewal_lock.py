"""A planted mistake for client-check: the in-house lock whose renewal ignores a refusal
while the holder's own lease clock says the lease is still valid ("we hold it, so a no
must be a glitch"), as a renewal thread that logs a refusal and carries on does. A lease
that ran out is renewed strictly (refused with NotOwner), so the expired-holder steps
pass; a lock taken away before its time (deleted, evicted, failed over) is never
reported, and its holder keeps working without it."""

import time

from example_lock import clients_of, inhouse


class SilentRenewalLock(inhouse.InhouseLock):
    def renew(self, lease):
        t0 = time.monotonic_ns()
        ours = self._do(lambda: self.r.eval(inhouse.RENEW, 1, lease.key, lease.token,
                                            self.ttl_ms))
        if not ours and not lease.still_holds(t0):  # the mistake: only a lapsed lease counts
            raise inhouse.NotOwner("not-owner")
        lease.valid_until_ns = inhouse.lease_deadline(t0, self.ttl_ms, self.drift)


def make_clients(config, keys, opts):
    return clients_of(SilentRenewalLock, config, keys, opts)
