"""Prerequisites: what a test needs from the machine, and how to get what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from lockcheck.errors import BadInput

INSTALL = {
    "ip": "apt-get install -y iproute2",
    "iptables": "apt-get install -y iptables",
    "redis-server": "apt-get install -y redis-server",
    "etcd": "apt-get install -y etcd-server",
    "redis-sentinel": "apt-get install -y redis-sentinel",
    "/usr/lib/postgresql/15/bin/postgres": "apt-get install -y postgresql-15",
}


@dataclass
class Finding:
    what: str
    ok: bool
    detail: str
    fix: str = ""


def is_root() -> bool:
    return os.geteuid() == 0


def check_netns() -> Finding:
    if not is_root():
        return Finding("network namespaces", False, "needs root", "run as root (sudo)")
    if shutil.which("ip") is None:
        return Finding("network namespaces", False, "ip not found", INSTALL["ip"])
    name = f"lc-doctor-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return Finding("network namespaces", False, r.stderr.strip()[:80],
                       "a kernel with CONFIG_NET_NS and permission to use it")
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return Finding("network namespaces", True, "ip netns add/del work")


def doctor() -> list[Finding]:
    from lockcheck.backends import BACKENDS

    out = [Finding("root", is_root(), f"euid {os.geteuid()}", "run as root (sudo)")]
    out.append(check_netns())
    path = shutil.which("iptables")
    out.append(Finding("iptables", path is not None, path or "not found", INSTALL["iptables"]))
    needed: dict[str, list[str]] = {}
    for b in BACKENDS.values():
        for binary in b.binaries:
            needed.setdefault(binary, []).append(b.name)
    for binary, users in needed.items():
        path = shutil.which(binary)
        detail = (path or "not found") + f" (for {', '.join(users)})"
        out.append(Finding(binary, path is not None, detail,
                           INSTALL.get(binary, "scripts/install")))
    return out


def require_binaries(binaries: Sequence[str]) -> None:
    """Raise BadInput with one clear line for the first server program that is missing."""
    for b in binaries:
        if shutil.which(b) is None:
            how = INSTALL.get(b, "scripts/install")
            raise BadInput(f"{b} not found; install it with: {how}")
