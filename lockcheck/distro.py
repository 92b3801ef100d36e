"""Which operating system release this is: part of every claim a run makes, since a
distribution decides which server versions lockcheck runs."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path

OS_RELEASE = Path("/etc/os-release")


def os_release(path: Path = OS_RELEASE) -> dict[str, str]:
    """The fields of os-release(5) (KEY=value lines, values shell-quoted)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.startswith("#"):
                with contextlib.suppress(ValueError):
                    words = shlex.split(value)
                    out[key.strip()] = words[0] if words else ""
    return out


def distribution(path: Path = OS_RELEASE) -> str:
    """'Debian GNU/Linux 13 (trixie)', or 'unknown' where os-release is missing; with
    Debian's point release where it has one ('... 13 (trixie), 13.8')."""
    fields = os_release(path)
    name = fields.get("PRETTY_NAME") or fields.get("NAME") or "unknown"
    point = ""
    with contextlib.suppress(OSError):
        point = (path.parent / "debian_version").read_text().strip()
    if fields.get("ID") == "debian" and point and point[0].isdigit():
        name += f", {point}"
    return name
