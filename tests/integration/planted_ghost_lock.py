"""A planted mistake for client-check: the in-house lock whose renew takes the lock back
when it finds it free, so a holder whose lease ran out, and whose lock another client
was granted and released meanwhile, "renews" it: the lock comes back from the dead, and
the next client is refused by a holder that stopped holding it long ago."""

import time

from example_lock import clients_of, inhouse


class RenewTakesAFreeLock(inhouse.InhouseLock):
    def renew(self, lease):
        t0 = time.monotonic_ns()
        ours = self._do(lambda: self.r.eval(inhouse.RENEW, 1, lease.key, lease.token,
                                            self.ttl_ms))
        # the mistake: "not ours any more, but nobody has it: take it again"
        if not ours and not self._do(lambda: self.r.set(lease.key, lease.token, nx=True,
                                                        px=self.ttl_ms)):
            raise inhouse.NotOwner("not-owner")
        lease.valid_until_ns = inhouse.lease_deadline(t0, self.ttl_ms, self.drift)


def make_clients(config, keys, opts):
    return clients_of(RenewTakesAFreeLock, config, keys, opts)
