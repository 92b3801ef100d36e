"""A planted mistake for client-check: the in-house lock whose release does not check
the owner (a plain DEL), so an expired holder's release frees the next holder's lock."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "inhouse_lock", Path(__file__).resolve().parents[2] / "examples" / "inhouse_lock.py")
assert _spec is not None and _spec.loader is not None
inhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inhouse)


class ReleaseWithoutOwnerCheck(inhouse.InhouseLock):
    def release(self, lease):
        self._do(lambda: self.r.delete(lease.key))  # the mistake: whoever holds it now


def make_clients(config, keys, opts):
    host, port = config["masters"][0]
    client = ReleaseWithoutOwnerCheck(host, port, opts.ttl_ms, opts.op_timeout_s, opts.drift)
    return {k: client for k in keys}
