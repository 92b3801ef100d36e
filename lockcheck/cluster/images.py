"""The docker provider's node image: one image for every service, from the repository's
`cluster/image/Dockerfile`.

`lockcheck images build` builds it on the Debian release this machine runs (bookworm or
trixie; bookworm on other hosts), `debian:<suite>` from a registry; where no registry
can be reached, `--base debootstrap` first makes that Debian here
(`debootstrap --variant=minbase <suite>` from this machine's own apt mirror, then
`docker import`) and builds the same Dockerfile on it. The image is labelled with a
hash of the Dockerfile and the base it was built on, so a build is skipped while both
are unchanged (the image is the cache) and `doctor` can say when it is out of date.
Build steps run in the host's network namespace (`network_mode=host`): they need the
apt mirror, and a daemon started without a default bridge has no other network.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockcheck.distro import OS_RELEASE
from lockcheck.distro import os_release as read_os_release
from lockcheck.errors import BadInput

# the Debian releases the image can be built on; the image follows this machine's where
# it is one of them (its packages are then the ones the host's own install took), and
# bookworm elsewhere (an Ubuntu host, an older Debian)
SUITES = ("bookworm", "trixie")
FALLBACK_SUITE = "bookworm"


def host_suite(os_release: Path = OS_RELEASE) -> str:
    fields = read_os_release(os_release)
    codename = fields.get("VERSION_CODENAME", "")
    return codename if fields.get("ID") == "debian" and codename in SUITES else FALLBACK_SUITE


SUITE = host_suite()
IMAGE = f"lockcheck-node:{SUITE}"
DEBOOTSTRAP_BASE = f"lockcheck-base:{SUITE}-minbase"
REGISTRY_BASE = f"debian:{SUITE}"
LABEL = "lockcheck.image"  # "<dockerfile hash> <base>"
DEB822_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
ONE_LINE_SOURCES = Path("/etc/apt/sources.list")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def dockerfile() -> Path:
    return Path(__file__).parent / "image" / "Dockerfile"


def stamp(base: str) -> str:
    """What the image is made of: the Dockerfile's contents and the base's name."""
    digest = hashlib.sha256(dockerfile().read_bytes()).hexdigest()[:16]
    return f"{digest} {base}"


def base_of(mode: str) -> str:
    if mode == "registry":
        return REGISTRY_BASE
    if mode == "debootstrap":
        return DEBOOTSTRAP_BASE
    raise BadInput(f"unknown --base {mode!r}; choose registry or debootstrap")


def image_status(client: Any, image: str = IMAGE) -> tuple[bool, str | None]:
    """(exists, what it was built from) of the node image in this daemon."""
    import docker.errors

    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        return False, None
    labels = img.labels or {}
    return True, labels.get(LABEL)


def up_to_date(built_from: str | None) -> bool:
    """True if the image was built from today's Dockerfile (on either base)."""
    if built_from is None:
        return False
    return built_from.split(" ", 1)[0] == stamp("").split(" ", 1)[0]


def apt_mirror(deb822: Path = DEB822_SOURCES, one_line: Path = ONE_LINE_SOURCES, *,
               suite: str = SUITE, default: str = DEFAULT_MIRROR) -> str:
    """The Debian mirror this machine's apt uses for `suite` (bookworm: the debootstrap
    source; scripts/release-check asks for this machine's suite and its -security)."""
    with contextlib.suppress(OSError):
        for stanza in deb822.read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if suite in fields.get("Suites", "").split() and fields.get("URIs"):
                return fields["URIs"].split()[0]
    with contextlib.suppress(OSError):
        for line in one_line.read_text().splitlines():
            # deb [options] URI SUITE COMPONENT...
            parts = re.sub(r"\[[^]]*\]", " ", line).split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
                return parts[1]
    return default


def _unmount_under(root: Path) -> None:
    """An interrupted debootstrap can leave /proc or /sys mounted inside the rootfs."""
    mounts = []
    with contextlib.suppress(OSError), open("/proc/mounts") as fh:
        for line in fh:
            target = line.split()[1].replace("\\040", " ")
            if target == str(root) or target.startswith(f"{root}/"):
                mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def make_debootstrap_base(client: Any, say: Callable[[str], None]) -> str:
    """Debian SUITE (minbase) made here and imported as DEBOOTSTRAP_BASE."""
    if shutil.which("debootstrap") is None:
        raise BadInput("--base debootstrap needs debootstrap; install it with: "
                       "apt-get install -y debootstrap")
    mirror = apt_mirror()
    work = Path(tempfile.mkdtemp(prefix="lockcheck-rootfs-", dir="/var/tmp"))
    rootfs = work / "rootfs"
    try:
        say(f"debootstrap --variant=minbase {SUITE} from {mirror} (about a minute)")
        t = time.monotonic()
        r = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror],
                           capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-5:])
            raise BadInput(f"debootstrap failed (exit {r.returncode}): {tail}")
        if DEB822_SOURCES.is_file():  # the same suites as this machine (updates, security)
            (rootfs / "etc/apt/sources.list").write_text("")
            shutil.copyfile(DEB822_SOURCES, rootfs / "etc/apt/sources.list.d/debian.sources")
        say(f"debootstrap done in {time.monotonic() - t:.0f} s; importing it")
        tar = work / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tar), "."],
                       check=True, capture_output=True)
        repo, tag = DEBOOTSTRAP_BASE.split(":")
        client.api.import_image_from_file(str(tar), repository=repo, tag=tag)
    finally:
        _unmount_under(work)
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], capture_output=True)
    return DEBOOTSTRAP_BASE


def build(client: Any, *, base: str = "registry", force: bool = False, image: str = IMAGE,
          say: Callable[[str], None] = print) -> bool:
    """Build the node image unless it is already built from this Dockerfile and base.
    Returns True if it built."""
    import docker.errors

    base_image = base_of(base)
    want = stamp(base_image)
    exists, built_from = image_status(client, image)
    if exists and built_from == want and not force:
        say(f"{image} is up to date (built from this Dockerfile on {base_image})")
        return False
    if base == "debootstrap":
        try:
            have_base = client.images.get(DEBOOTSTRAP_BASE) is not None
        except docker.errors.ImageNotFound:
            have_base = False
        if force or not have_base:
            make_debootstrap_base(client, say)
    say(f"building {image} on {base_image}")
    t = time.monotonic()
    steps = client.api.build(path=str(dockerfile().parent), tag=image, rm=True, forcerm=True,
                             pull=base == "registry", network_mode="host", decode=True,
                             buildargs={"BASE": base_image}, labels={LABEL: want})
    tail: list[str] = []
    for chunk in steps:
        if "error" in chunk:
            raise BadInput(f"building {image} failed: {chunk['error'].strip()}; "
                           f"last lines: {' | '.join(tail[-3:])}")
        line = str(chunk.get("stream", "")).strip()
        if line:
            tail.append(line)
            if line.startswith("Step "):
                say(line[:100])
    say(f"{image} built in {time.monotonic() - t:.0f} s")
    return True
