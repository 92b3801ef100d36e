"""examples/inhouse_lock.py, loaded from its file, for the adapters of the tests that
change one thing in it (planted_lock.py, unmapped_lock.py)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "inhouse_lock_for_tests", Path(__file__).resolve().parents[2] / "examples" / "inhouse_lock.py")
assert _spec is not None and _spec.loader is not None
inhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inhouse)


def clients_of(cls, config, keys, opts):
    """The example's factory, with `cls` (a subclass of its lock) instead."""
    host, port = config["masters"][0]
    client = cls(host, port, opts.ttl_ms, opts.op_timeout_s, opts.drift)
    return {k: client for k in keys}
