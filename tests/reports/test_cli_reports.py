"""The report commands as a user runs them: `check` writes report.html, `compare`,
`test-all` refusing bad names, and their bad input (one line, exit 254)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


def copy_run(run: Path, tmp_path: Path) -> Path:
    d = tmp_path / "results" / "synthetic" / "run1"
    shutil.copytree(run, d)
    (d / "report.html").unlink(missing_ok=True)
    return d


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_check_writes_the_report(cli: Any, fenced_run: Path, tmp_path: Path) -> None:
    d = copy_run(fenced_run, tmp_path)
    r = cli("check", "--json", d)
    # fenced: the lock failed (overlaps, lease-safety), the resource held: invalid
    assert r.code == 1, r.explain()
    assert "the lock failed, the resource held" in json.loads(r.stdout)["summary"]
    assert (d / "report.html").is_file()
    out = json.loads(r.stdout)
    assert out["report"] == str(d / "report.html")
    assert out["metrics"]["acquire"]["ok"] > 0  # metrics on `lockcheck check` too


def test_check_no_report(cli: Any, fenced_run: Path, tmp_path: Path) -> None:
    d = copy_run(fenced_run, tmp_path)
    r = cli("check", "--no-report", d)
    assert r.code == 1, r.explain()
    assert not (d / "report.html").exists()


def test_check_of_a_history_file_writes_no_report(cli: Any, fenced_run: Path,
                                                  tmp_path: Path) -> None:
    d = copy_run(fenced_run, tmp_path)
    r = cli("check", d / "history.jsonl")
    assert r.code == 1, r.explain()
    assert not (d / "report.html").exists()


def test_compare_command(cli: Any, fenced_run: Path, tmp_path: Path) -> None:
    copy_run(fenced_run, tmp_path)
    r = cli("compare", tmp_path / "results", "--out", tmp_path / "site")
    assert r.code == 0, r.explain()
    assert (tmp_path / "site" / "index.html").is_file()
    assert "| **synthetic** |" in (tmp_path / "site" / "report.md").read_text()


def test_compare_bad_input(cli: Any, tmp_path: Path) -> None:
    r = cli("compare", tmp_path / "missing")
    assert r.code == 254 and "no such results folder" in one_line(r.stderr)
    r = cli("compare", tmp_path)
    assert r.code == 254 and "no runs in it" in one_line(r.stderr)


def test_test_all_refuses_unknown_names_up_front(cli: Any, tmp_path: Path) -> None:
    for args, word in ((("--backends", "redis nosuchlock"), "nosuchlock"),
                       (("--nemeses", "kill+nosuchfault"), "nosuchfault"),
                       (("--workloads", "nosuchworkload"), "nosuchworkload")):
        r = cli("test-all", *args, "--results-dir", tmp_path / "res")
        assert r.code == 254, r.explain()
        assert word in one_line(r.stderr)
    assert not (tmp_path / "res").exists()  # nothing was started or recorded


def test_test_all_whose_every_run_is_refused_is_bad_arguments(cli: Any, tmp_path: Path) -> None:
    # --hold-ms is passed through to `lockcheck test`, which refuses it (254) at once
    r = cli("test-all", "--backends", "redis", "--nemeses", "none", "--workloads", "mutex",
            "--hold-ms", "soon", "--time-limit", "1", "--results-dir", tmp_path / "res")
    assert r.code == 254, r.explain()
    matrix = json.loads((tmp_path / "res" / "test-all" / "latest" / "matrix.json").read_text())
    (cell,) = matrix["cells"]
    assert cell["status"] == "refused" and cell["exit_code"] == 254
    assert "--hold-ms" in cell["summary"] and "--hold-ms" in cell["command"]
    assert (tmp_path / "res" / cell["log"]).is_file()
    assert matrix["exit_code"] == 254
