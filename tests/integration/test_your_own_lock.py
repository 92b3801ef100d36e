"""docs/your-own-lock.md, run: every command the tutorial shows, with the exit code it
states, and what each one must print; plus the refusals and the unmapped errors.

All start at once (each has its own cluster), and every assertion looks at one of them:

* `client-check` of the example adapter (no problems), of a planted mistake (a release
  that does not check the owner: reported), and of tooz on etcd (its heartbeat renews a
  lease that already expired: reported);
* the example adapter, kept outside the package, through `--client`: valid under
  `--nemesis none`, overlapping holders under `client-pause`;
* the example's pytest file through the plugin: one test passes, the other fails with
  the checker's explanation and the report's path;
* an adapter that maps no errors, under `kill`: its exceptions recorded as info, by
  class, and the summary says so;
* the example adapter on postgres, whose servers it cannot use: one line, exit 254.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "your-own-lock.md"
EXAMPLE = "examples/inhouse_lock.py:make_clients"


def doc_commands() -> list[tuple[list[str], int]]:
    """Each command of the tutorial's ```sh blocks and the exit code it states."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S):
        for line in block.splitlines():
            cmd, _, comment = line.partition("#")
            m = re.fullmatch(r"\s*exit (\d+)\s*", comment)
            assert m, f"a tutorial command without its exit code: {line!r}"
            out.append((shlex.split(cmd), int(m.group(1))))
    return out


def test_the_tutorial_shows_the_example_file_whole() -> None:
    code = (REPO / "examples" / "inhouse_lock.py").read_text()
    assert f"```python\n{code}```" in DOC.read_text()


class Pytest:
    """`pytest examples/...` of the tutorial, in the repository's root."""

    def __init__(self, args: list[str], results: Path) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider",
             "--lockcheck-results", str(results)], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)

    def wait(self, timeout: float) -> Any:
        try:
            out, _ = self.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            out, _ = self.popen.communicate()
        return subprocess.CompletedProcess(self.popen.args, self.popen.returncode, out)


@pytest.fixture(scope="module")
def runs(module_cli: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    started: dict[str, Any] = {}
    for argv, code in doc_commands():
        key = " ".join(argv)
        if argv[0] == "pytest":
            started[key] = (Pytest(argv[1:], tmp_path_factory.mktemp("plugin")), code)
        else:
            assert argv[0] == "lockcheck", argv
            started[key] = (module_cli.start(*argv[1:], cwd=REPO), code)
    started["unmapped"] = (module_cli.start(
        "test", "--backend", "redis", "--client", "tests/integration/unmapped_lock.py:make_clients",
        "--nemesis", "kill", "--nemesis-interval", "1", "--time-limit", "10", cwd=REPO), 0)
    started["wrong servers"] = (module_cli.start(
        "test", "--backend", "postgres", "--client", EXAMPLE, "--nemesis", "none",
        "--time-limit", "5", cwd=REPO), 254)
    done = {k: (p.wait(timeout=240), code) for k, (p, code) in started.items()}
    yield done
    module_cli.assert_no_leftovers(None)


def result(runs: dict[str, Any], *words: str) -> Any:
    key = next(k for k in runs if all(w in k.split() for w in words))
    return runs[key][0]


def test_every_tutorial_command_exits_as_the_tutorial_says(runs: dict[str, Any]) -> None:
    for key, (r, code) in runs.items():
        if key == "unmapped":
            continue
        got = getattr(r, "code", getattr(r, "returncode", None))
        assert got == code, f"{key}: exit {got}, the tutorial says {code}\n" + (
            r.explain() if hasattr(r, "explain") else r.stdout[-4000:])


def test_client_check_passes_the_example(runs: dict[str, Any]) -> None:
    r = result(runs, "client-check", EXAMPLE)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("  ")]
    assert len(lines) == 12 and all(ln.startswith("  ok ") for ln in lines), r.explain()
    assert "no problems" in r.stdout


def test_client_check_reports_the_planted_release(runs: dict[str, Any]) -> None:
    r = result(runs, "client-check", "tests/integration/planted_lock.py:make_clients")
    bad = [ln for ln in r.stdout.splitlines() if ln.startswith("  FAIL")]
    assert len(bad) == 1, r.explain()
    assert "release by a non-owner" in bad[0] and "FREED the current holder's lock" in bad[0]
    assert "1 problem(s)" in r.stdout


def test_client_check_reports_tooz_renewing_an_expired_etcd_lease(runs: dict[str, Any]) -> None:
    r = result(runs, "client-check", "tooz")
    assert "FAIL  renew by the expired holder: SUCCEEDED" in r.stdout, r.explain()


def test_the_example_adapter_holds_without_faults(runs: dict[str, Any]) -> None:
    r = result(runs, "test", "none")
    res = r.results()
    assert res["valid"] is True, r.explain()
    assert res["client"]["fence"].startswith("none: the client returned fence=None")
    t = r.test_json()
    assert t["client"]["path"] == str(REPO / "examples") and not t["client"]["shipped"]
    assert "client: fence: none" in r.stderr


def test_the_example_adapter_overlaps_under_client_pause(runs: dict[str, Any]) -> None:
    r = result(runs, "test", "client-pause")
    c = r.results()["checkers"]
    assert c["mutual-exclusion"]["valid"] is False, r.explain()
    assert r.results()["client"]["grants"] > 0


def test_the_plugin_fails_with_the_checker_and_the_report(runs: dict[str, Any]) -> None:
    r = result(runs, "pytest")
    out = r.stdout
    assert re.search(r"1 failed, 1 passed", out), out[-4000:]
    assert "test_inhouse_lock_with_paused_holders" in out
    assert "UnsafeRun" in out and "INVALID: mutual exclusion violated" in out
    assert re.search(r"mutual-exclusion: INVALID: \d+ overlaps in \d+ critical sections; "
                     r"the first: key k0, workers \[\d, \d\]", out), out[-4000:]
    report = re.search(r"report: (\S+report\.html)", out)
    assert report and Path(report.group(1)).is_file(), out[-4000:]


def test_unmapped_errors_are_info_and_the_summary_says_so(runs: dict[str, Any]) -> None:
    r = runs["unmapped"][0]
    assert r.code in (0, 1, 2), r.explain()
    res = r.results()
    unmapped = res["client"]["unmapped_errors"]
    assert unmapped.get("redis.exceptions.ConnectionError", 0) > 0, res["client"]
    assert "the client maps none of these errors" in res["summary"]
    assert "redis.exceptions.ConnectionError" in res["summary"]
    assert "lockcheck.api.Definite" in res["summary"]
    # the workers lived through it: the exceptions were recorded, not raised
    assert all(p not in "\n".join(res["errors"]) for p in ("exited with code",)), res["errors"]


def test_a_client_that_cannot_use_the_servers_is_one_line(runs: dict[str, Any]) -> None:
    r = runs["wrong servers"][0]
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("lockcheck: --client"), r.explain()
    assert "cannot use the servers of backend postgres" in lines[-1]
    assert "KeyError" in lines[-1] and "Traceback" not in r.stderr
