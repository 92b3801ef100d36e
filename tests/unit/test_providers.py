"""The providers' pure parts: nodes files, the registry's sidecar, what a provider
refuses, the image's stamp and mirror, the host clock's arithmetic, client cuts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from lockcheck.cluster import images
from lockcheck.cluster.clienthosts import PlainClient
from lockcheck.cluster.netns import LocalNode
from lockcheck.cluster.node import pid_start_time
from lockcheck.cluster.nodes_file import load
from lockcheck.cluster.providers import PROVIDERS, Provider, all_providers, check_provider, provider
from lockcheck.cluster.state import LEGACY, Registry, RunState
from lockcheck.errors import BadInput
from lockcheck.nemesis.partition import cuttable
from lockcheck.preflight import debian_packages
from lockcheck.spec import TestSpec

# -- nodes files --------------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_yaml_nodes_file_with_defaults_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "a").write_text("k")
    (tmp_path / "b").write_text("k")
    nf = load(str(write(tmp_path, "nodes.yaml", """
user: vagrant
key: keys/a
hosts:
  - {name: n1, address: 192.168.56.11}
  - {address: 192.168.56.12, key: b, port: 2200}
  - 192.168.56.13
clients: {link: lo, addresses: 192.168.56.201-192.168.56.203}
""")))
    h1, h2, h3 = nf.hosts
    assert (h1.name, h1.user, h1.port, h1.sudo) == ("n1", "vagrant", 22, True)
    assert h1.key == str(tmp_path / "keys" / "a")  # relative to the file's folder
    assert (h2.name, h2.port, h2.key) == ("n2", 2200, str(tmp_path / "b"))
    assert h3.name == "n3" and h3.address == "192.168.56.13"
    assert nf.clients is not None and nf.clients.addresses == (
        "192.168.56.201", "192.168.56.202", "192.168.56.203")
    assert nf.known_hosts.endswith(".ssh/known_hosts")


def test_a_json_nodes_file_as_root(tmp_path: Path) -> None:
    nf = load(str(write(tmp_path, "n.json", json.dumps(
        {"hosts": [{"address": "10.0.0.1"}], "known_hosts": "kh"}))))
    assert nf.hosts[0].user == "root" and nf.hosts[0].sudo is False
    assert nf.known_hosts == str(tmp_path / "kh") and nf.clients is None


@pytest.mark.parametrize(("text", "message"), [
    ("hosts: [", "not valid YAML"),
    ("- a\n- b\n", "must be a mapping"),
    ("hosts: []\n", "non-empty list"),
    ("hosts: [{address: 10.0.0.1, colour: red}]\n", "unknown key 'colour'"),
    ("hosts: [{address: 10.0.0.1}, {address: 10.0.0.1}]\n", "two hosts have the address"),
    ("hosts: [{name: n1, address: 10.0.0.1}, {name: n1, address: 10.0.0.2}]\n",
     "two hosts have the name"),
    ("hosts: [{address: 10.0.0.1, port: 70000}]\n", "port must be"),
    ("hosts: [{address: 10.0.0.1, key: nope}]\n", "does not exist"),
    ("hosts: [{address: 10.0.0.1, name: 'N 1'}]\n", "name must be"),
    ("hosts: [{address: 10.0.0.1, sudo: maybe}]\n", "sudo must be"),
    ("hosts: [10.0.0.1]\nclients: {link: x, addresses: 10.0.0.9-10.0.0.2}\n", "empty or"),
    ("hosts: [10.0.0.1]\nclients: {addresses: [10.0.0.9]}\n", "clients must be"),
    ("hosts: [10.0.0.1]\nconnect_timeout: -1\n", "connect_timeout"),
    ("hosts: [{address: no-such-host.invalid}]\n", "cannot resolve"),
])
def test_bad_nodes_files_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadInput) as e:
        load(str(write(tmp_path, "n.yaml", text)))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("--nodes-file ")


def test_a_missing_nodes_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="cannot read it"):
        load(str(tmp_path / "none.yaml"))


def test_the_vagrant_nodes_file_matches_the_vagrantfile() -> None:
    root = Path(__file__).resolve().parents[2]
    vagrant = (root / "vagrant" / "Vagrantfile").read_text()
    data = (root / "vagrant" / "nodes.yaml").read_text()
    import yaml

    hosts = yaml.safe_load(data)["hosts"]
    assert [h["name"] for h in hosts] == ["n1", "n2", "n3", "n4", "n5"]
    for h in hosts:
        assert h["address"] in vagrant and f"machines/{h['name']}/" in h["key"]


# -- the registry ---------------------------------------------------------------------------


def test_a_docker_run_keeps_a_main_file_every_version_reads(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    st = RunState("abc123", "test", 1, 2, "10.78.0.0/24", "", "/tmp/lockcheck-abc123",
                  provider="docker", remote={"containers": ["lc-abc123-n1"]})
    reg.save(st)
    main = json.loads((tmp_path / "abc123.json").read_text())
    assert set(main) == LEGACY  # what a lockcheck without providers reads without error
    legacy = dataclasses.make_dataclass("Legacy", [(f, object) for f in sorted(LEGACY)])
    legacy(**main)
    assert list(tmp_path.glob("*.json")) == [tmp_path / "abc123.json"]
    (got,) = reg.all()
    assert got.provider == "docker" and got.remote == {"containers": ["lc-abc123-n1"]}
    (tmp_path / "abc123.json").unlink()  # an older reaper removed only the main file
    assert [s.run_id for s in reg.all()] == ["abc123"]  # the sidecar still names it
    reg.remove("abc123")
    assert list(tmp_path.iterdir()) == []


def test_a_local_run_has_no_sidecar_and_unknown_fields_are_ignored(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    reg.save(RunState("def456", "test", 1, 2, "10.77.0.0/24", "lcbdef456", "/tmp/x"))
    assert [p.name for p in tmp_path.iterdir()] == ["def456.json"]
    data = json.loads((tmp_path / "def456.json").read_text())
    (tmp_path / "def456.json").write_text(json.dumps({**data, "from_the_future": 1}))
    assert reg.all()[0].provider == "local"


# -- what a provider refuses ------------------------------------------------------------------


def test_a_fault_a_provider_cannot_inject_is_refused_in_one_line() -> None:
    p = dataclasses.replace(provider("local"), name="fake", refused={"pause": "no signals"})
    with pytest.raises(BadInput) as e:
        check_provider(p, TestSpec(nemesis=("partition", "pause")))
    assert str(e.value) == ("--nemesis pause is not available with --provider fake: "
                            "no signals")
    check_provider(p, TestSpec(nemesis=("partition",)))


def test_every_provider_is_registered_and_names_its_faults() -> None:
    assert set(PROVIDERS) == {"local", "docker", "ssh", "inproc"}
    for name, p in zip(PROVIDERS, all_providers(), strict=True):
        assert isinstance(p, Provider) and p.name == name and p.description
    from lockcheck.results.providers_table import render_providers

    text = render_providers()
    assert "docker" in text and "ssh" in text and "iptables in the run's chain" in text
    # faults refused for one reason share its line
    inproc = text[text.index("\ninproc: "):].splitlines()
    assert sum(line.startswith("  no ") for line in inproc) == 1, inproc
    assert "  no partition, partition-one, " in text


def test_a_providers_options_go_to_it_alone(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from lockcheck.cluster.providers import provider_options

    nf = write(tmp_path, "n.json", "{}")
    monkeypatch.chdir(tmp_path)
    given = {"nodes_file": "n.json", "accept_new_host_keys": True, "image": None}
    assert provider_options(given, "ssh") == {"nodes_file": str(nf.resolve()),
                                              "accept_new_host_keys": True}
    assert provider_options({"image": "mine"}, "docker") == {"image": "mine"}
    assert provider_options({"accept_new_host_keys": False}, "local") == {}
    with pytest.raises(BadInput, match=r"^--image is an option of --provider docker$"):
        provider_options({"image": "mine"}, "ssh")
    # `doctor` without --provider: each option goes to its own provider
    assert provider_options({"image": "mine", "nodes_file": str(nf)}, None) == {
        "image": "mine", "nodes_file": str(nf.resolve())}


def test_ssh_without_client_namespaces_refuses_a_partition_with_nothing_to_cut(
        tmp_path: Path) -> None:
    nf = write(tmp_path, "n.json", json.dumps({"hosts": [{"address": "10.0.0.1"}]}))
    spec = TestSpec(provider="ssh", nodes=1, provider_options={"nodes_file": str(nf)})
    with pytest.raises(BadInput, match="leaves nothing to cut"):
        check_provider(provider("ssh"), spec)
    with pytest.raises(BadInput, match="lists only 1 host"):
        check_provider(provider("ssh"), dataclasses.replace(spec, nodes=2))
    with pytest.raises(BadInput, match="needs --nodes-file"):
        check_provider(provider("ssh"), TestSpec(provider="ssh"))


def test_plain_client_processes_are_left_out_of_partitions() -> None:
    ns = LocalNode("c0", "10.0.0.101", "lc-x-c0", Path("/tmp"), "lc-x")
    plain = PlainClient("c1", "controller", "", Path("/tmp"), "")
    assert cuttable([ns, plain]) == [ns]
    with pytest.raises(RuntimeError, match="cannot be cut off alone"):
        plain.block(["10.0.0.11"])


def test_debian_packages_come_from_the_install_table() -> None:
    assert debian_packages(["redis-server", "ip", "iptables"]) == (
        "redis-server", "iproute2", "iptables")
    assert debian_packages(["no-such-program"]) == ()


# -- the image ----------------------------------------------------------------------------


def test_the_apt_mirror_is_this_machines(tmp_path: Path) -> None:
    deb822 = write(tmp_path, "debian.sources", (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\n"))
    assert images.apt_mirror(deb822, tmp_path / "none", suite="bookworm") == \
        "http://mirror.example/debian"
    one = write(tmp_path, "sources.list",
                "# x\ndeb [arch=amd64] http://one.example/d bookworm main\n")
    assert images.apt_mirror(tmp_path / "none", one, suite="bookworm") == "http://one.example/d"
    assert images.apt_mirror(tmp_path / "none", tmp_path / "none") == images.DEFAULT_MIRROR


def test_the_image_stamp_follows_the_dockerfile_and_base() -> None:
    a, b = images.stamp(images.DEBOOTSTRAP_BASE), images.stamp(images.REGISTRY_BASE)
    assert a != b and a.split()[0] == b.split()[0]
    assert images.up_to_date(a) and images.up_to_date(b)
    assert not images.up_to_date("0123456789abcdef debian:bookworm")
    assert not images.up_to_date(None)
    with pytest.raises(BadInput, match="unknown --base"):
        images.base_of("scratch")
    # the servers' packages: tests/unit/test_backend_definitions.py, from the backends
    text = images.dockerfile().read_text()
    for pkg in ("iptables", "libfaketime", "tini"):
        assert pkg in text


# -- the host clock's arithmetic, on a recording shell --------------------------------------


@dataclasses.dataclass
class Recorder:
    """Answers `date +%s.%N` with a host clock `ahead` seconds off ours, records the rest:
    the arithmetic only (no machine's clock is ever set here)."""

    ahead: float
    calls: list[list[str]] = dataclasses.field(default_factory=list)
    where: str = "recorder"

    def run(self, argv: Sequence[str], *, timeout: float,
            stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        import time

        self.calls.append(list(argv))
        if list(argv) == ["date", "+%s.%N"]:
            return 0, f"{time.time() + self.ahead:.9f}\n".encode(), b""
        return 0, b"", b""

    def write(self, path: str, data: bytes) -> None:
        raise AssertionError("not used")


def test_a_host_clock_moves_relative_to_where_it_was_and_goes_back() -> None:
    import time

    from lockcheck.cluster.ssh import SSHNode

    shell = Recorder(ahead=100.0)
    noted: list[tuple[float | None, bool]] = []
    node = SSHNode(name="n1", address="10.0.0.1", workdir=Path("/x"), chain="lc-x",
                   shell=shell, on_clock=lambda base, moved: noted.append((base, moved)))
    node.set_clock(5000)
    (cmd,) = [c for c in shell.calls if c[0] == "date" and c[1] == "-u"]
    target = float(cmd[3].removeprefix("@"))
    assert abs(target - (time.time() + 105.0)) < 0.5  # its own offset kept, 5 s added
    assert node.base_s is not None and abs(node.base_s - 100.0) < 0.5
    assert noted[-1][1] is True  # registered as moved before it moved
    shell.calls.clear()
    node.reset_clock()
    (cmd,) = [c for c in shell.calls if c[:2] == ["date", "-u"]]
    assert abs(float(cmd[3].removeprefix("@")) - (time.time() + 100.0)) < 0.5
    assert noted[-1][1] is False and ["date", "+%s.%N"] not in shell.calls  # measured once


def test_the_stand_in_hosts_share_this_machines_boot_id() -> None:
    from lockcheck.cluster.ssh import local_boot_id

    out = subprocess.run(["cat", "/proc/sys/kernel/random/boot_id"], capture_output=True,
                         text=True).stdout.strip()
    assert local_boot_id() == out and len(out) == 36


def test_a_reap_leaves_runs_of_another_registry_or_of_a_live_owner(tmp_path: Path) -> None:
    from lockcheck.cluster.netns import claimed_elsewhere, write_owner

    mine, other, default = (Registry(tmp_path / d) for d in ("mine", "other", "default"))
    tmp = tmp_path / "tmp"

    def owner(rid: str, pid: int, start: int | None, registry: Registry) -> None:
        (tmp / f"lockcheck-{rid}").mkdir(parents=True)
        write_owner(tmp / f"lockcheck-{rid}", registry)
        f = tmp / f"lockcheck-{rid}" / "owner.json"
        f.write_text(json.dumps({**json.loads(f.read_text()), "pid": pid, "start": start}))

    def claimed(rid: str) -> bool:
        return claimed_elsewhere(rid, mine, tmp=tmp, default=default.dir)

    owner("aaaaaa", os.getpid(), pid_start_time(os.getpid()), other)  # alive
    assert claimed("aaaaaa")
    owner("bbbbbb", 2**22 + 1, 1, other)  # its owner is gone, its registry knows it
    other.save(RunState("bbbbbb", "test", 2**22 + 1, 1, "", "", ""))
    assert claimed("bbbbbb")
    owner("cccccc", 2**22 + 1, 1, other)  # gone, and no registry knows it: an orphan
    assert not claimed("cccccc")
    assert not claimed("dddddd")  # no owner file, no entry anywhere
    default.save(RunState("dddddd", "test", 2**22 + 1, 1, "", "", ""))
    assert claimed("dddddd")  # the default registry's reap cleans it
    owner("eeeeee", 2**22 + 1, 1, mine)  # this registry's own: not claimed elsewhere
    mine.save(RunState("eeeeee", "test", 2**22 + 1, 1, "", "", ""))
    assert not claimed("eeeeee")
