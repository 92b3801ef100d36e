"""The compiled lock reader (`lockscan`, `_lockscan.c`) against the ordinary path: the
same lock operations, the same verdicts and the same errors, on generated lock
histories of every shape and on lines of every odd shape (which it hands to Python)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lockcheck.checker import lockscan
from lockcheck.checker.api import CheckOptions
from lockcheck.checker.linearizable import (
    check_linearizable,
    check_linearizable_file,
    lock_operations,
)
from lockcheck.history import HistoryError, read_history, read_history_full

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_locks

pytestmark = pytest.mark.skipif(not lockscan.COMPILED,
                                reason="the compiled lock reader was not built (no C compiler?)")

SHAPES = ["fenced", "acq-fences", "all-fences", "no-fences", "no-fences-crash5"]


def same(path: Path, *, allow_truncated: bool = False, chunk: int | None = None,
         model: str = "fenced-mutex") -> dict[str, Any]:
    """Read and check `path` both ways; assert they agree; return the result."""
    old = lockscan.CHUNK
    if chunk is not None:
        lockscan.CHUNK = chunk
    try:
        cols = lockscan.read_lock_columns(path, allow_truncated=allow_truncated)
    finally:
        lockscan.CHUNK = old
    read = read_history_full(path, allow_truncated=allow_truncated)
    if cols is not None:  # None: a number beyond the columns, read the ordinary way
        assert cols.truncated_line == read.truncated_line
        assert cols.operations(np.arange(len(cols))) == lock_operations(read.ops)
    opts = CheckOptions(extra={"model": model})
    want = check_linearizable(read.ops, opts)
    got = check_linearizable_file(path, opts, allow_truncated=allow_truncated)
    assert got == want
    return got


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("plant", [False, True], ids=["valid", "lie"])
@pytest.mark.parametrize("model", ["fenced-mutex", "mutex"])
def test_generated_histories(tmp_path: Path, shape: str, plant: bool, model: str) -> None:
    p = tmp_path / "history.jsonl"
    bench_locks.generate(p, ops=3000, keys=3, clients=8, ttl_ms=100, seed=11,
                         shape=dataclasses.replace(bench_locks.SHAPES[shape], plant=plant))
    r = same(p, chunk=4096, model=model)  # small chunks: lines cut across reads
    if model == "fenced-mutex" and shape != "fenced":
        assert r["valid"] is (not plant)


def _line(index: int, **kw: Any) -> str:
    return json.dumps({"index": index, **kw}, separators=(", ", ": "))


def _odd_history(rng: random.Random, n: int, big: bool) -> list[str]:
    """A lock history whose lines take every shape the scanner hands over to Python
    (with `big`, numbers too big for its columns too)."""
    lines: list[str] = []
    index = 0
    procs: list[Any] = [1, 2, 3, "wörker", "p\"q", 2**61 if big else -4]
    for i in range(n):
        slot = rng.randrange(len(procs))
        proc = procs[slot]
        key = rng.choice(["k", "k", "ké", "k\\n", None])
        f = rng.choice(["acquire", "acquire", "renew", "release", "write"])
        fence = i + 1
        inv_value: Any = rng.choice([None, {"ttl_ms": 100}, {"fence": fence - 1, "lease": "L"},
                                     {"lease": 7}, {"lease": 2**62 if big else "é"}, [1, 2],
                                     1.5, {"fence": True}, {"a": {"b": 1}}, {"lease": False}])
        extra = rng.choice([{}, {}, {"note": "x"}, {"worker": 3}, {"error": None}])
        t = i * 10
        lines.append(_line(index, time=t, process=proc, type="invoke", f=f, key=key,
                           value=inv_value, **extra))
        index += rng.choice([1, 1, 2])
        typ = rng.choice(["ok", "ok", "fail", "info"])
        out: Any = ({"fence": rng.choice([fence, fence, 2**70 if big else -fence, 3.0]),
                     "lease": f"L{rng.randrange(i + 1)}"}
                    if f == "acquire" else inv_value)
        lines.append(_line(index, time=t + 5, process=proc, type=typ, f=f, key=key, value=out,
                           error="busy" if typ == "fail" else None))
        index += 1
        if typ == "info":  # the id is retired: the worker goes on as another process
            procs[slot] = proc + 100 if type(proc) is int else proc + "'"
        if rng.random() < 0.1:
            lines.append(_line(index, time=t + 6, process="nemesis", type="info",
                               f="start", key=None, value=None))
            index += 1
        if rng.random() < 0.05:
            lines.append("   ")
    if rng.random() < 0.5:  # an open invoke at the end
        lines.append(_line(index, time=n * 10, process=procs[0], type="invoke", f="release",
                           key="k", value={"fence": 1}))
    return lines


@pytest.mark.parametrize("seed", range(30))
def test_odd_lines_agree(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    p = tmp_path / "history.jsonl"
    p.write_text("\n".join(_odd_history(rng, 40, seed % 10 == 0)) + "\n", encoding="utf-8")
    same(p, chunk=rng.choice([64, 200, 1 << 20]))


def _error(path: Path, **kw: Any) -> str:
    with pytest.raises(HistoryError) as ref:
        read_history(path, **kw)
    with pytest.raises(HistoryError) as got:
        lockscan.read_lock_columns(path, **kw)
    assert str(got.value) == str(ref.value)
    return str(got.value)


GOOD = [_line(0, time=1, process=1, type="invoke", f="acquire", key="k", value=None),
        _line(1, time=2, process=1, type="ok", f="acquire", key="k", value={"fence": 1})]


@pytest.mark.parametrize(("lines", "message"), [
    ([*GOOD, _line(1, time=3, process=1, type="invoke", f="release", key="k", value=None)],
     "index 1 does not increase"),
    ([*GOOD, _line(2, time=3, process=2, type="ok", f="release", key="k", value=None)],
     "ok release of process 2 with no open invoke"),
    # the process rules: one op in flight, nothing after an info (history.ProcessRules)
    ([GOOD[0], _line(1, time=2, process=1, type="invoke", f="renew", key="k", value=None)],
     "invoke renew of process 1 while another op of that process is in flight"),
    ([GOOD[0], _line(1, time=2, process=1, type="info", f="acquire", key="k", value=None),
      _line(2, time=3, process=1, type="invoke", f="release", key="k", value=None)],
     "invoke release of process 1 after an info of that process"),
    ([GOOD[0], _line(1, time=2, process=1, type="info", f="acquire", key="k", value=None),
      _line(2, time=3, process=1, type="ok", f="acquire", key="k", value={"fence": 1})],
     "ok acquire of process 1 after an info of that process"),
    ([*GOOD, '{"index": 2, "time": 3'], "not valid JSON"),
    ([*GOOD, _line(2, time=3, process=1, type="maybe", f="release", key="k", value=None)],
     "unknown type 'maybe'"),
    ([*GOOD, _line(2, time=3.5, process=1, type="invoke", f="release", key="k", value=None)],
     "'time' must be an integer"),
    ([*GOOD, '{"index": 2, "time": 3, "process": 1, "type": "invoke", "f": "release"} x'],
     "not valid JSON"),
])
def test_errors_are_the_readers(tmp_path: Path, lines: list[str], message: str) -> None:
    p = tmp_path / "history.jsonl"
    p.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    assert message in _error(p)


def test_truncated_last_line(tmp_path: Path) -> None:
    p = tmp_path / "history.jsonl"
    p.write_text("\n".join(GOOD) + '\n{"index": 2, "ti', encoding="utf-8")
    assert "truncated last line" in _error(p)
    r = same(p, allow_truncated=True)
    assert r["valid"] is True


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "history.jsonl"
    p.write_bytes(("\n".join(GOOD) + "\n").encode() + b'{"index": 2, "f": "\xff"}\n')
    assert "not UTF-8 text" in _error(p)


def test_reads_an_open_binary_stream(tmp_path: Path) -> None:
    p = tmp_path / "history.jsonl"
    bench_locks.generate(p, ops=500, keys=2, clients=4, ttl_ms=100, seed=3,
                         shape=bench_locks.SHAPES["all-fences"])
    want = check_linearizable(read_history(p), CheckOptions())
    assert check_linearizable_file(io.BytesIO(p.read_bytes()), CheckOptions()) == want
    gz = tmp_path / "history.jsonl.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    with gzip.open(gz, "rb") as fh:
        assert check_linearizable_file(fh, CheckOptions()) == want


def test_falls_back_where_a_number_does_not_fit(tmp_path: Path) -> None:
    p = tmp_path / "history.jsonl"
    big = _line(2, time=3, process=2**61, type="invoke", f="release", key="k", value=None)
    p.write_text("\n".join([*GOOD, big]) + "\n", encoding="utf-8")
    assert lockscan.read_lock_columns(p) is None
    want = check_linearizable(read_history(p), CheckOptions())
    assert check_linearizable_file(p, CheckOptions()) == want


@pytest.mark.parametrize("model", ["linearizable", "fenced-mutex", "mutex"])
@pytest.mark.parametrize("plant", [False, True], ids=["valid", "lie"])
def test_check_external_reads_columns_with_the_same_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, plant: bool) -> None:
    from lockcheck.checker.external import check_external

    p = tmp_path / "history.jsonl"
    bench_locks.generate(p, ops=1500, keys=2, clients=6, ttl_ms=100, seed=5,
                         shape=dataclasses.replace(bench_locks.SHAPES["no-fences"], plant=plant))
    with p.open("a") as fh:  # an op the lock models do not understand, and a cut line
        fh.write(_line(10**6, time=10**12, process="writer", type="invoke", f="write", key="k0",
                       value=1) + '\n{"index": ')

    def run() -> dict[str, Any]:
        r = check_external(p, model=model, fmt=None, timeout=10, html_dir=None,
                           allow_truncated=True)
        r.pop("elapsed_s")
        r.get("details", {}).pop("elapsed_s", None)
        return r

    got = run()
    monkeypatch.setattr(lockscan, "COMPILED", False)
    assert got == run()
