"""The lock libraries page (`lockcheck libraries`): its cells, its refused and not yet
available columns, client-check's steps, and links that are relative and resolve after
publishing; synthetic run folders, no servers."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lockcheck import libraries as lib
from lockcheck.errors import BadInput
from lockcheck.libraries import (
    ClientCheck,
    FaultCell,
    PairRecord,
    RunOutcome,
    Step,
    parse_client_check,
    record_from_json,
    record_to_json,
    summary_rows,
    write_record,
)
from lockcheck.results import libraries as page
from lockcheck.results.libraries import cell_text, render_page, write_page
from tests.reports.synthetic import make_run

CHECK_OUTPUT = """client-check tooz on redis (1 node(s), TTL 1000 ms)
  ok    acquire a free lock: granted (fence none; the lease ends in 990 ms)
  FAIL  renew by the expired holder: SUCCEEDED: a renew re-created the lock
  note  acquire with every server stopped: returned None (busy): recorded as a refusal
1 problem(s) in 4.2 s
"""


def record(**kw: object) -> PairRecord:
    r = PairRecord("tooz", "tooz", "9.9.9", "redis", "a description", "an expectation",
                   runs=2, time_limit=10.0, started="2026-12-08T01:00:00+0000",
                   finished="2026-12-08T01:10:00+0000", load=[1.5, 2.5])
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def ran(*statuses: str, page_of: str = "x/mutex/kill/{i}/report.html") -> FaultCell:
    return FaultCell("kill", "ran", runs=[
        RunOutcome(s, seed=i, run_dir=f"x/mutex/kill/{i}", page=page_of.format(i=i))
        for i, s in enumerate(statuses, 1)])


def test_cell_counts_unsafe_runs_of_decided_ones_and_links_each_run() -> None:
    r = record()
    text = cell_text(ran("unsafe", "safe"), r, "libraries")
    assert text.startswith("**1 of 2** unsafe")
    assert "[1](libraries/tooz--redis/x/mutex/kill/1/report.html)" in text
    assert "[2](libraries/tooz--redis/x/mutex/kill/2/report.html)" in text
    assert cell_text(ran("safe", "safe"), r, "libraries").startswith("0 of 2 unsafe")


def test_an_undecided_run_is_not_counted_as_safe() -> None:
    text = cell_text(ran("safe", "unknown"), record(), "libraries")
    assert text.startswith("0 of 1 unsafe (1 unknown)")


def test_refused_unavailable_and_missing_cells_say_so_and_link_nothing() -> None:
    r = record()
    refused = FaultCell("kill", "refused", "--nemesis kill: backend x refuses it: no | way")
    assert cell_text(refused, r, "p") == \
        "refused: --nemesis kill: backend x refuses it: no \\| way"
    assert cell_text(FaultCell("reply-loss", "unavailable", "no"), r, "p") == \
        "not yet available"
    assert cell_text(None, r, "p") == "not run"
    assert cell_text(FaultCell("kill", "not run"), r, "p") == "not run"


def test_client_check_steps_are_parsed_with_their_marks() -> None:
    steps, last = parse_client_check(CHECK_OUTPUT)
    assert [s.mark for s in steps] == ["ok", "FAIL", "note"]
    assert steps[1] == Step("FAIL", "renew by the expired holder",
                            "SUCCEEDED: a renew re-created the lock")
    assert last == "1 problem(s) in 4.2 s"
    assert lib.client_check_status(1, steps) == "failed"
    assert lib.client_check_status(0, steps) == "passed"
    assert lib.client_check_status(254, []) == "refused"


def test_a_record_survives_its_json() -> None:
    r = record(client_check=ClientCheck("failed", parse_client_check(CHECK_OUTPUT)[0], "x"),
               cells=[ran("unsafe"), FaultCell("partition", "refused", "why")])
    assert record_from_json(record_to_json(r)) == r


def test_the_page_has_one_column_per_fault_and_the_steps() -> None:
    r = record(client_check=ClientCheck("failed", parse_client_check(CHECK_OUTPUT)[0],
                                        "1 problem(s)", log="client-check.log"),
               cells=[FaultCell("none", "ran", runs=[RunOutcome("safe", page="a/report.html")]),
                      FaultCell("partition", "refused", "the backend refuses it"),
                      FaultCell("reply-loss", "unavailable", "not yet"), ran("unsafe")])
    text = render_page([r], "libraries")
    header = next(ln for ln in text.splitlines() if ln.startswith("| library |"))
    assert header == ("| library | version | backend | client-check | no fault | partition "
                      "| reply loss | server restart |")
    row = next(ln for ln in text.splitlines() if ln.startswith("| [tooz]"))
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells[1:4] == ["9.9.9", "redis", "**failed**: 1 FAIL, 1 ok, 1 note"]
    assert cells[4].startswith("0 of 1 unsafe")
    assert cells[5] == "refused: the backend refuses it"
    assert cells[6] == "not yet available"
    assert cells[7].startswith("**1 of 1** unsafe")
    assert "| **FAIL** | renew by the expired holder |" in text
    assert "n = 2" in text and "1.5 to 2.5" in text
    assert "Unsafe in at least one run**, under: tooz on redis: server restart." in text


def test_the_summary_rows_give_k_of_n_per_fault() -> None:
    r = record(cells=[ran("unsafe", "safe", "error"), FaultCell("none", "refused", "x")])
    rows = summary_rows([r], ["none", "kill"])
    assert rows[1][3:] == ["refused", "1/2 unsafe +1?"]


def test_unknown_names_are_refused_in_one_line() -> None:
    with pytest.raises(BadInput, match="unknown library 'nope'"):
        lib.pairs(["nope"])
    with pytest.raises(BadInput, match="not in the battery"):
        lib.faults(["pause"])
    assert ("tooz", "zookeeper") in lib.pairs(["tooz"])
    assert lib.faults([]) == list(lib.BATTERY)


def test_published_links_are_relative_and_resolve(tmp_path: Path) -> None:
    """A pair folder as `lockcheck libraries` leaves it, published next to the page:
    every link resolves from the page's folder, and no file names the machine's paths."""
    results = tmp_path / "runs"
    pair = results / "tooz--redis"
    runs = []
    for i, nem in enumerate(("none", "kill"), 1):
        d = make_run(pair / "redis+tooz" / "mutex" / nem / f"2026120{i}T000000", ops=300,
                     workers=3, keys=2, workload="mutex", backend="redis", nemesis=(nem,))
        runs.append(FaultCell(nem, "ran", runs=[RunOutcome(
            "unsafe", 1, d.relative_to(pair).as_posix(), f"found in {d}")]))
    (pair / "client-check.log").write_text(f"{CHECK_OUTPUT}log in {results}\n")
    out = tmp_path / "site" / "libraries.md"
    (pair / "test-all" / "1").mkdir(parents=True)
    (pair / "test-all" / "1" / "matrix.json").write_text(json.dumps(
        {"argv": ["lockcheck", "libraries", "--results-dir", str(results), "--out", str(out)]}))
    write_record(pair, record(cells=[*runs, FaultCell("partition", "refused", "why")],
                              client_check=ClientCheck("failed", [], "x",
                                                       log="client-check.log")))
    out.parent.mkdir()
    write_page(out, [results])
    shutil.rmtree(results)  # the page must not need the machine's results
    text = out.read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert len([x for x in links if x.endswith(".html")]) == 2
    for href in links:
        assert not href.startswith("/"), href
        assert (out.parent / href).exists(), href
    for p in page.pages_dir(out).rglob("*"):
        if p.is_file() and p.suffix != ".xz":
            assert str(tmp_path) not in p.read_text(errors="replace"), p
    assert list(page.pages_dir(out).rglob("history.jsonl.xz"))


def test_a_page_from_a_folder_without_results_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no results of `lockcheck libraries` here"):
        write_page(tmp_path / "docs" / "libraries.md", [tmp_path / "nothing"])
    assert not (tmp_path / "docs").exists()
