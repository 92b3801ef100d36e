"""The in-house lock without its error mapping: redis-py's exceptions go through as they
are, so lockcheck records them as info and the summary says the client maps none."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "inhouse_lock_unmapped", Path(__file__).resolve().parents[2] / "examples" / "inhouse_lock.py")
assert _spec is not None and _spec.loader is not None
inhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inhouse)


class Unmapped(inhouse.InhouseLock):
    def _do(self, command):
        return command()  # the mistake: no Definite/Indefinite


def make_clients(config, keys, opts):
    host, port = config["masters"][0]
    client = Unmapped(host, port, opts.ttl_ms, opts.op_timeout_s, opts.drift)
    return {k: client for k in keys}
