"""Prerequisites: what a test needs from the machine, and how to get what is missing."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockcheck.backends import BACKENDS, OLDEST, PACKAGED_IN
from lockcheck.errors import BadInput
from lockcheck.servers import Debian, Source, install_hint

# the tools lockcheck itself drives on this machine -> their Debian packages
TOOLS = {"ip": "iproute2", "iptables": "iptables"}


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path))


def find_program(program: str) -> str | None:
    """Where a server program is on this machine: a name on PATH, a path, or a path
    with one `*` for a version folder (`/usr/lib/postgresql/*/bin/postgres`), which
    finds the highest version installed: distributions ship different majors."""
    if "*" in program:
        found = sorted(glob.glob(program), key=_version_key)
        return found[-1] if found else None
    if program.startswith("/"):
        return program if os.path.exists(program) else None
    return shutil.which(program)


def source_of() -> dict[str, Source]:
    """Program -> where it comes from: the tools (Debian packages), and every
    backend's servers as its definition names them."""
    out: dict[str, Source] = {p: Debian(package) for p, package in TOOLS.items()}
    for b in BACKENDS.values():
        out.update(b.sources())
        for choice in b.alternatives:
            out.update(b.sources(choice))
    return out


def debian_package_of() -> dict[str, str]:
    """Program -> the Debian package of this distribution that brings it."""
    return {p: s.package for p, s in source_of().items() if isinstance(s, Debian)}


INSTALL = {program: install_hint(source) for program, source in source_of().items()}


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


def program_version(path: str) -> str:
    """The first line a server program prints of its version ('' if it prints none)."""
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (r.stdout or r.stderr).strip().splitlines()
    words = lines[0].split() if lines else []
    # up to the version number: "Redis server v=7.0.15", "etcd Version: 3.4.23"
    upto = next((i for i, w in enumerate(words) if any(c.isdigit() for c in w)), len(words))
    return " ".join(words[:upto + 1])


def server_findings() -> list[Finding]:
    """Each server program: where it is and its version, for which backends; the
    servers of `--server` choices only where installed (shown, not a failure)."""
    needed: dict[str, list[str]] = {}
    chosen: dict[str, list[str]] = {}
    for b in BACKENDS.values():
        for binary in b.binaries:
            needed.setdefault(binary, []).append(b.name)
        for choice, programs in b.alternatives.items():
            for binary in programs:
                chosen.setdefault(binary, []).append(f"--server {choice}")
    sources = source_of()
    out = []
    for binary, users in [*needed.items(), *chosen.items()]:
        path = find_program(binary)
        optional = binary in chosen
        source = sources.get(binary)
        # one lockcheck installed itself is the version it installed; never started to
        # ask (an npm server given --version may just start serving)
        own = source is not None and not isinstance(source, Debian)
        version = ((source.describe() if own and source else program_version(path))
                   if path else "")
        where = (f"{path}, {version}" if version else path) if path else "not found"
        if path is None and binary in PACKAGED_IN:
            where += f" (packaged in {PACKAGED_IN[binary]})"
        detail = f"{where} (for {', '.join(dict.fromkeys(users))})"
        out.append(Finding(os.path.basename(binary), path is not None, detail,
                           INSTALL.get(binary, "scripts/install"), optional=optional))
    return out


def doctor() -> list[Finding]:
    from lockcheck.distro import distribution

    out = [Finding("distribution", True, distribution())]
    out.append(Finding("root", is_root(), f"euid {os.geteuid()}", "run as root (sudo)"))
    out.append(check_proc())
    out.append(check_netns())
    path = shutil.which("iptables")
    out.append(Finding("iptables", path is not None, path or "not found", INSTALL["iptables"]))
    return out + server_findings()


def provider_findings(name: str | None, options: Mapping[str, Any]) -> list[Finding]:
    """Each provider's own checks (`Provider.doctor`), as far as asked: the one named
    with `--provider`, else every provider for what is worth showing anyway."""
    from lockcheck.cluster.providers import all_providers, provider

    if name is not None:
        return provider(name).doctor(options, True)
    return [f for p in all_providers() for f in p.doctor(options, False)]


def debian_packages(binaries: Sequence[str]) -> tuple[str, ...]:
    """The Debian packages that bring these programs, for a provider that installs
    them on its nodes."""
    known = debian_package_of()
    return tuple(dict.fromkeys(known[b] for b in binaries if b in known))


def require_binaries(binaries: Sequence[str]) -> None:
    """Raise BadInput with one clear line for the first server program that is missing."""
    for b in binaries:
        if find_program(b) is None:
            how = INSTALL.get(b, "scripts/install")
            where = f" (packaged in {PACKAGED_IN[b]})" if b in PACKAGED_IN else ""
            raise BadInput(f"{b} not found; install it with: {how}{where}")


def _numbers(version: str) -> tuple[int, ...]:
    out = []
    for part in re.split(r"[.+~-]", version.strip()):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def check_server_versions(versions: Mapping[str, str]) -> None:
    """Refuse, with one line, a server older than lockcheck runs (`backends.OLDEST`);
    a version that cannot be read is let through (the run records what it found)."""
    for program, version in versions.items():
        oldest = OLDEST.get(program)
        found = _numbers(str(version))
        if oldest is not None and found and found < _numbers(oldest):
            raise BadInput(f"found {program} {version}; lockcheck runs {program} {oldest} "
                           "or newer (this distribution's is too old: see "
                           "docs/releases.md)")
