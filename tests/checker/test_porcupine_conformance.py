"""The porcupine engine against Porcupine's own test corpus: 108 known verdicts.

The corpus lives in ``../shared/testdata/porcupine`` beside the repository (see its
README.md); clones without it skip these tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockcheck.checker.formats.porcupine_logs import (
    parse_etcd_lines,
    parse_etcd_log,
    parse_kv_lines,
    parse_kv_log,
)
from lockcheck.checker.porcupine import (
    UNKNOWN,
    CheckResult,
    Event,
    check_events,
    check_events_verbose,
)
from lockcheck.checker.porcupine.models import cas_register, kv

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "porcupine"
NO_CORPUS = (f"Porcupine's test corpus is not beside this clone ({DATA}); "
             "it ships in the project's shared/ folder only")
EXPECTED = DATA / "expected.json"
# histories that take well over a second in CPython
SLOW = {"jepsen/etcd_002.log", "jepsen/etcd_007.log", "kv/c50-ok.txt"}


def _cases() -> list[object]:
    if not EXPECTED.exists():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason=NO_CORPUS))]
    expected = json.loads(EXPECTED.read_text())
    cases: list[object] = []
    for name, want in sorted(expected.items()):
        if want is None:  # etcd_095.log is empty and untested upstream
            continue
        marks = [pytest.mark.slow] if name in SLOW else []
        cases.append(pytest.param(name, want, id=name, marks=marks))
    return cases


@pytest.mark.parametrize(("name", "linearizable"), _cases())
def test_verdict(name: str, linearizable: bool) -> None:
    path = DATA / name
    if name.startswith("jepsen/"):
        result = check_events(cas_register(), parse_etcd_log(path), timeout=60)
    else:
        result = check_events(kv(), parse_kv_log(path), timeout=60)
    assert result is (CheckResult.OK if linearizable else CheckResult.ILLEGAL)


def test_corpus_is_complete() -> None:
    if not EXPECTED.exists():
        pytest.skip(NO_CORPUS)
    expected = json.loads(EXPECTED.read_text())
    assert sum(v is not None for v in expected.values()) == 108
    assert (DATA / "jepsen" / "etcd_095.log").stat().st_size == 0


@pytest.mark.parametrize(
    "name", ["kv/c01-ok.txt", "kv/c01-bad.txt", "kv/c10-ok.txt", "kv/c10-bad.txt"]
)
def test_kv_unpartitioned(name: str) -> None:
    if not EXPECTED.exists():
        pytest.skip(NO_CORPUS)
    want = json.loads(EXPECTED.read_text())[name]
    result = check_events(kv(partitioned=False), parse_kv_log(DATA / name), timeout=60)
    assert result is (CheckResult.OK if want else CheckResult.ILLEGAL)


def test_c50_bad_is_illegal_quickly_with_verbose_info() -> None:
    if not EXPECTED.exists():
        pytest.skip(NO_CORPUS)
    result, info = check_events_verbose(kv(), parse_kv_log(DATA / "kv/c50-bad.txt"), timeout=20)
    assert result is CheckResult.ILLEGAL
    assert info.elapsed_s < 5
    assert any(p.result is CheckResult.ILLEGAL for p in info.partitions)


# --- the parsers, on inline lines (no corpus needed) ---------------------------------

ETCD = """\
INFO  jepsen.util - 4\t:invoke\t:read\tnil
INFO  jepsen.util - 4\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:write\t1
INFO  jepsen.util - 1\t:ok\t:write\t1
INFO  jepsen.util - 2   :invoke :cas    [1 4]
INFO  jepsen.util - 2   :fail   :cas    [1 4]
INFO  jepsen.util - 3\t:invoke\t:cas\t[1 2]
INFO  jepsen.util - 3\t:info\t:cas\t[1 2]\t:timed-out
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:fail\t:read\t:timed-out
"""


def test_parse_etcd_lines() -> None:
    events = parse_etcd_lines(ETCD.splitlines())
    assert events == [
        Event(4, "call", ("read", None), 0),
        Event(4, "return", None, 0),
        Event(1, "call", ("write", 1), 1),
        Event(1, "return", None, 1),
        Event(2, "call", ("cas", (1, 4)), 2),
        Event(2, "return", False, 2),
        Event(3, "call", ("cas", (1, 2)), 3),  # crashed: no return
        Event(0, "call", ("read", None), 4),
        Event(0, "return", UNKNOWN, 4),
    ]
    # the cas failed (not 1) after the write of 1 had returned: not linearizable
    assert check_events(cas_register(), events) is CheckResult.ILLEGAL
    with pytest.raises(ValueError, match="<lines>:1"):
        parse_etcd_lines(["garbage"])


def test_parse_kv_lines() -> None:
    lines = [
        '{:process 0, :type :invoke, :f :put, :key "1", :value "x"}',
        '{:process 1, :type :invoke, :f :get, :key "1", :value nil}',
        '{:process 0, :type :ok, :f :put, :key "1", :value "x"}',
        '{:process 1, :type :ok, :f :get, :key "1", :value "x"}',
        '{:process 2, :type :invoke, :f :append, :key "2", :value "y"}',
        '{:process 2, :type :ok, :f :append, :key "2", :value "y"}',
    ]
    events = parse_kv_lines(lines)
    assert events[1] == Event(1, "call", ("get", "1", None), 1)
    assert events[3] == Event(1, "return", "x", 1)
    assert check_events(kv(), events) is CheckResult.OK
    with pytest.raises(ValueError, match="does not match"):
        parse_kv_lines([lines[0], lines[2].replace(":put", ":append")])
