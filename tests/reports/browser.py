"""Headless Chromium for the browser tests and the report benchmark.

Debian's `chromium`, run as root, needs `--no-sandbox`; the other flags keep it from
reaching out to the network or syncing anything. Each call gets a fresh profile in a
temp dir that is removed afterwards. Console messages go to stderr
(`--enable-logging=stderr`), where `console_errors` finds them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--disable-breakpad",
         "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0")
CONSOLE = re.compile(r":(INFO|WARNING|ERROR):CONSOLE[^\]]*\] \"(.*)\", source: (.*)")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Rendered:
    dom: str
    log: str
    seconds: float

    def console(self) -> list[tuple[str, str]]:
        """(level, message) of every console message the page logged."""
        return [(m.group(1), m.group(2)) for m in CONSOLE.finditer(self.log)]

    def console_errors(self) -> list[str]:
        return [msg for level, msg in self.console() if level in ("ERROR", "WARNING")
                or "Uncaught" in msg]


def render(path: Path, *, screenshot: Path | None = None, size: tuple[int, int] = (1300, 2400),
           fragment: str = "", budget_ms: int = 4000, timeout: float = 90.0) -> Rendered:
    """Load a local page; return its DOM after the scripts ran (and a screenshot)."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed")
    url = path.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    with tempfile.TemporaryDirectory(prefix="lc-chromium-") as profile:
        base = [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                f"--virtual-time-budget={budget_ms}"]
        if screenshot is not None:  # one load gives both the DOM and the picture
            base.append(f"--screenshot={screenshot}")
        # everything Chromium writes (crash database, dconf, caches) stays in the profile
        env = {**os.environ, "HOME": profile, "XDG_CONFIG_HOME": profile,
               "XDG_CACHE_HOME": profile}
        t0 = time.perf_counter()
        r = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True,
                           timeout=timeout, env=env)
        seconds = time.perf_counter() - t0
    return Rendered(r.stdout, r.stderr, seconds)
