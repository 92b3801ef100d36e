"""test-all's plan, its name checks and its exit code (the runs themselves: see
tests/integration/test_reports_real.py)."""

from __future__ import annotations

import pytest

from lockcheck.errors import BadInput
from lockcheck.results.matrix import Cell, exit_code, plan, split_names, validate


def test_names_split_on_spaces_commas_and_repeats() -> None:
    assert split_names(["none kill", "pause,partition", "kill+pause", "none"]) == [
        "none", "kill", "pause", "partition", "kill+pause"]


def test_plan_goes_backend_by_backend() -> None:
    cells = plan(["a", "b"], ["mutex"], ["none", "kill"], 2)
    assert [(c.backend, c.nemesis, c.run) for c in cells] == [
        ("a", "none", 1), ("a", "none", 2), ("a", "kill", 1), ("a", "kill", 2),
        ("b", "none", 1), ("b", "none", 2), ("b", "kill", 1), ("b", "kill", 2)]
    assert Cell("redis", "fenced", "kill+pause").name == "redis-fenced-kill+pause"


@pytest.mark.parametrize(("statuses", "interrupted", "code"), [
    (["safe", "safe"], False, 0),
    (["safe", "unsafe", "error"], False, 1),
    (["safe", "unknown"], False, 2),
    (["safe", "error"], False, 2),
    (["safe", "refused"], False, 2),
    (["refused", "refused"], False, 254),
    (["safe", "interrupted"], True, 130),
    (["unsafe", "interrupted"], True, 1),
    ([], False, 2),
])
def test_exit_code_is_the_worst_verdict(statuses: list[str], interrupted: bool,
                                        code: int) -> None:
    assert exit_code(statuses, interrupted) == code


@pytest.mark.parametrize(("backends", "workloads", "nemeses", "word"), [
    (["redis", "nope"], ["mutex"], ["none"], "unknown backend 'nope'"),
    (["redis"], ["nope"], ["none"], "unknown workload 'nope'"),
    (["redis"], ["mutex"], ["kill+nope"], "unknown nemesis 'nope'"),
    (["redis"], ["mutex"], ["none+kill"], "none cannot be combined"),
    ([], ["mutex"], ["none"], "the matrix is empty"),
])
def test_bad_names(backends: list[str], workloads: list[str], nemeses: list[str],
                   word: str) -> None:
    with pytest.raises(BadInput, match=word):
        validate(backends, workloads, nemeses)
