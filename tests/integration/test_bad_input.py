"""Bad input never produces a traceback: one `lockcheck: ...` line on stderr and exit 254.

And a run refused for bad input records nothing and loses nothing: an existing
results directory (with an earlier run and its `latest` link) stays exactly as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BAD_INPUT = 254
ROOT = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def one_error_line(r: Any) -> str:
    """The whole of stderr: exactly one line, `lockcheck: ...`, and no traceback."""
    assert "Traceback" not in r.stderr, r.explain()
    # A run first reaps what killed runs left; saying so is not part of the error.
    lines = [ln for ln in r.stderr.splitlines()
             if not ln.startswith("cleaned up leftovers of earlier runs: ")]
    assert len(lines) == 1, r.explain()
    assert lines[0].startswith("lockcheck: "), r.explain()
    line: str = lines[0]
    return line


def snapshot(root: Path) -> dict[str, Any]:
    """Every path below root with its content (files), target (links) and mtime."""
    out: dict[str, Any] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            st = p.stat()
            out[rel] = ("file", p.read_bytes(), st.st_mtime_ns)
        else:
            out[rel] = ("dir",)
    return out


def earlier_runs(root: Path) -> Path:
    """A results dir holding one earlier run of every test name a bad run could use."""
    for name in ("redis-mutex-partition", "redis-mutex-kill", "redis-mutex-none"):
        d = root / name / "20200101T000000"
        d.mkdir(parents=True)
        (d / "test.json").write_text(json.dumps({"name": name, "run_id": "abcdef"}))
        (d / "history.jsonl").write_text(
            '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "acquire", '
            '"key": "k0", "value": {"ttl_ms": 1000}}\n')
        (d / "results.json").write_text('{"valid": "unknown"}\n')
        (root / name / "latest").symlink_to(d.name)
    return root


@pytest.fixture
def results(tmp_path: Path) -> Iterator[Path]:
    """Earlier runs that a refused run must leave exactly as they were."""
    root = earlier_runs(tmp_path / "results")
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, "a refused run changed the results directory"


# -- `lockcheck test` with bad options ---------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "nosuch"], "lockcheck: unknown backend 'nosuch'; available: redis"),
    (["--nemesis", "meteor"], "lockcheck: unknown nemesis 'meteor'; choose from "),
    (["--nemesis", "kill,meteor"], "lockcheck: unknown nemesis 'meteor'"),
    (["--workload", "queue"], "lockcheck: unknown workload 'queue'; choose from mutex, fenced"),
    (["--hold-ms", "fast"], "lockcheck: --hold-ms must be milliseconds like 200 or 50-500"),
    (["--hold-ms", "300-100"], "lockcheck: --hold-ms range '300-100' is empty or negative"),
    (["--resource", "maybe"], "lockcheck: unknown resource mode 'maybe'"),
    (["--keys", "0"], "lockcheck: --keys must be at least 1"),
])
def test_bad_test_options(cli: Any, results: Path, args: list[str], message: str) -> None:
    r = cli("test", *args, "--time-limit", "2", "--results-dir", results, timeout=60)
    assert r.code == BAD_INPUT, r.explain()
    assert one_error_line(r).startswith(message)
    assert r.stdout == ""


def test_a_server_the_ssh_provider_cannot_bring_is_refused(cli: Any, results: Path,
                                                            tmp_path: Path) -> None:
    """A server lockcheck installed under its own folder exists on this machine only:
    the ssh provider refuses it before it logs in anywhere (the host does not exist)."""
    from lockcheck.backends import BACKENDS
    from lockcheck.servers import Debian

    own = next(b for b in BACKENDS.values()
               if any(not isinstance(s, Debian) for s in b.sources().values()))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("hosts:\n  - {name: n1, address: 192.0.2.1}\n")
    r = cli("test", "--provider", "ssh", "--nodes-file", nodes, "--backend", own.name,
            "--nodes", "1", "--time-limit", "2", "--results-dir", results, timeout=60)
    assert r.code == BAD_INPUT, r.explain()
    line = one_error_line(r)
    assert f"backend {own.name} runs " in line and "--provider ssh cannot bring it" in line


@needs_root
@pytest.mark.needs_root_netns
@pytest.mark.parametrize("args", [["--subnet", "10.0.0.0/16"], ["--nodes", "100"],
                                  ["--concurrency", "500"]])
def test_bad_cluster_options_record_nothing(cli: Any, tmp_path: Path, args: list[str]) -> None:
    results = earlier_runs(tmp_path / "results")
    before = snapshot(results)
    r = cli("test", *args, "--time-limit", "2", "--results-dir", results, timeout=60)
    assert r.code == BAD_INPUT, r.explain()
    assert snapshot(results) == before, "a refused run changed the results directory"
    one_error_line(r)


# -- `lockcheck check` with bad files ----------------------------------------------------


def good_lines() -> list[str]:
    rows = [
        {"time": 10, "process": 0, "type": "invoke", "f": "acquire", "value": {"ttl_ms": 1000}},
        {"time": 20, "process": 0, "type": "ok", "f": "acquire", "value": {"fence": 1}},
        {"time": 30, "process": 0, "type": "event", "f": "enter", "value": {"fence": 1}},
        {"time": 40, "process": 0, "type": "event", "f": "exit",
         "value": {"fence": 1, "reason": "done"}},
        {"time": 50, "process": 0, "type": "invoke", "f": "release", "value": {"fence": 1}},
        {"time": 60, "process": 0, "type": "ok", "f": "release", "value": {"fence": 1}},
    ]
    return [json.dumps({"index": i, "key": "k0", "worker": 0, **r}) + "\n"
            for i, r in enumerate(rows)]


def test_check_good_file_is_valid(cli: Any, tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text("".join(good_lines()))
    r = cli("check", p)
    assert r.code == 0, r.explain()
    assert r.stderr == ""


@pytest.mark.parametrize(("lineno", "bad", "message"), [
    (3, '{"index": 2, "time": 30, "process": 0, "type": "event", "f": "enter"\n',
     "not valid JSON"),
    (1, '{"index": 0, "time": 10, "process": 0, "type": "begin", "f": "acquire"}\n',
     "unknown type 'begin'"),
    (4, '{"index": 3, "process": 0, "type": "event", "f": "exit"}\n', "missing field 'time'"),
    (5, '{"index": 1, "time": 50, "process": 0, "type": "invoke", "f": "release"}\n',
     "index 1 does not increase"),
    (2, "[1, 2, 3]\n", "expected a JSON object"),
])
def test_check_malformed_line_names_file_and_line(cli: Any, tmp_path: Path, lineno: int,
                                                  bad: str, message: str) -> None:
    lines = good_lines()
    lines[lineno - 1] = bad
    p = tmp_path / "history.jsonl"
    p.write_text("".join(lines))
    for args in ([p], ["--json", p], ["--allow-truncated", p]):
        r = cli("check", *args)
        assert r.code == BAD_INPUT, r.explain()
        assert one_error_line(r).startswith(f"lockcheck: {p}:{lineno}: {message}")
        assert r.stdout == ""


def test_check_truncated_last_line(cli: Any, tmp_path: Path) -> None:
    lines = good_lines()
    p = tmp_path / "history.jsonl"
    p.write_text("".join(lines)[:-25])  # a run killed while writing its last line
    r = cli("check", p)
    assert r.code == BAD_INPUT, r.explain()
    assert one_error_line(r).startswith(f"lockcheck: {p}:{len(lines)}: truncated last line")
    ok = cli("check", "--allow-truncated", "--json", p)
    assert ok.code == 0, ok.explain()
    d = json.loads(ok.stdout)
    assert d["truncated_line"] == len(lines) and d["ops"] == len(lines) - 1


def test_check_truncated_run_directory(cli: Any, tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").write_text("".join(good_lines())[:-3])
    r = cli("check", d)
    assert r.code == BAD_INPUT
    assert "truncated last line" in one_error_line(r)
    assert cli("check", "--allow-truncated", d).code == 0


def test_check_nonexistent_path(cli: Any, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "run"
    r = cli("check", missing)
    assert r.code == BAD_INPUT
    assert one_error_line(r) == f"lockcheck: {missing}: no such file or directory"


def test_check_not_a_run_directory(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = cli("check", tmp_path / "empty")
    assert r.code == BAD_INPUT
    assert "not a run directory" in one_error_line(r)


def test_check_binary_file(cli: Any, tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_bytes(b"\xff\xfe\x00garbage\n")
    r = cli("check", p)
    assert r.code == BAD_INPUT
    assert one_error_line(r).startswith(f"lockcheck: {p}:")


# -- prerequisites -----------------------------------------------------------------------


@pytest.fixture
def path_without_redis(tmp_path: Path) -> str:
    """A PATH with ip, iptables, python and the other backends' servers but no
    redis-server (preflight looks on PATH for a server named without a path)."""
    from lockcheck.backends import BACKENDS
    from lockcheck.preflight import find_program

    servers = {b for backend in BACKENDS.values() for b in backend.binaries}
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for b in ("ip", "iptables", *sorted(servers - {"redis-server"})):
        found = find_program(b)
        if found is None:
            pytest.skip(f"{b} not installed: preflight would stop at it, not at redis-server")
        if "/" not in b:  # a server named by its full path is found without PATH
            (bindir / b).symlink_to(found)
    for b in ("python", "python3"):
        (bindir / b).symlink_to(sys.executable)
    assert shutil.which("redis-server", path=str(bindir)) is None
    return str(bindir)


@needs_root
def test_missing_redis_server(cli: Any, results: Path, path_without_redis: str) -> None:
    r = cli("test", "--nemesis", "none", "--time-limit", "2", "--results-dir", results,
            env={"PATH": path_without_redis})
    assert r.code == BAD_INPUT, r.explain()
    line = one_error_line(r)
    assert line == ("lockcheck: redis-server not found; install it with: "
                    "apt-get install -y redis-server")
    # nothing was created for it
    assert not r.traces


@needs_root
def test_doctor_reports_missing_redis(cli: Any, path_without_redis: str) -> None:
    r = cli("doctor", env={"PATH": path_without_redis})
    assert r.code == BAD_INPUT, r.explain()
    assert "Traceback" not in r.stderr
    missing = [x for x in r.stdout.splitlines() if x.startswith("MISSING")]
    assert len(missing) == 1 and "redis-server" in missing[0]
    assert "apt-get install -y redis-server" in missing[0]


def nobody_prefix() -> list[str]:
    """setpriv to nobody, if the venv's Python can run lockcheck as that user."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux) to run as another user")
    prefix = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import lockcheck.cli"],
                           cwd="/", capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this Python/lockcheck: {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A directory the unprivileged user can enter (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="lcnobody-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize(("args", "message"), [
    (["test", "--nemesis", "none", "--time-limit", "2"], "lockcheck: lockcheck test needs root"),
    (["cluster", "up"], "needs root"),
])
def test_not_root(cli: Any, world_dir: Path, args: list[str], message: str) -> None:
    prefix = nobody_prefix()
    results = world_dir / "results"
    (results / "redis-mutex-none" / "20200101T000000").mkdir(parents=True)
    before = snapshot(results)
    if args[0] == "test":
        args = [*args, "--results-dir", str(results)]
    r = cli(*args, user=prefix, cwd=world_dir)
    assert r.code == BAD_INPUT, r.explain()
    assert message in one_error_line(r)
    assert snapshot(results) == before


@pytest.mark.needs_root_netns
def test_unwritable_results_dir_is_bad_input(cli: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = cli("test", "--nemesis", "none", "--time-limit", "2", "--results-dir", blocker / "x",
            timeout=60)
    assert r.code == BAD_INPUT, r.explain()
    assert "cannot create the results folder" in one_error_line(r)
    assert blocker.read_text() == "not a folder"
