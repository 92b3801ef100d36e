"""The command line without a cluster: help, version, exit codes, `check` on hand-made files.

Exit codes: 0 valid, 1 invalid, 2 unknown, 130 interrupted, 254 bad input, 255 internal.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from lockcheck import __version__, exitcodes
from lockcheck.cli import main


def run(*args: Any) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_error_line(r: Result) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("lockcheck: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def ops_lines(*rows: dict[str, Any]) -> str:
    out = []
    for i, row in enumerate(rows):
        d = {"index": i, "key": "k", "value": None, **row}
        out.append(json.dumps(d))
    return "\n".join(out) + "\n"


def section(p: int, fence: int, t0: int, t1: int) -> list[dict[str, Any]]:
    """acquire ok, enter, exit, release ok: one process's critical section [t0+2, t1]."""
    return [
        {"time": t0, "process": p, "type": "invoke", "f": "acquire", "value": {"ttl_ms": 10000},
         "worker": p},
        {"time": t0 + 1, "process": p, "type": "ok", "f": "acquire", "value": {"fence": fence},
         "worker": p},
        {"time": t0 + 2, "process": p, "type": "event", "f": "enter", "value": {"fence": fence},
         "worker": p},
        {"time": t1, "process": p, "type": "event", "f": "exit",
         "value": {"fence": fence, "reason": "done"}, "worker": p},
        {"time": t1 + 1, "process": p, "type": "invoke", "f": "release", "value": {"fence": fence},
         "worker": p},
        {"time": t1 + 2, "process": p, "type": "ok", "f": "release", "value": {"fence": fence},
         "worker": p},
    ]


def history(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    rows = sorted(rows, key=lambda r: r["time"])
    p = tmp_path / name
    p.write_text(ops_lines(*rows))
    return p


@pytest.fixture
def valid_history(tmp_path: Path) -> Path:
    return history(tmp_path, "valid.jsonl",
                   section(0, 1, 1_000, 2_000) + section(1, 2, 3_000, 4_000))


@pytest.fixture
def invalid_history(tmp_path: Path) -> Path:
    return history(tmp_path, "invalid.jsonl",
                   section(0, 1, 1_000, 5_000) + section(1, 2, 2_000, 4_000))


# -- help and version --------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["test", "--help"], ["check", "--help"],
                                  ["cluster", "--help"], ["cluster", "up", "--help"],
                                  ["doctor", "--help"], ["backends", "--help"]])
def test_help_exits_0(args: list[str]) -> None:
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "Usage:" in r.stdout


def test_top_level_help_lists_the_commands() -> None:
    out = run("--help").stdout
    for cmd in ("test", "check", "cluster", "doctor", "backends"):
        assert f"  {cmd}" in out


def test_test_help_documents_the_options() -> None:
    out = run("test", "--help").stdout
    for opt in ("--backend", "--workload", "--nemesis", "--time-limit", "--hold-ms",
                "--resource", "--results-dir", "--concurrency", "--keys", "--leave-running",
                "--provider", "--pause-ms", "--recover-s"):
        assert opt in out


def test_version() -> None:
    r = run("--version")
    assert r.exit_code == 0 and __version__ in r.stdout


def test_exit_code_constants() -> None:
    assert (exitcodes.VALID, exitcodes.INVALID, exitcodes.UNKNOWN, exitcodes.INTERRUPTED,
            exitcodes.BAD_INPUT, exitcodes.INTERNAL) == (0, 1, 2, 130, 254, 255)
    assert exitcodes.for_verdict(True) == 0
    assert exitcodes.for_verdict(False) == 1
    assert exitcodes.for_verdict("unknown") == 2
    assert exitcodes.merge_valid([True, "unknown", False]) is False
    assert exitcodes.merge_valid([True, "unknown"]) == "unknown"
    assert exitcodes.merge_valid([True, True]) is True


# -- usage errors: 254 ------------------------------------------------------------------


@pytest.mark.parametrize("args", [["no-such-command"], ["check"], ["test", "--keys", "x"],
                                  ["test", "--no-such-option"], ["check", "--timeout", "x", "f"]])
def test_usage_errors_exit_254(args: list[str]) -> None:
    r = run(*args)
    assert r.exit_code == exitcodes.BAD_INPUT, r.output
    assert "Traceback" not in r.output


# -- `test` rejects bad options before touching the machine ------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "etcd9"], "unknown backend 'etcd9'"),
    (["--nemesis", "chaos"], "unknown nemesis 'chaos'"),
    (["--nemesis", "none,kill"], "cannot be combined"),
    (["--hold-ms", "soon"], "--hold-ms must be milliseconds"),
    (["--hold-ms", "500-50"], "--hold-ms range '500-50'"),
    (["--workload", "queue"], "unknown workload 'queue'"),
    (["--resource", "maybe"], "unknown resource mode 'maybe'"),
    (["--concurrency", "0"], "--concurrency must be at least 1"),
    (["--time-limit", "0"], "--time-limit must be positive"),
    (["--test-count", "0"], "--test-count must be at least 1"),
    (["--provider", "cloud"], "unknown provider 'cloud'"),
    (["--pause-ms", "0"], "--pause-ms must be at least 1"),
    # a provider's own option, given with another provider
    (["--nodes-file", "hosts.yaml"], "--nodes-file is an option of --provider ssh"),
    (["--provider", "ssh", "--image", "x"], "--image is an option of --provider docker"),
    # a fault the backend cannot take is refused before anything starts
    (["--nemesis", "kill-primary"], "--nemesis kill-primary needs a service that names its "
                                    "primary or leader; backend redis has none"),
    (["--nemesis", "partition,failover"], "--nemesis failover needs a service that can fail "
                                          "over on demand"),
])
def test_test_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    results = tmp_path / "results"
    r = run("test", *args, "--results-dir", results)
    assert r.exit_code == exitcodes.BAD_INPUT, r.output
    assert message in one_error_line(r)
    assert not results.exists()  # nothing was started, nothing recorded


# -- `check` ----------------------------------------------------------------------------


def test_check_valid_history(valid_history: Path) -> None:
    r = run("check", valid_history)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"{valid_history}: valid ")
    assert "2 critical sections" in r.stdout


def test_check_invalid_history(invalid_history: Path) -> None:
    r = run("check", invalid_history)
    assert r.exit_code == 1, r.output
    assert f"{invalid_history}: INVALID" in r.stdout
    assert "1 overlapping critical section" in r.stdout


def test_check_json_names_the_overlap(invalid_history: Path) -> None:
    r = run("check", "--json", invalid_history)
    assert r.exit_code == 1
    [line] = r.stdout.splitlines()
    d = json.loads(line)
    assert d["valid"] is False and d["path"] == str(invalid_history)
    me = d["checkers"]["mutual-exclusion"]
    assert me["violation_count"] == 1
    assert me["violations"][0]["processes"] == [0, 1]
    assert me["violations"][0]["key"] == "k"


def test_check_several_paths_merges_verdicts(valid_history: Path, invalid_history: Path) -> None:
    r = run("check", "--json", valid_history, invalid_history, valid_history)
    assert r.exit_code == 1
    assert [json.loads(x)["valid"] for x in r.stdout.splitlines()] == [True, False, True]
    assert run("check", valid_history, valid_history).exit_code == 0


def test_check_run_directory_uses_its_test_json(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    rows = section(0, 1, 1_000, 5_000) + section(1, 2, 2_000, 4_000)
    history(d, "history.jsonl", rows)
    (d / "test.json").write_text(json.dumps({"workload": "fenced", "resource": "fenced"}))
    r = run("check", "--json", d)
    d_out = json.loads(r.stdout)
    assert d_out["workload"] == "fenced"
    # the fenced workload judges the lock and the resource: the lock failed (the two
    # sections overlap) and no write reached the resource, and the summary says both
    assert d_out["valid"] is False and r.exit_code == 1
    assert d_out["summary"].startswith("the lock failed (no write reached the resource)")


@pytest.mark.parametrize("fact", [
    {"cut_short": "every client worker exited before the time limit"},
    {"failure": "RuntimeError: nemesis failed: boom"}])
def test_check_of_a_run_folder_keeps_what_only_the_run_knew(
        tmp_path: Path, valid_history: Path, fact: dict[str, str]) -> None:
    # the history alone is valid; the run's controller knew its clients stopped early
    # (or the harness failed): a re-check of the folder must not turn that into a pass
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").write_text(valid_history.read_text())
    (d / "test.json").write_text(json.dumps({"workload": "mutex"}))
    assert run("check", "--no-report", d).exit_code == 0  # no results.json: the history decides
    (d / "results.json").write_text(json.dumps({"valid": "unknown", **fact}))
    r = run("check", "--no-report", "--json", d)
    out = json.loads(r.stdout)
    assert out["valid"] == "unknown" and r.exit_code == exitcodes.UNKNOWN
    assert out.get("cut_short") == fact.get("cut_short")
    if "cut_short" in fact:
        assert out["summary"].startswith(fact["cut_short"])


def test_check_empty_history_is_unknown(tmp_path: Path) -> None:
    # a history in which no lock was ever held tested nothing: not a pass
    p = tmp_path / "h.jsonl"
    p.write_text("")
    r = run("check", p)
    assert r.exit_code == exitcodes.UNKNOWN
    assert "nothing was tested" in r.output


def test_check_malformed_line_names_file_and_line(tmp_path: Path, valid_history: Path) -> None:
    lines = valid_history.read_text().splitlines(keepends=True)
    lines[3] = '{"index": 3, "time": oops}\n'
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines))
    r = run("check", bad)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert one_error_line(r).startswith(f"lockcheck: {bad}:4: not valid JSON")


def test_check_truncated_last_line(tmp_path: Path, valid_history: Path) -> None:
    text = valid_history.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - 20])  # the last line loses its end
    n_lines = text.count("\n")
    r = run("check", cut)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert one_error_line(r).startswith(f"lockcheck: {cut}:{n_lines}: truncated")
    r = run("check", "--allow-truncated", "--json", cut)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["truncated_line"] == n_lines and d["ops"] == n_lines - 1


def test_check_nonexistent_path(tmp_path: Path) -> None:
    r = run("check", tmp_path / "nope")
    assert r.exit_code == exitcodes.BAD_INPUT
    assert one_error_line(r) == f"lockcheck: {tmp_path / 'nope'}: no such file or directory"


def test_check_directory_without_history(tmp_path: Path) -> None:
    r = run("check", tmp_path)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert "not a run directory" in one_error_line(r)


def test_check_bad_test_json(tmp_path: Path, valid_history: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").write_text(valid_history.read_text())
    (d / "test.json").write_text("{")
    r = run("check", d)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert "test.json: not valid JSON" in one_error_line(r)


def test_check_unknown_format(valid_history: Path) -> None:
    r = run("check", "--format", "weird", valid_history)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert "unknown format 'weird'" in one_error_line(r)


def test_unknown_checker_in_test_json_is_bad_input(tmp_path: Path, valid_history: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").write_text(valid_history.read_text())
    (d / "test.json").write_text(json.dumps({"checkers": ["no-such-checker"]}))
    r = run("check", d)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert "unknown checker(s) no-such-checker" in one_error_line(r)


# -- internal errors: 255 with a traceback ----------------------------------------------


def test_internal_error_exits_255(monkeypatch: pytest.MonkeyPatch, valid_history: Path) -> None:
    import lockcheck.checker.analyze as analyze

    def boom(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(analyze, "check_path", boom)
    r = run("check", valid_history)
    assert r.exit_code == exitcodes.INTERNAL
    assert r.stderr.strip().splitlines()[-1] == "lockcheck: internal error: RuntimeError: kaboom"
    assert "Traceback" in r.stderr


def test_keyboard_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch,
                                      valid_history: Path) -> None:
    import lockcheck.checker.analyze as analyze

    def interrupted(*a: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(analyze, "check_path", interrupted)
    r = run("check", valid_history)
    assert r.exit_code == exitcodes.INTERRUPTED
    assert one_error_line(r) in ("lockcheck: interrupted", "lockcheck: aborted")


# -- commands that need root say so -------------------------------------------------------


def test_cluster_down_without_root_removes_only_inproc_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import lockcheck.cluster.state as state
    import lockcheck.preflight as preflight
    from lockcheck.cluster.inproc import InprocCluster

    monkeypatch.setattr(preflight, "is_root", lambda: False)
    monkeypatch.setattr(state.Registry.__init__, "__defaults__", (tmp_path / "reg",))
    kept = InprocCluster(1, 0, state.Registry()).up()
    kept.keep({})
    r = run("cluster", "down")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"removed: {kept.run_id}"
    assert state.Registry().all() == [] and not kept.workdir.exists()


def test_cluster_down_with_run_ids_removes_those_clusters_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dataclasses

    import lockcheck.preflight as preflight
    from lockcheck.cluster import node, providers
    from lockcheck.cluster.state import Registry, RunState

    seen: list[list[str]] = []

    def remove_kept(reg: Registry) -> list[str]:
        kept = [st.run_id for st in reg.all() if st.kind == "cluster"]
        seen.append(kept)
        return kept

    fake = dataclasses.replace(providers.provider("local"), name="fake",
                               remove_kept=remove_kept)
    monkeypatch.setattr(providers, "provider", lambda name: fake)
    monkeypatch.setattr(preflight, "is_root", lambda: True)
    reg = Registry(tmp_path)
    for rid, kind in (("aaa111", "cluster"), ("bbb222", "cluster"), ("ddd444", "test")):
        reg.save(RunState(rid, kind, 1, None, "", "", "", provider="fake"))
    me = os.getpid()  # a test run whose owner is alive: this process
    reg.save(RunState("ccc333", "test", me, node.pid_start_time(me), "", "", "", provider="fake"))

    def down(*ids: str) -> Result:
        return CliRunner().invoke(main, ["cluster", "down", *ids], obj=reg,
                                  catch_exceptions=False)

    r = down("bbb222")
    assert r.exit_code == 0 and r.stdout.strip() == "removed: bbb222"
    assert seen == [["bbb222"]]
    r = down("ccc333")
    assert r.exit_code == exitcodes.BAD_INPUT and "still running" in one_error_line(r)
    r = down("zzz999")
    assert r.exit_code == exitcodes.BAD_INPUT and "no such run" in one_error_line(r)
    assert seen == [["bbb222"]]
    # what a killed run left is removed by its id too, and nothing else
    r = down("ddd444")
    assert r.exit_code == 0 and r.stdout.strip() == "removed: ddd444"
    assert seen == [["bbb222"], ["ddd444"]]


def test_cluster_status_with_no_clusters(tmp_path: Path) -> None:
    from lockcheck.cluster.state import Registry

    r = CliRunner().invoke(main, ["cluster", "status"], obj=Registry(tmp_path / "none"),
                           catch_exceptions=False)
    assert r.exit_code == 0
    assert r.stdout.strip() == "no lockcheck clusters"


def test_help_lists_what_the_registries_hold() -> None:
    from lockcheck.cluster.providers import all_providers
    from lockcheck.nemesis.registry import NEMESES
    from lockcheck.workloads.registry import WORKLOADS

    def flat(text: str) -> str:  # unwrapped (click also wraps after a hyphen)
        return re.sub(r"-\s+", "-", " ".join(text.split()))

    text = flat(run("test", "--help").stdout)
    for name, what in [*((w.name, w.description) for w in WORKLOADS.values()),
                       *((n.name, n.description) for n in NEMESES.values()),
                       *((p.name, p.description) for p in all_providers())]:
        assert flat(f"{name}: {what}") in text
    for p in all_providers():
        for o in p.options:
            assert f"{o.flag} " in text and flat(f"{p.name}: {o.help}") in text
    assert "redis, redlock, etcd, redis-sentinel, postgres, zookeeper" in text

    from lockcheck.checker.external import ENGINE_MODELS, FORMATS
    from lockcheck.checker.registry import CHECKERS

    text = flat(run("check", "--help").stdout)
    assert f"--model TEXT {', '.join(ENGINE_MODELS)}, or a checker: {', '.join(CHECKERS)}." \
        in text
    assert f"--format TEXT {', '.join(FORMATS)} [default: by file]." in text


def test_a_new_registry_entry_shows_in_the_help(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from lockcheck import cli
    from lockcheck.nemesis import registry

    extra = dataclasses.replace(registry.NEMESES["kill"], name="meteor",
                                description="a rock from the sky")
    monkeypatch.setitem(registry.NEMESES, "meteor", extra)
    assert "meteor: a rock from the sky" in cli.choices_help()["nemesis"]


def test_lockcheck_help_loads_no_registry() -> None:
    import subprocess
    import sys

    code = ("import sys; from lockcheck.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('lockcheck.backends', "
            "'lockcheck.cluster', 'lockcheck.nemesis', 'lockcheck.workloads'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_test_all_leaves_lockcheck_s_own_server_out_by_default() -> None:
    from lockcheck.results.matrix import default_backends

    backends = default_backends()
    assert "redis" in backends and "etcd" in backends
    assert "memory" not in backends and "memory-no-ttl" not in backends


# -- `backends` -----------------------------------------------------------------------


def test_backends_lists_every_backend_with_its_faults() -> None:
    from lockcheck.backends import BACKENDS

    r = run("backends")
    assert r.exit_code == 0, r.output
    for name in BACKENDS:
        assert f"\n{name}: " in r.stdout
    rows = [json.loads(line) for line in run("backends", "--json").stdout.splitlines()]
    assert [row["backend"] for row in rows if "adapter" not in row] == list(BACKENDS)
    redis = next(row for row in rows if row["backend"] == "redis")
    assert {"partition", "kill", "pause", "client-pause"} <= set(redis["nemeses"])
    assert "kill-primary" not in redis["nemeses"]  # independent masters have no primary
    assert redis["fence"] and redis["client"] == "redis" and redis["client_version"][0].isdigit()


@pytest.mark.parametrize(
    ("name", "text", "line_no"),
    [
        ("h.jsonl",
         '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "acquire", "key": "k"}\n'
         '{"index": 1, "time": 2, "process": 1, "type": "ok", "f": "acquire", "key": "k"}\n', 2),
        ("h.edn", "{:type :ok, :f :acquire, :process 0, :time 1}\n", 1),
        ("h2.edn", "{:type :invoke, :f :read, :process 0}\n{:type :ok, :f :write, :process 0}\n",
         2),
    ],
)
def test_check_orphan_completion_is_bad_input(tmp_path: Path, name: str, text: str,
                                              line_no: int) -> None:
    p = tmp_path / name
    p.write_text(text)
    r = run("check", p)
    assert r.exit_code == exitcodes.BAD_INPUT
    assert f"{p}:{line_no}: " in one_error_line(r)
    assert "no open invoke" in r.stderr


_INFO_THEN_RENEW = (
    '{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "acquire", "key": "k"}\n'
    '{"index": 1, "time": 2, "process": 0, "type": "info", "f": "acquire", "key": "k"}\n'
    '{"index": 2, "time": 3, "process": 1, "type": "invoke", "f": "acquire", "key": "k"}\n'
    '{"index": 3, "time": 4, "process": 0, "type": "invoke", "f": "renew", "key": "k"}\n')


@pytest.mark.parametrize(
    ("name", "text", "line_no", "words"),
    [
        ("h.jsonl", _INFO_THEN_RENEW, 4, "after an info"),
        ("h.jsonl.gz", _INFO_THEN_RENEW, 4, "after an info"),  # a published run's
        ("h.jsonl", _INFO_THEN_RENEW.replace('"type": "info"', '"type": "event"'), 4,
         "in flight"),  # the acquire never completed
        ("h.edn", "{:type :invoke, :f :read, :process 0}\n{:type :info, :f :read, :process 0}\n"
                  "{:type :invoke, :f :write, :value 1, :process 0}\n", 3, "after an info"),
        ("h.edn", "{:type :invoke, :f :read, :process 0}\n"
                  "{:type :invoke, :f :write, :value 1, :process 0}\n", 2, "in flight"),
        ("etcd_001.log", "INFO  jepsen.util - 3\t:invoke\t:read\tnil\n"
                         "INFO  jepsen.util - 3\t:info\t:read\t:timed-out\n"
                         "INFO  jepsen.util - 3\t:ok\t:read\t1\n", 3, "after an info"),
    ],
)
def test_check_refuses_a_history_that_breaks_the_process_rules(
        tmp_path: Path, name: str, text: str, line_no: int, words: str) -> None:
    """One op in flight per process, nothing after its info (Jepsen's rules): every
    reader `check` uses refuses a history that breaks them, naming the line."""
    p = tmp_path / name
    if name.endswith(".gz"):
        import gzip

        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)
    for args in (["check", p], ["check", "--model", "fenced-mutex", p]):  # ours, the engine's
        if "--model" in args and "jsonl" not in name:
            continue
        r = run(*args)
        assert r.exit_code == exitcodes.BAD_INPUT
        assert f"{p}:{line_no}: " in one_error_line(r)
        assert words in r.stderr


def test_check_initial_value_and_nothing_checked(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    p.write_text("{:type :invoke, :f :read, :process 0, :time 1}\n"
                 "{:type :ok, :f :read, :value 0, :process 0, :time 2}\n")
    assert run("check", p).exit_code == exitcodes.INVALID  # registers start at nil
    assert run("check", "--initial", "0", p).exit_code == exitcodes.VALID
    assert run("check", "--initial", "{:x 0}", "--model", "multi-register", p).exit_code == (
        exitcodes.UNKNOWN  # no txn ops: nothing checked
    )
    bad = run("check", "--initial", "{:x", p)
    assert bad.exit_code == exitcodes.BAD_INPUT and "--initial" in one_error_line(bad)
    wrong = run("check", "--initial", "0", "--model", "mutex", p)
    assert wrong.exit_code == exitcodes.BAD_INPUT


@pytest.mark.parametrize(("args", "message"), [
    (["--shard", "3/2"], "--shard '3/2': I must be between 1 and N"),
    (["--shard", "half"], "--shard 'half': expected I/N"),
    (["--runs", "0"], "--runs must be at least 1"),
])
def test_test_all_bad_runs_and_shards(tmp_path: Path, args: list[str], message: str) -> None:
    results = tmp_path / "results"
    r = run("test-all", "--backends", "redis", *args, "--results-dir", results)
    assert r.exit_code == exitcodes.BAD_INPUT, r.output
    assert message in one_error_line(r)
    assert not results.exists()


def test_compare_of_several_folders_needs_out(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = run("compare", tmp_path / "a", tmp_path / "b")
    assert r.exit_code == exitcodes.BAD_INPUT
    assert "give --out" in one_error_line(r)
    r = run("compare", "--verify", tmp_path / "a")
    assert r.exit_code == exitcodes.BAD_INPUT and "no runs in it" in one_error_line(r)
