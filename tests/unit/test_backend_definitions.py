"""Every backend family is whole: what adding a backend takes, checked in one place.

For each family of `BACKENDS`: its database module in `lockcheck/db/`, its lock-client
modules in `lockcheck/locks/` with their `mapped_errors` and a unit test of them, a
section of docs/backends.md, its client library (with its extras) in pyproject.toml's
dependencies, and the Debian packages of its servers in the node image's Dockerfile
and in scripts/install. The packages come from the backends' own `servers`, which
preflight (doctor, the refusal of a run, the ssh provider's apt-get) also reads.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

from lockcheck import servers
from lockcheck.backend import Backend
from lockcheck.backends import BACKENDS
from lockcheck.cluster.ssh import BASE_PACKAGES
from lockcheck.preflight import INSTALL, TOOLS, debian_packages
from lockcheck.registry import load
from lockcheck.servers import Debian

ROOT = Path(__file__).resolve().parents[2]
# what the image and the installer bring besides servers: the tools lockcheck drives,
# those a node needs (ps, setpriv, libfaketime), tini (the image's PID 1), faketime(1),
# the C++ runtime of the Node that runs the servers mounted from lockcheck's own folder
NODE_TOOLS = {*TOOLS.values(), *BASE_PACKAGES, "tini", "faketime", "libstdc++6"}
# what only the installer brings: gpgv and the keyring check an older Debian release's
# signature before `lockcheck servers install` unpacks a package of it
INSTALLER_TOOLS = {"gpgv", "debian-archive-keyring"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements(path: Path) -> dict[str, set[str]]:
    """The project's dependencies: normalized name -> extras asked for."""
    deps = tomllib.loads(path.read_text())["project"]["dependencies"]
    out: dict[str, set[str]] = {}
    for d in deps:
        m = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", d)
        assert m, d
        out[normalized(m.group(1))] = {e.strip() for e in (m.group(2) or "").split(",")
                                       if e.strip()}
    return out


def dockerfile_packages(path: Path) -> set[str]:
    """The words of the image's `apt-get install` command, options left out."""
    text = path.read_text().replace("\\\n", " ")
    out: set[str] = set()
    for step in text.split("&&"):
        words = step.split()
        if "install" in words and "apt-get" in words:
            out |= {w for w in words[words.index("install") + 1:] if not w.startswith("-")}
    return out


def installer_packages(path: Path, name: str = "pkgs") -> set[str]:
    """The OS packages of scripts/install (its `pkgs=(...)` list, or `optional=(...)`:
    those installed where the distribution has them)."""
    m = re.search(rf"^{name}=\(([^)]*)\)", path.read_text(), re.M)
    assert m, f"no {name}=(...) list in scripts/install"
    return set(m.group(1).split())


def docs_headings(path: Path) -> list[set[str]]:
    """The words of each `## ` heading of a page (backticks and punctuation dropped)."""
    return [set(re.findall(r"[A-Za-z0-9][A-Za-z0-9_-]*", line[3:]))
            for line in path.read_text().splitlines() if line.startswith("## ")]


def module_file(module: str, root: Path) -> Path:
    return root / (module.replace(".", "/") + ".py")


def error_tests(module: str, tests: Iterable[Path]) -> list[Path]:
    """Unit tests that import `mapped_errors` (or the module that has it) from `module`."""
    pattern = re.compile(rf"from {re.escape(module)} import[^\n]*(\(|mapped_errors)")
    return [t for t in tests if pattern.search(t.read_text()) and
            "mapped_errors" in t.read_text()]


def family_problems(family: str, backends: list[Backend], root: Path = ROOT) -> list[str]:
    """What the family lacks, one line each (empty: it is whole)."""
    problems: list[str] = []
    requirements = pyproject_requirements(root / "pyproject.toml")
    image = dockerfile_packages(root / "lockcheck/cluster/image/Dockerfile")
    installer = installer_packages(root / "scripts/install")
    optional = installer_packages(root / "scripts/install", "optional")
    headings = docs_headings(root / "docs/backends.md")
    tests = sorted((root / "tests/unit").glob("test_*.py"))
    if not any(family in words for words in headings):
        problems.append(f"{family}: no '## ' section naming it in docs/backends.md")
    for b in backends:
        db_module = b.db.partition(":")[0]
        if not db_module.startswith("lockcheck.db.") or \
                not module_file(db_module, root).is_file():
            problems.append(f"{b.name}: its database {b.db} is not a module of lockcheck/db/")
        else:
            load(b.db)
        client_module = b.client.partition(":")[0]
        if not client_module.startswith("lockcheck.locks.") or \
                not module_file(client_module, root).is_file():
            problems.append(f"{b.name}: its client {b.client} is not a module of "
                            "lockcheck/locks/")
        elif not callable(getattr(importlib.import_module(client_module), "mapped_errors",
                                  None)):
            problems.append(f"{b.name}: {client_module} has no mapped_errors")
        elif not error_tests(client_module, tests):
            problems.append(f"{b.name}: no unit test of {client_module}.mapped_errors")
        # lockcheck's own server needs no library beyond lockcheck itself
        wanted = set() if b.library == "lockcheck" else requirements.get(normalized(b.library))
        if wanted is None:
            problems.append(f"{b.name}: its library {b.library} is not a dependency in "
                            "pyproject.toml")
        elif not set(b.library_extras) <= wanted:
            problems.append(f"{b.name}: pyproject.toml asks {b.library} without the extras "
                            f"{sorted(set(b.library_extras) - wanted)}")
        for program, source in b.sources().items():
            if not isinstance(source, Debian):
                # fetched by `lockcheck servers install` (scripts/install runs it) to
                # ROOT/bin, the folder the docker provider mounts and the ssh one copies
                if not program.startswith(f"{servers.ROOT}/bin/"):
                    problems.append(f"{b.name}: {program} comes from {source.describe()} "
                                    f"but is not under {servers.ROOT}/bin")
                if INSTALL.get(program) != "lockcheck servers install":
                    problems.append(f"{b.name}: no install line for {program}")
                continue
            package = source.package
            if package not in image:
                problems.append(f"{b.name}: {package} (for {program}) is not installed in "
                                "the node image (lockcheck/cluster/image/Dockerfile)")
            if package not in installer:
                problems.append(f"{b.name}: {package} (for {program}) is not in "
                                "scripts/install")
            if INSTALL.get(program) != f"apt-get install -y {package}":
                problems.append(f"{b.name}: {program} is brought by {package} here and by "
                                f"another package elsewhere ({INSTALL.get(program)})")
        for choice, programs in b.alternatives.items():
            # servers only some releases ship: installed where offered, so not in the
            # node image (built on one release) nor in the list that must install
            if choice == b.server or not b.server:
                problems.append(f"{b.name}: --server {choice} without a name for its own "
                                "server, or as its own")
            for program, package in programs.items():
                if package not in optional:
                    problems.append(f"{b.name}: {package} (for --server {choice}) is not "
                                    "in scripts/install's optional list")
                if INSTALL.get(program) != f"apt-get install -y {package}":
                    problems.append(f"{b.name}: no install line for {program}")
                if not program.startswith(f"{choice}-"):
                    problems.append(f"{b.name}: --server {choice} runs {program}, but the "
                                    f"database starts {choice}-server/-sentinel")
        if debian_packages(b.binaries) != b.packages:
            problems.append(f"{b.name}: the ssh provider would install "
                            f"{debian_packages(b.binaries)}, not {b.packages}")
    return problems


def unclaimed_packages(backends: Iterable[Backend], root: Path = ROOT) -> list[str]:
    """Packages the image or the installer bring that no backend's `servers` names (a
    backend whose definition lost them)."""
    claimed = {p for b in backends for p in b.packages} | NODE_TOOLS | INSTALLER_TOOLS | {
        p for b in backends for programs in b.alternatives.values()
        for p in programs.values()}
    return [f"{where}: {p} is installed for no backend (none names it in its servers)"
            for where, found in [
                ("the node image", dockerfile_packages(
                    root / "lockcheck/cluster/image/Dockerfile")),
                ("scripts/install", installer_packages(root / "scripts/install")),
                ("scripts/install (optional)",
                 installer_packages(root / "scripts/install", "optional"))]
            for p in sorted(found - claimed)]


def test_every_backend_family_is_whole() -> None:
    families: dict[str, list[Backend]] = {}
    for b in BACKENDS.values():
        families.setdefault(b.family, []).append(b)
    assert len(families) >= 6
    problems = [p for family, members in sorted(families.items())
                for p in family_problems(family, members)]
    problems += unclaimed_packages(BACKENDS.values())
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
