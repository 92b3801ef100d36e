"""A planted mistake for client-check: the in-house lock whose release does not check
the owner (a plain DEL), so an expired holder's release frees the next holder's lock."""

from example_lock import clients_of, inhouse


class ReleaseWithoutOwnerCheck(inhouse.InhouseLock):
    def release(self, lease):
        self._do(lambda: self.r.delete(lease.key))  # the mistake: whoever holds it now


def make_clients(config, keys, opts):
    return clients_of(ReleaseWithoutOwnerCheck, config, keys, opts)
