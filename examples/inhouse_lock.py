"""An in-house Redis lock, and its lockcheck adapter (docs/your-own-lock.md).

The lock: SET key token NX PX ttl to take it; a Lua compare-and-delete to release and
a Lua compare-and-pexpire to renew, so only the holder's token can do either.
"""

import time
import uuid

import redis

from lockcheck.api import Definite, Indefinite, Lease, NotOwner, lease_deadline

OWNED = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end "
RELEASE = OWNED + "return redis.call('del', KEYS[1])"
RENEW = OWNED + "return redis.call('pexpire', KEYS[1], ARGV[2])"


class InhouseLock:
    def __init__(self, host, port, ttl_ms, timeout_s, drift):
        # no retries: a SET NX retried after its reply was lost would answer "busy"
        self.r = redis.Redis(host=host, port=port, socket_timeout=timeout_s,
                             socket_connect_timeout=timeout_s, retry=None)
        self.ttl_ms, self.drift = ttl_ms, drift

    def _do(self, command):
        try:
            return command()
        except redis.ConnectionError as e:  # refused: nothing was sent
            if "connecting" in str(e):
                raise Definite("connection refused") from e
            raise Indefinite("connection lost") from e
        except redis.TimeoutError as e:  # the command may have been applied
            raise Indefinite("timeout") from e

    def acquire(self, key):
        token, t0 = uuid.uuid4().hex, time.monotonic_ns()
        if not self._do(lambda: self.r.set(key, token, nx=True, px=self.ttl_ms)):
            return None
        return Lease(key=key, token=token, fence=None, ttl_ms=self.ttl_ms,
                     valid_until_ns=lease_deadline(t0, self.ttl_ms, self.drift))

    def renew(self, lease):
        t0 = time.monotonic_ns()
        if not self._do(lambda: self.r.eval(RENEW, 1, lease.key, lease.token, self.ttl_ms)):
            raise NotOwner("not-owner")
        lease.valid_until_ns = lease_deadline(t0, self.ttl_ms, self.drift)

    def release(self, lease):
        if not self._do(lambda: self.r.eval(RELEASE, 1, lease.key, lease.token)):
            raise NotOwner("not-owner")

    def close(self):
        self.r.close()


def make_clients(config, keys, opts):
    """lockcheck's ClientFactory: the redis backend's servers -> a client per lock name."""
    host, port = config["masters"][0]
    client = InhouseLock(host, port, opts.ttl_ms, opts.op_timeout_s, opts.drift)
    return {k: client for k in keys}
