"""Every server that is no package of this distribution installs from the cache with
no network at all (scripts/install filled the cache), and each launcher runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockcheck.backends import BACKENDS
from lockcheck.servers import CACHE, Debian

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

SCRIPT = """
import sys
from pathlib import Path
from lockcheck.backends import BACKENDS
from lockcheck.servers import install
root = Path(sys.argv[1])
sources = [s for b in BACKENDS.values() for s in b.sources().values()]
install(sources, root=root, say=lambda line: None)
"""


def test_servers_install_offline_from_the_cache(tmp_path: Path) -> None:
    wanted = {p.rsplit("/", 1)[-1]: s for b in BACKENDS.values()
              for p, s in b.sources().items() if not isinstance(s, Debian)}
    assert wanted, "no backend has a server from outside the distribution"
    if not CACHE.is_dir():
        pytest.skip(f"{CACHE} is empty: run scripts/install first")
    # a network namespace of its own: nothing but loopback, so only the cache can serve
    r = subprocess.run(["unshare", "-n", sys.executable, "-c", SCRIPT, str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for name in wanted:
        launcher = tmp_path / "bin" / name
        assert launcher.exists(), sorted(p.name for p in (tmp_path / "bin").iterdir())
        arg = "version" if name == "consul" else "--help"
        run = subprocess.run([str(launcher), arg], capture_output=True, text=True,
                             timeout=60)
        # Go's flag package prints its usage to stderr (fake-gcs-server)
        assert run.returncode == 0 and (run.stdout + run.stderr).strip(), \
            (name, run.stderr[-500:])


def test_servers_list_names_each_source_and_what_is_here() -> None:
    """After scripts/install, every server lockcheck installs itself is listed as here,
    with where it came from."""
    own = {p.rsplit("/", 1)[-1]: s for b in BACKENDS.values()
           for p, s in b.sources().items() if not isinstance(s, Debian)}
    r = subprocess.run([sys.executable, "-m", "lockcheck.cli", "servers", "list"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[1]: ln for ln in r.stdout.splitlines() if len(ln.split()) > 1}
    for name, source in own.items():
        assert lines[name].startswith("ok ") and source.describe() in lines[name], r.stdout


OFFLINE_PYPI = """
import sys
from pathlib import Path
from lockcheck.servers import PyPI, install
install([PyPI(sys.argv[1], sys.argv[2])], root=Path(sys.argv[3]), cache=Path(sys.argv[4]),
        say=lambda line: None)
"""


def test_a_pypi_server_gets_a_virtualenv_of_its_own_and_installs_again_offline(
        tmp_path: Path) -> None:
    """A PyPI source: its own virtualenv with a link per script in bin/, and once its
    wheels are cached a second install with no network at all."""
    import importlib.metadata

    from lockcheck.servers import MARK, PyPI, install

    # pygments: a pure-Python package with a script and no dependencies, one lockcheck
    # already installs (through rich), so its wheel is on any index lockcheck reached
    source = PyPI("pygments", importlib.metadata.version("pygments"))
    root, cache = tmp_path / "root", tmp_path / "cache"
    assert install([source], root=root, cache=cache, say=lambda line: None) == [source]
    script = root / "bin" / "pygmentize"
    run = subprocess.run([str(script), "-V"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and source.version in run.stdout, run.stderr
    assert (root / source.folder / MARK).exists()
    assert install([source], root=root, cache=cache, say=lambda line: None) == []
    again = tmp_path / "again"
    # no network, and no index or wheel folder of pip's configuration either (an index
    # on this machine's disk would answer without a network): only the cache can serve
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    r = subprocess.run(["unshare", "-n", sys.executable, "-c", OFFLINE_PYPI, source.package,
                        source.version, str(again), str(cache)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert subprocess.run([str(again / "bin" / "pygmentize"), "-V"],
                          capture_output=True, timeout=60).returncode == 0
