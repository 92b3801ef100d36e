"""The nightly workflow: it parses, runs on a schedule and on demand, sets up with the
README's command, and every lockcheck command and option it uses exists in the CLI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import yaml

from lockcheck.cli import main
from lockcheck.results.compare import BACKEND_ORDER
from lockcheck.results.matrix import DEFAULT_NEMESES, PUBLISHED_BACKENDS, PUBLISHED_FENCED_VARIANT

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
DEFAULT_BACKENDS = set(PUBLISHED_BACKENDS)
MAIN_NEMESES = set(DEFAULT_NEMESES)


def workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def run_scripts() -> list[str]:
    return [step["run"] for job in workflow()["jobs"].values()
            for step in job.get("steps", []) if "run" in step]


def lockcheck_calls() -> list[list[str]]:
    """Every `... lockcheck SUBCOMMAND ...` in the run scripts, as argument lists."""
    calls = []
    for script in run_scripts():
        for line in script.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for i, w in enumerate(words):
                if w == "lockcheck" or w.endswith("/lockcheck"):
                    calls.append(words[i + 1:])
    return calls


def resolve(argv: list[str]) -> tuple[click.Command, list[str]]:
    """The click command an argv names (groups followed) and the arguments left."""
    cmd: click.Command = main
    rest = list(argv)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        sub = cmd.commands.get(name)
        assert sub is not None, f"`lockcheck {' '.join(argv)}`: no command {name!r}"
        cmd = sub
    return cmd, rest


def options_of(cmd: click.Command) -> dict[str, click.Option]:
    # as click sees them when it parses: some come from the registries then
    params = cmd.get_params(click.Context(cmd))
    return {o: p for p in params if isinstance(p, click.Option) for o in p.opts}


def test_triggers_runner_and_setup() -> None:
    wf = workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "schedule" in on and on["schedule"][0]["cron"]
    assert "workflow_dispatch" in on
    scripts = "\n".join(run_scripts())
    assert "./scripts/install" in scripts  # the README's setup command
    uses = [s.get("uses", "") for j in wf["jobs"].values() for s in j.get("steps", [])]
    assert any(u.startswith("actions/upload-artifact") for u in uses)
    assert any(u.startswith("actions/upload-pages-artifact") for u in uses)
    assert any(u.startswith("actions/deploy-pages") for u in uses)


def test_the_matrix_runs_on_the_release_ci_checks() -> None:
    """Every job that installs lockcheck runs in a Debian 13 container: the release
    `.ci/run` checks from a fresh root (scripts/release-check), so its package names
    are the ones the installer was seen to install; a job that runs tests gets the
    namespaces and iptables it needs (privileged)."""
    installing = 0
    for name, job in workflow()["jobs"].items():
        scripts = "\n".join(s["run"] for s in job.get("steps", []) if "run" in s)
        if "./scripts/install" not in scripts:
            continue
        installing += 1
        container = job.get("container") or {}
        assert container.get("image") == "debian:13", f"job {name} runs on {container}"
        if "lockcheck test" in scripts:
            assert "--privileged" in str(container.get("options", "")), name
    assert installing >= 2


def test_every_lockcheck_command_and_option_exists() -> None:
    calls = lockcheck_calls()
    assert {c[0] for c in calls} >= {"test-all", "compare"}
    for argv in calls:
        cmd, rest = resolve(argv)
        known = options_of(cmd)
        for word in rest:
            if word.startswith("--"):
                name = word.split("=", 1)[0]
                assert name in known, f"`lockcheck {' '.join(argv)}`: no option {name}"


def matrix_params(argv: list[str]) -> dict[str, Any]:
    cmd, rest = resolve(argv)
    # a shell variable stands for a number here ($TIME_LIMIT, ${{ matrix.shard }})
    words = [re.sub(r"\$\{\{ matrix.shard \}\}", "1", w) for w in rest]
    ctx = cmd.make_context("test-all", [re.sub(r"\$\w+", "1", w) for w in words])
    return dict(ctx.params)


def names(params: dict[str, Any], key: str) -> set[str]:
    return set(" ".join(params[key]).replace(",", " ").split())


def test_matrix_covers_the_default_backends_and_main_nemeses() -> None:
    runs = [matrix_params(c) for c in lockcheck_calls() if c[0] == "test-all"]
    main_runs = [p for p in runs if names(p, "backends") == DEFAULT_BACKENDS]
    assert len(main_runs) == 1
    assert names(main_runs[0], "nemeses") == MAIN_NEMESES
    assert {"mutex", "fenced"} <= names(main_runs[0], "workloads")
    # and Redlock's fenced variant in the fenced workload
    assert any(names(p, "backends") == {PUBLISHED_FENCED_VARIANT} and names(p, "workloads") ==
               {"fenced"} and names(p, "nemeses") == MAIN_NEMESES for p in runs)
    for p in runs:  # each job runs its own slice; every run in the job's own folder
        assert p["shard"] == "1/1" and p["no_report"]


def test_shards_fan_out_and_merge() -> None:
    wf = workflow()
    shard = wf["jobs"]["shard"]
    n = len(shard["strategy"]["matrix"]["shard"])
    assert n > 1 and wf["env"]["SHARDS"] == str(n)
    merge = wf["jobs"]["merge"]
    assert merge["needs"] == "shard"
    downloads = [s for s in merge["steps"] if s.get("uses", "").startswith(
        "actions/download-artifact")]
    assert downloads and downloads[0]["with"]["pattern"] == "shard-*"
    uploads = [s for s in shard["steps"] if s.get("uses", "").startswith(
        "actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"].startswith("shard-")


def test_what_is_published_is_what_compare_wrote_and_verified() -> None:
    compares = [c for c in lockcheck_calls() if c[0] == "compare"]
    (build,) = [c for c in compares if "--publish" in c]
    out = build[build.index("--out") + 1]
    assert ["compare", "--verify", out] in compares
    paths = [s["with"]["path"] for s in workflow()["jobs"]["merge"]["steps"]
             if re.match(r"actions/upload-", s.get("uses", ""))]
    assert paths and all(p == out for p in paths)


def test_the_comparison_script_runs_the_published_matrix() -> None:
    """scripts/comparison's defaults are the published matrix, and the comparison's
    table has a place for each of its backends."""
    text = (ROOT / "scripts" / "comparison").read_text()
    backends = re.search(r'^\s*backends="([^"]*)"', text, re.M)
    nemeses = re.search(r'^\s*nemeses="([^"]*)"', text, re.M)
    variant = re.search(r"^\s*fenced_variant=(\S+)", text, re.M)
    assert backends and nemeses and variant, "scripts/comparison: defaults not found"
    assert backends[1].split() == list(PUBLISHED_BACKENDS)
    assert nemeses[1].split() == list(DEFAULT_NEMESES)
    assert variant[1] == PUBLISHED_FENCED_VARIANT
    assert set(PUBLISHED_BACKENDS) | {PUBLISHED_FENCED_VARIANT} <= set(BACKEND_ORDER)
