"""Prerequisites: what a test needs from the machine, and how to get what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from lockcheck.errors import BadInput

INSTALL = {
    "ip": "apt-get install -y iproute2",
    "iptables": "apt-get install -y iptables",
    "redis-server": "apt-get install -y redis-server",
}
SERVICE_BINARIES = {"redis": ["redis-server"]}


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
    out = [Finding("root", is_root(), f"euid {os.geteuid()}", "run as root (sudo)")]
    out.append(check_netns())
    for b in ("iptables", "redis-server"):
        path = shutil.which(b)
        out.append(Finding(b, path is not None, path or "not found", INSTALL[b]))
    return out


def require_for_test(service: str, command: str = "lockcheck test") -> None:
    """Raise BadInput with one clear line for the first missing prerequisite."""
    if not is_root():
        raise BadInput(f"{command} needs root (it creates network namespaces); run it "
                       "as root or with sudo")
    for b in ["ip", "iptables", *SERVICE_BINARIES.get(service, [])]:
        if shutil.which(b) is None:
            raise BadInput(f"{b} not found; install it with: {INSTALL[b]}")
