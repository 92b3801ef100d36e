"""Registries' entries by name: `"package.module:attr"` strings, loaded when used.

The tables (`BACKENDS`, `NEMESES`, `WORKLOADS`, `PROVIDERS`) name their factories this
way so that reading a table imports nothing heavy: a client worker loads only its own
client library, the controller only the database and provider it runs, and the CLI's
help none of them.
"""

from __future__ import annotations

import importlib
from typing import Any


def load(dotted: str) -> Any:
    """`"package.module:attr"` -> the attribute."""
    module, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(module), attr)
