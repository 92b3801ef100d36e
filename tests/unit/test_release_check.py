"""scripts/release-check's pure parts: the expected verdicts, the root's apt sources,
the proxy's hosts, paths under the root, the cache's age and the summary table."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lockcheck.backends import BACKENDS
from lockcheck.cluster import images
from lockcheck.nemesis.registry import supported
from lockcheck.spec import TestSpec

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    path = ROOT / "scripts/release-check"
    loader = importlib.machinery.SourceFileLoader("release_check", str(path))
    spec = importlib.util.spec_from_loader("release_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["release_check"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


rc = _load()


def test_it_runs_every_default_backend() -> None:
    """One per family, lockcheck's own memory server too: a new family's backend must
    get an expected verdict here."""
    assert sorted(rc.BACKENDS) == sorted(b.name for b in BACKENDS.values()
                                         if b.name == b.family)


def test_every_backend_that_takes_valkey_runs_on_it_too() -> None:
    assert sorted(rc.ON_VALKEY) == sorted(b.name for b in BACKENDS.values()
                                          if b.name == b.family and "valkey" in b.alternatives)
    for b in rc.ON_VALKEY:  # as on Redis
        for n in rc.NEMESES:
            assert rc.expected(f"{b}@valkey", n) == rc.expected(b, n)


@pytest.mark.parametrize("backend", sorted(rc.BACKENDS))
def test_without_faults_every_backend_is_valid(backend: str) -> None:
    assert rc.expected(backend, "none") == rc.VALID


@pytest.mark.parametrize("backend", sorted(rc.BACKENDS))
def test_kill_expectations_agree_with_the_backends_own(backend: str) -> None:
    """A backend whose `expect` begins "safe under ... kill" must stay valid under kill;
    the others name kill among what breaks them and may give either verdict."""
    expect = BACKENDS[backend].expect
    safe_clause = expect.split(";")[0]
    b = BACKENDS[backend]
    takes = supported(b.make_db(TestSpec(backend=b.name, nodes=b.default_nodes)))
    if "kill" not in takes:  # refused in one line, before anything starts
        assert rc.expected(backend, "kill") == rc.REFUSED
    elif safe_clause.startswith("safe under") and "kill" in safe_clause:
        assert rc.expected(backend, "kill") == rc.VALID
    else:
        assert "kill" in expect
        assert rc.expected(backend, "kill") == rc.VALID_OR_INVALID


@pytest.mark.parametrize(("want", "got", "ok"), [
    ("valid", "valid", True),
    ("valid", "invalid", False),
    ("valid", "unknown", False),
    ("valid or invalid", "invalid", True),
    ("valid or invalid", "valid", True),
    ("valid or invalid", "unknown", False),
    ("valid or invalid", "error (255)", False),
    ("valid or invalid", "timeout", False),
    ("refused", "refused", True),
    ("refused", "valid", False),
    ("valid", "refused", False),
])
def test_a_verdict_matches_what_is_expected(want: str, got: str, ok: bool) -> None:
    assert rc.matches(want, got) is ok


def test_verdicts_come_from_the_readmes_exit_codes() -> None:
    assert [rc.verdict(c) for c in (0, 1, 2, 130, 254, 255, None)] == [
        "valid", "invalid", "unknown", "interrupted", "refused", "error (255)", "timeout"]


def test_the_roots_sources_name_the_suite_its_updates_and_security() -> None:
    text = rc.sources("trixie", "http://deb.debian.org/debian",
                      "http://deb.debian.org/debian-security")
    stanzas = [dict(line.split(": ", 1) for line in s.splitlines())
               for s in text.strip().split("\n\n")]
    assert [(s["URIs"], s["Suites"]) for s in stanzas] == [
        ("http://deb.debian.org/debian", "trixie trixie-updates"),
        ("http://deb.debian.org/debian-security", "trixie-security")]
    assert all(s["Components"] == "main" and s["Types"] == "deb" for s in stanzas)


def test_the_mirrors_come_from_this_machines_sources(tmp_path: Path) -> None:
    """The lookup lockcheck's debootstrap uses, asked for a suite and its -security."""
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.example/debian\n"
                      "Suites: bookworm bookworm-updates\nComponents: main\n\n"
                      "Types: deb\nURIs: http://security.example/debian-security\n"
                      "Suites: bookworm-security\nComponents: main\n")
    none = tmp_path / "none"
    assert images.apt_mirror(deb822, none, suite="bookworm") == "http://mirror.example/debian"
    assert images.apt_mirror(deb822, none, suite="bookworm-security") == \
        "http://security.example/debian-security"
    assert images.apt_mirror(none, none, suite="trixie-security",
                             default="http://x/debian-security") == "http://x/debian-security"
    # without a suite: this machine's release, whose entry the file has when it is bookworm
    assert images.apt_mirror(deb822, none) == ("http://mirror.example/debian"
                                               if images.SUITE == "bookworm"
                                               else images.DEFAULT_MIRROR)


def test_the_security_archive_defaults_beside_the_main_one() -> None:
    assert rc.security_default("http://deb.debian.org/debian/") == \
        "http://deb.debian.org/debian-security"
    assert rc.security_default("http://mirror.example/pub") == "http://mirror.example/pub"


def test_the_proxy_lets_through_the_mirrors_pypi_and_npm_only() -> None:
    assert rc.proxy_hosts(["http://deb.debian.org/debian", "http://sec.example:8080/x"]) == {
        "deb.debian.org", "sec.example", "pypi.org", "files.pythonhosted.org",
        "registry.npmjs.org"}


def test_under_the_root_means_the_root_or_below_it() -> None:
    root = Path("/var/tmp/lockcheck-release-x/root")
    assert rc.under("/var/tmp/lockcheck-release-x/root", root)
    assert rc.under("/var/tmp/lockcheck-release-x/root/proc", root)
    assert not rc.under("/var/tmp/lockcheck-release-x/root2", root)
    assert not rc.under("/", root)


def test_mounts_under_the_root_deepest_first() -> None:
    mounts = ("/dev/vda / ext4 rw 0 0\n"
              "proc /r/proc proc rw 0 0\n"
              "devpts /r/dev/pts devpts rw 0 0\n"
              "udev /r/dev devtmpfs rw 0 0\n"
              "tmpfs /r/my\\040dir tmpfs rw 0 0\n"
              "tmpfs /r2/tmp tmpfs rw 0 0\n")
    found = rc.mounts_under(Path("/r"), mounts)
    assert found[0] == "/r/dev/pts"
    assert sorted(found) == ["/r/dev", "/r/dev/pts", "/r/my dir", "/r/proc"]


def test_the_cache_is_used_for_the_same_mirror_within_its_days() -> None:
    now = 1_000_000_000.0
    meta = {"mirror": "http://m/debian", "made_epoch": now - 86400}
    assert rc.cache_fresh(meta, "http://m/debian", now)
    assert not rc.cache_fresh(meta, "http://other/debian", now)
    assert not rc.cache_fresh(meta, "http://m/debian", now + rc.CACHE_DAYS * 86400)
    assert not rc.cache_fresh({}, "http://m/debian", now)


def test_the_summary_table_lines_up_and_marks_mismatches() -> None:
    rows = [dict(backend="redis", nemesis="kill", expected="valid or invalid", got="invalid",
                 seconds=12.34, ok=True),
            dict(backend="etcd", nemesis="none", expected="valid", got="unknown", seconds=9,
                 ok=False)]
    lines = rc.table(rows).splitlines()
    assert lines[0].split() == ["backend", "nemesis", "expected", "got", "seconds"]
    assert lines[1].split()[-2:] == ["12.3", "ok"]
    assert lines[2].endswith("MISMATCH")
    assert len({line.index("nemesis") if i == 0 else line.index(("kill", "none")[i - 1])
                for i, line in enumerate(lines)}) == 1


def test_options() -> None:
    a = rc.parse_args(["--suite", "bookworm", "--keep", "/tmp/x", "--only-install"])
    assert (a.suite, str(a.keep), a.only_install) == ("bookworm", "/tmp/x", True)
    a = rc.parse_args(["--enter", "/tmp/x", "--", "apt-get", "install", "-y", "valkey-server"])
    assert a.command == ["apt-get", "install", "-y", "valkey-server"]
    with pytest.raises(SystemExit):
        rc.parse_args(["--suite", "trixie; rm -rf /"])
    with pytest.raises(SystemExit):
        rc.parse_args(["ls"])
