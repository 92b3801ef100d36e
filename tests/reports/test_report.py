"""report.html of a run: what it embeds (timeline data, plots, verdicts, metrics, links),
read back from the page itself."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from lockcheck.checker.intervals import critical_sections
from lockcheck.errors import BadInput
from lockcheck.history import read_history
from lockcheck.results.report import write_report


def page_data(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="lc-data">(.*?)</script>', html, re.S)
    assert m, "no embedded data"
    data: dict[str, Any] = json.loads(m.group(1))
    return data


@pytest.fixture(scope="module")
def fenced_report(fenced_run: Path) -> str:
    return write_report(fenced_run).read_text()


@pytest.fixture(scope="module")
def unfenced_report(unfenced_run: Path) -> str:
    return write_report(unfenced_run).read_text()


def test_self_contained(fenced_report: str) -> None:
    # nothing fetched from anywhere: no external scripts, styles or images
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', fenced_report)
    assert "<style>" in fenced_report and "lc-data" in fenced_report


def test_timeline_has_every_holder_fault_and_violation(fenced_run: Path,
                                                       fenced_report: str) -> None:
    tl = page_data(fenced_report)["timeline"]
    ops = read_history(fenced_run / "history.jsonl")
    assert len(tl["secs"]["s"]) == len(critical_sections(ops))
    assert set(tl["fault_names"]) == {"kill", "partition", "client-pause"}
    # each fault window shaded with its targets
    assert any(f[3] == "n1" for f in tl["faults"])
    kinds = {v["kind"] for v in tl["viols"]}
    assert {"overlap", "lease", "duplicate-fence"} <= kinds
    results = json.loads((fenced_run / "results.json").read_text())
    n_overlaps = len(results["checkers"]["mutual-exclusion"]["violations"])
    assert sum(v["kind"] == "overlap" for v in tl["viols"]) == n_overlaps
    # both holders of an overlap are marked
    assert all(len(v["secs"]) == 2 for v in tl["viols"] if v["kind"] == "overlap")
    # a grant during a valid lease marks the holder's section and the new holder's own
    # (the one that begins at that grant, not an earlier one of the same process)
    lease = results["checkers"]["lease-safety"]["violations"]
    secs = tl["secs"]
    for v, r in zip([v for v in tl["viols"] if v["kind"] == "lease"], lease, strict=True):
        assert [secs["p"][i] for i in v["secs"]] == [r["holder"]["process"],
                                                    r["granted"]["process"]]
        granted_start = secs["s"][v["secs"][1]]
        assert 0 <= granted_start - v["marks"][0] < 100_000  # µs
    # saves drawn where the resource rejected a stale write
    assert tl["writes"]["st"].count(1) == results["checkers"]["fencing"]["saves"]


def test_stale_write_marked_with_its_fence(unfenced_run: Path, unfenced_report: str) -> None:
    tl = page_data(unfenced_report)["timeline"]
    stale = [v for v in tl["viols"] if v["kind"] == "stale-write"]
    results = json.loads((unfenced_run / "results.json").read_text())
    examples = results["checkers"]["fencing"]["stale_accepted"]
    assert len(stale) == len(examples) > 0
    assert f"fence {examples[0]['fence']}" in stale[0]["text"]
    assert tl["writes"]["st"].count(2) == len(examples)  # drawn as crosses too
    assert "reached the resource" in unfenced_report


def test_thesis_saves_next_to_overlaps(fenced_run: Path, fenced_report: str) -> None:
    results = json.loads((fenced_run / "results.json").read_text())
    fe = results["checkers"]["fencing"]
    saves, regressed = fe["saves_stale_holder"], fe["saves_regressed_fence"]
    assert saves + regressed == fe["saves"] > 0
    overlaps = results["checkers"]["mutual-exclusion"]["violation_count"]
    thesis = fenced_report[fenced_report.index('<div class="thesis">'):]
    thesis = thesis[:thesis.index("</div>")]
    assert "overlap" in thesis and f"{overlaps:,} pairs" in thesis
    # a save is a stale holder refused; a current holder refused after the fence went
    # backwards is counted apart, in other words
    if saves:
        assert f"refused {saves:,} write" in thesis and "lost the lock (saves)" in thesis
    else:
        assert "(saves)" not in thesis
    if regressed:
        assert f"{regressed:,} write" in thesis and "the fence went backwards" in thesis


def test_plots_checkers_metrics_options_links(fenced_run: Path, fenced_report: str) -> None:
    imgs = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', fenced_report)
    assert imgs == ["Acquire latency over time", "Acquire latency distribution",
                    "Grants per second", "Hold times", "Availability per fault"]
    for name in ("mutual-exclusion", "fencing", "lease-safety", "linearizable"):
        assert f"<b>{name}</b>" in fenced_report
    assert "acquire latency (granted)" in fenced_report and "under client-pause" in fenced_report
    assert "<code>simulator</code>" not in fenced_report  # versions are a table of their own
    assert "tests/reports/synthetic.py" in fenced_report
    for f in ("history.jsonl", "results.json", "test.json"):
        assert f'href="{f}"' in fenced_report
    # the linearizability checker failed: its visualization is written and linked
    lin = sorted((fenced_run / "linearizable").glob("linearizable-*.html"))
    assert lin and f'href="linearizable/{lin[0].name}"' in fenced_report


def test_published_page_names_no_path_of_the_machine(fenced_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(fenced_run, run)
    test = json.loads((run / "test.json").read_text())
    test |= {"results_dir": "/home/someone/results",
             "argv": ["/home/someone/lockcheck/.venv/bin/lockcheck", "test", "--seed", "7"]}
    (run / "test.json").write_text(json.dumps(test))
    html = write_report(run).read_text()
    assert "/home/someone" not in html
    assert "Command: <code>lockcheck test --seed 7</code>" in html


def test_report_without_results_json_checks_in_memory(fenced_run: Path, tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    for f in ("history.jsonl", "test.json"):
        shutil.copy(fenced_run / f, d / f)
    html = write_report(d).read_text()
    assert "mutual exclusion violated" in html or "resource safe" in html
    assert not (d / "results.json").exists()  # nothing recorded is changed


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not a run directory"):
        write_report(tmp_path)


def test_empty_and_unknown_fault_runs(tmp_path: Path) -> None:
    from tests.checker.histories import H

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "history.jsonl").write_text("")
    (empty / "test.json").write_text(json.dumps({"workload": "mutex", "ttl_ms": 1000}))
    html = write_report(empty).read_text()
    assert "No faults were injected" in html and page_data(html)["timeline"]["keys"] == []

    odd = tmp_path / "odd"
    odd.mkdir()
    ms = 1_000_000
    hist = (H().acquire(0, "k", None, 0, ms).section(0, "k", None, ms, 50 * ms)
            .nemesis("bump-clock", 20 * ms, 21 * ms, {"fault": "clock-bump", "targets": ["n1"]})
            .jsonl())
    (odd / "history.jsonl").write_text(hist)
    (odd / "test.json").write_text(json.dumps({"workload": "mutex", "ttl_ms": 1000}))
    tl = page_data(write_report(odd).read_text())["timeline"]
    assert tl["fault_names"] == ["clock-bump"] and tl["faults"][0][3] == "n1"
    assert tl["secs"]["f"] == [None]  # no fence: drawn all the same


def test_the_story_names_renewals_of_a_superseded_lease() -> None:
    from lockcheck.results.report import findings

    def story(count: int) -> str:
        results = {"checkers": {"lease-safety": {"valid": count == 0, "violation_count": 0,
                                                 "superseded_renewal_count": count}}}
        return " ".join(findings({"workload": "mutex"}, results, {}))

    assert "2 renewals of a lease succeeded after another client" in story(2)
    assert "renewal" not in story(0)


def test_the_timeline_marks_a_renewal_of_a_superseded_lease() -> None:
    # A holds L1 and enters; B is granted L2 after L1 lapsed, enters, leaves, releases;
    # A's renew of L1 then succeeds inside its own (long) section: the mark joins both
    from lockcheck.checker.analyze import analyze
    from lockcheck.results.timeline import timeline_data
    from tests.checker.histories import H

    ms = 1_000_000
    h = H()
    lease = {1: {"fence": 1, "lease": "L1"}, 2: {"fence": 2, "lease": "L2"}}
    h.op(0, "invoke", "acquire", "k", {"ttl_ms": 100}, 0)
    h.op(0, "ok", "acquire", "k", lease[1], 1 * ms)
    h.op(0, "event", "enter", "k", lease[1], 1 * ms)
    h.op(1, "invoke", "acquire", "k", {"ttl_ms": 100}, 200 * ms)
    h.op(1, "ok", "acquire", "k", lease[2], 201 * ms)
    h.op(1, "event", "enter", "k", lease[2], 201 * ms)
    h.op(1, "event", "exit", "k", {**lease[2], "reason": "done"}, 205 * ms)
    h.op(1, "invoke", "release", "k", lease[2], 210 * ms)
    h.op(1, "ok", "release", "k", lease[2], 211 * ms)
    h.op(0, "invoke", "renew", "k", {**lease[1], "ttl_ms": 100}, 300 * ms)
    h.op(0, "ok", "renew", "k", lease[1], 301 * ms)
    h.op(0, "event", "exit", "k", {**lease[1], "reason": "done"}, 320 * ms)
    ops = h.ops()
    results = analyze(ops, {"workload": "mutex", "ttl_ms": 100}, metrics=False)
    assert results["checkers"]["lease-safety"]["superseded_renewal_count"] == 1
    tl = timeline_data(ops, results, [], {})
    [mark] = [v for v in tl["viols"] if v["kind"] == "superseded-renewal"]
    secs = tl["secs"]
    assert [secs["p"][i] for i in mark["secs"]] == [0, 1]
    assert mark["marks"] == [301_000]  # µs: the renewal's ok
    assert "renewed its lease (fence 1) after process 1" in mark["text"]
