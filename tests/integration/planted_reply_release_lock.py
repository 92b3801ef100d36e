"""A planted mistake for `--nemesis reply-loss`: the in-house lock whose release, when its
token-checked delete times out, makes sure with a plain DEL, retried until it answers.

The release's reply is what gets lost: the checked delete was applied, the lock went to
the next client, and the "make sure" DEL that finally gets through deletes that
client's lock, so a third client is granted it while the second still holds it.
"""

import time

import redis
from example_lock import clients_of, inhouse

# how long the release keeps trying its plain DEL (the reply path may be cut that long)
RETRY_FOR_S = 10.0


class ReleaseRetriesWithDel(inhouse.InhouseLock):
    def release(self, lease):
        try:
            ours = self._do(lambda: self.r.eval(inhouse.RELEASE, 1, lease.key, lease.token))
        except inhouse.Indefinite:
            # the mistake: "it timed out, so it may not have happened: delete it anyway"
            deadline = time.monotonic() + RETRY_FOR_S
            while True:
                try:
                    self.r.delete(lease.key)
                    return
                except (redis.ConnectionError, redis.TimeoutError):
                    if time.monotonic() >= deadline:
                        raise inhouse.Indefinite("timeout") from None
        if not ours:
            raise inhouse.NotOwner("not-owner")


def make_clients(config, keys, opts):
    return clients_of(ReleaseRetriesWithDel, config, keys, opts)
