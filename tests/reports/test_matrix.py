"""test-all's plan, its name checks and its exit code (the runs themselves: see
tests/integration/test_reports_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockcheck.errors import BadInput
from lockcheck.results.matrix import (
    Cell,
    Matrix,
    exit_code,
    parse_shard,
    plan,
    shard,
    split_names,
    validate,
)


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


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_split_the_plan_into_disjoint_slices(n: int) -> None:
    cells = plan(["a", "b", "c"], ["mutex", "fenced"], ["none", "kill"], 5)
    slices = [shard(cells, i, n) for i in range(1, n + 1)]
    assert sorted((c for s in slices for c in s), key=cells.index) == cells  # all, once
    sizes = [len(s) for s in slices]
    assert max(sizes) - min(sizes) <= 1
    assert shard(cells, 1, n) == shard(list(cells), 1, n)  # the same slice every time
    if n > 1:  # each shard gets a share of every backend, not one backend's cells
        assert {c.backend for c in slices[0]} == {"a", "b", "c"}


@pytest.mark.parametrize(("text", "expected"), [(None, (1, 1)), ("1/2", (1, 2)),
                                                ("3/3", (3, 3))])
def test_parse_shard(text: str | None, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/2/3", "-1/2"])
def test_bad_shards(text: str) -> None:
    with pytest.raises(BadInput, match="--shard"):
        parse_shard(text)


def test_every_run_gets_a_seed_of_its_own(tmp_path: Path) -> None:
    cells = plan(["a"], ["mutex"], ["none"], 3)
    m = Matrix(tmp_path, tmp_path, cells, time_limit=1, count=3, pass_through=[])
    seeds = [int(m.command(c)[-1]) for c in cells]
    assert len(set(seeds)) == 3 and seeds == [m.seed_of(c) for c in cells]
    fixed = Matrix(tmp_path, tmp_path, cells, time_limit=1, count=3, pass_through=[],
                   seed=100)
    assert [fixed.command(c)[-2:] for c in cells] == [["--seed", str(100 + i)]
                                                      for i in range(3)]
