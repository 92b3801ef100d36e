"""Prerequisites: what a test needs from the machine, and how to get what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from lockcheck.backends import BACKENDS
from lockcheck.errors import BadInput

# the tools lockcheck itself drives on this machine -> their Debian packages
TOOLS = {"ip": "iproute2", "iptables": "iptables"}


def debian_package_of() -> dict[str, str]:
    """Program -> the Debian package that brings it: the tools, and every backend's
    servers as its definition names them."""
    out = dict(TOOLS)
    for b in BACKENDS.values():
        out.update(b.servers)
    return out


INSTALL = {program: f"apt-get install -y {package}"
           for program, package in debian_package_of().items()}


@dataclass
class Finding:
    what: str
    ok: bool
    detail: str
    fix: str = ""
    optional: bool = False  # what only another provider needs: shown, not a failure


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


def check_proc() -> Finding:
    from lockcheck.cluster.node import ForeignProc, check_proc

    try:
        check_proc()
    except ForeignProc as e:
        return Finding("/proc", False, str(e).split(":", 1)[0], "mount -t proc proc /proc")
    return Finding("/proc", True, "this PID namespace's (processes can be told alive or gone)")


def doctor() -> list[Finding]:
    out = [Finding("root", is_root(), f"euid {os.geteuid()}", "run as root (sudo)")]
    out.append(check_proc())
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


def provider_findings(name: str | None, nodes_file: str | None) -> list[Finding]:
    """The docker and ssh providers: what each needs, checked only as far as asked
    (`--provider`); without it, docker is looked at only if a daemon is configured,
    as information that does not fail the doctor."""
    from lockcheck.cluster.providers import provider

    out: list[Finding] = []
    if name is not None:
        provider(name)  # an unknown name is one line
    explicit = name == "docker"
    if explicit or (name is None and (os.environ.get("DOCKER_HOST") or
                                      os.path.exists("/var/run/docker.sock"))):
        from lockcheck.cluster.containers import doctor_findings

        out += [Finding(w, ok, d, fix, optional=not explicit)
                for w, ok, d, fix in doctor_findings()]
    if name == "ssh" or nodes_file is not None:
        from lockcheck.cluster.ssh import doctor_findings as ssh_findings

        if nodes_file is None:
            raise BadInput("lockcheck doctor --provider ssh needs --nodes-file")
        out += [Finding(w, ok, d, fix) for w, ok, d, fix in ssh_findings(nodes_file)]
    return out


def debian_packages(binaries: Sequence[str]) -> tuple[str, ...]:
    """The Debian packages that bring these programs, for a provider that installs
    them on its nodes."""
    known = debian_package_of()
    return tuple(dict.fromkeys(known[b] for b in binaries if b in known))


def require_binaries(binaries: Sequence[str]) -> None:
    """Raise BadInput with one clear line for the first server program that is missing."""
    for b in binaries:
        if shutil.which(b) is None:
            how = INSTALL.get(b, "scripts/install")
            raise BadInput(f"{b} not found; install it with: {how}")
