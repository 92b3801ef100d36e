"""The system folders on PATH: lockcheck runs root's tools (ip, iptables, sysctl).

Debian keeps them in /usr/sbin and /sbin, which a root shell has on its PATH but a
cleared environment (`env -i PATH=/usr/bin:/bin ...`, cron, some CI runners) has not.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def with_system_dirs(path: str) -> str:
    """`path` with the system folders it lacks appended (its own order kept first)."""
    have = [p for p in path.split(os.pathsep) if p]
    return os.pathsep.join(have + [d for d in SYSTEM_DIRS if d not in have])


def add_system_dirs(environ: MutableMapping[str, str]) -> None:
    """Append the system folders to `environ`'s PATH, for this process and its children."""
    environ["PATH"] = with_system_dirs(environ.get("PATH", os.defpath))
