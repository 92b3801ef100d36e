"""The history's lines made in C (`lockcheck/_crecord.c`) against the Python code they
stand in for, byte for byte: a worker's spool, the controller's indexes, the event rows
read without the JSON decoder (which must take exactly the lines json takes)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.history import py_index_lines
from lockcheck.intake import in_layout, py_event_rows
from lockcheck.locks.api import Lease
from lockcheck.workloads.worker import Encoded, LeaseValues, PySpool, _dumps, _string, lines

crecord = pytest.importorskip("lockcheck._crecord",
                              reason="the compiled recorder was not built (no C compiler)")

# ASCII often (quotes, backslashes, control characters: the cases the fast path must
# leave to the encoder), any code point too (non-ASCII, surrogate pairs)
texts = st.text(st.characters(max_codepoint=0x7f), max_size=8) | st.text(max_size=8)
scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | texts
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(texts, inner, max_size=3), max_leaves=8)
processes = st.integers(-10**20, 10**20) | st.booleans() | texts | st.none()
ops = st.tuples(st.integers(0, 2**66), processes, st.sampled_from(["invoke", "ok", "event"]),
                st.sampled_from(["acquire", "enter", "write"]), st.none() | texts,
                values | st.builds(lambda v: Encoded(_dumps(v)), values),
                st.none() | texts)


def spools(worker: int) -> tuple[Any, PySpool]:
    return (crecord.Spool(worker, _string, _dumps, Encoded),
            PySpool(worker, _string, _dumps, Encoded))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.lists(ops, max_size=8))
def test_the_compiled_spool_writes_what_the_python_one_writes(worker: int,
                                                               batch: list[Any]) -> None:
    c, py = spools(worker)
    for op in batch:
        c.add(*op)
        py.add(*op)
    assert c.take() == py.take()
    assert c.take() == b"" and len(c) == 0  # taken: empty


def test_a_value_that_cannot_be_encoded_leaves_nothing_of_its_line() -> None:
    c, _ = spools(1)
    c.add(1, 2, "invoke", "acquire", "k", {"ttl_ms": 5}, None)
    kept = c.take()
    c.add(1, 2, "invoke", "acquire", "k", {"ttl_ms": 5}, None)
    with pytest.raises(TypeError):
        c.add(3, 2, "ok", "acquire", "k", {"x": object()}, None)
    with pytest.raises(TypeError):
        c.add(3, 2, "ok", "acquire", 7, None, None)  # a key that is not a string
    assert c.take() == kept


def test_the_lines_are_the_python_lines() -> None:
    c, _ = spools(4)
    v = LeaseValues()(Lease(key="k0", token="t-1", fence=3, ttl_ms=100, valid_until_ns=0),
                      reason="done")
    c.add(10, 15, "event", "exit", 'k"0\u00e9', v, "gone\n")
    assert c.take().decode() == lines(4, [(10, 15, "event", "exit", 'k"0\u00e9', v, "gone\n")])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b"{" + b.replace(b"\n", b" ")),
                max_size=6), st.integers(0, 10**12), st.binary(max_size=10))
def test_indexes_are_put_first_as_in_python(lines_: list[bytes], first: int,
                                            partial: bytes) -> None:
    block = b"".join(line + b"\n" for line in lines_) + partial.replace(b"\n", b"")
    assert crecord.index_lines(block, first) == py_index_lines(block, first)[0]


def event_line(t: Any, p: Any, f: str, key: Any, value: str, worker: Any) -> bytes:
    return (f'{{"time": {t}, "process": {p}, "type": "event", "f": "{f}", "key": {key}, '
            f'"value": {value}, "worker": {worker}}}\n').encode()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**17), st.integers(-5, 10**17),
                          st.sampled_from(["enter", "exit", "stop-at-acquire"]),
                          st.none() | texts, values, st.integers(0, 99)), max_size=5))
def test_event_rows_are_what_json_reads(events: list[Any]) -> None:
    block = b"".join(
        event_line(t, p, f, "null" if k is None else _string(k), _dumps(v), w)
        + b'{"time": 1, "process": 2, "type": "ok", "f": "acquire", "key": null, '
          b'"value": null, "worker": 0}\n'
        for t, p, f, k, v, w in events)
    rows, odd = crecord.event_rows(block)
    py_rows, py_odd = py_event_rows(block)
    # a key with escapes is left to the JSON decoder: odd in C, a row in Python
    assert len(rows) + len(odd) == len(py_rows) + len(py_odd) == len(events)
    assert len(odd) == sum(1 for e in events if e[3] is not None and _string(e[3]) != f'"{e[3]}"')
    by_start = {r[0]: r for r in py_rows}
    for row in rows:
        want = by_start[row[0]]
        assert row[:6] == want[:6]
        assert same(json.loads(row[6]), json.loads(want[6]))


def same(a: Any, b: Any) -> bool:
    """Equal, NaN included."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


NEAR_JSON = ['"a\tb"', '"\x01"', '[1,]', '{"a": 1,}', '1.', '.5', '-', '01', '"\\x"',
             '"\\u12g4"', '"\\u00e9"', 'NaN', '-Infinity', '-NaN', '1e5', '1E+5', '2e',
             'tru', ' 1 ', '{"a" 1}', '{1: 2}', '[[[]]]', '{"a": [1, {"b": null}]}', '"',
             '"\\"', '[1 2]', '-0.0e-0', '+1', 'true false']


@pytest.mark.parametrize("near", NEAR_JSON)
def test_near_json_is_judged_as_json_judges_it(near: str) -> None:
    judged_as_json_judges(near)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789.-+eEtrufalsnNIiy \\/bu\t\x01', max_size=16)
       | st.builds(lambda v, cut: _dumps(v)[:cut] + _dumps(v)[cut + 1:], values,
                   st.integers(0, 40)))
def test_a_value_is_taken_as_json_exactly_when_json_takes_it(value: str) -> None:
    judged_as_json_judges(value)


def judged_as_json_judges(value: str) -> None:
    """The rows' JSON check against json itself, on near-JSON text."""
    if "\n" in value:
        return
    line = event_line(5, 1, "enter", '"k"', value, 2)
    rows, odd = crecord.event_rows(line)
    try:
        json.loads(value)
        valid = True
    except ValueError:
        valid = False
    if valid:
        assert len(rows) == 1 and rows[0][6] == value
    elif rows:
        # text json refuses is never a row
        pytest.fail(f"taken as JSON: {value!r}")
    else:
        assert odd == [(0, len(line))]


HEAD = b'{"time": 5, "process": 1, "type": "event", "f": "enter", '


@pytest.mark.parametrize("line", [
    b'{"time": 5, "process": "x", "type": "event", "f": "enter", "key": "k", "value": 1, '
    b'"worker": 2}\n',
    HEAD + b'"key": "k", "value": 1, "worker": 2.5}\n',
    HEAD + b'"key": "k", "value": 1, "worker": 2, "x": 1}\n',
    HEAD.replace(b"5", b"1234567890123456789") + b'"key": "k", "value": 1, "worker": 2}\n',
    HEAD + b'"key": "k", "value": , "worker": 2}\n',
    HEAD + b'"key": "k\\"", "value": 1, "worker": 2}\n',
])
def test_an_event_line_out_of_the_usual_shape_is_left_to_the_decoder(line: bytes) -> None:
    assert crecord.event_rows(line) == ([], [(0, len(line))])


SPOOLS = {"compiled": lambda *a, **kw: crecord.Spool(*a, **kw), "python": PySpool}


@pytest.mark.parametrize("kind", SPOOLS)
def test_record_reads_the_clock_and_says_when_the_lines_go_out(kind: str) -> None:
    """`record` stamps each op with the monotonic clock less t0, and asks for a send at a
    round's start (an acquire's invoke) once `every_ns` passed since the last take, at
    every release's invoke, or at every op with `prompt`."""
    t0 = time.monotonic_ns() - 10**9
    every = 20_000_000
    s = SPOOLS[kind](3, _string, _dumps, Encoded, t0=t0, prompt=False, every_ns=every)
    before = time.monotonic_ns() - t0
    assert s.record(1, "invoke", "acquire", "k0") is True  # never taken: long ago
    s.take()
    assert s.record(1, "ok", "acquire", "k0", {"fence": 1}) is False
    assert s.record(1, "invoke", "acquire", "k0") is False  # taken just now
    # a release goes out before it is sent, however recent the last take
    assert s.record(1, "invoke", "release", "k0") is True
    assert s.record(1, "invoke", "renew", "k0") is False
    time.sleep(every / 1e9)
    assert s.record(1, "ok", "release", "k0") is False  # not a round's start
    assert s.record(1, "invoke", "acquire", "k1", None, "x") is True
    after = time.monotonic_ns() - t0
    times = [json.loads(x)["time"] for x in s.take().splitlines()]
    assert len(times) == 6 and times == sorted(times)
    assert before <= times[0] and times[-1] <= after
    prompt = SPOOLS[kind](3, _string, _dumps, Encoded, t0=t0, prompt=True)
    assert all(prompt.record(1, t, "probe", None) is True for t in ("ok", "event", "info"))


@pytest.mark.parametrize("kind", SPOOLS)
def test_the_send_interval_can_be_shortened_later(kind: str) -> None:
    """A worker whose lines a fault starts to watch sets `every_ns` lower (the
    Recorder's `hurry`): the next round's start asks for a send by the new interval."""
    s = SPOOLS[kind](3, _string, _dumps, Encoded, t0=0, prompt=False, every_ns=10**10)
    s.take()
    time.sleep(0.002)
    assert s.record(1, "invoke", "acquire", "k0") is False
    s.every_ns = 1_000_000
    assert s.every_ns == 1_000_000
    assert s.record(1, "invoke", "acquire", "k0") is True


@pytest.mark.parametrize("kind", SPOOLS)
def test_a_line_is_whole_when_its_encoder_lets_another_thread_in(kind: str) -> None:
    """The value's encoder is Python, so another thread may run while it does: here it
    records an op itself, as such a thread would. Each line is whole, the other
    thread's first (its op finished first); no line is cut by another."""
    spool: Any = None

    def dumps(v: Any) -> str:
        if v == "outer":
            spool.record(2, "event", "probe", "k1", {"inner": True})
        return _dumps(v)

    spool = SPOOLS[kind](5, _string, dumps, Encoded, t0=0)
    spool.record(1, "ok", "acquire", "k0", "outer")
    got = spool.take().splitlines(keepends=True)
    assert [json.loads(x)["value"] for x in got] == [{"inner": True}, "outer"]
    assert all(in_layout(x) for x in got)


def test_a_kept_spool_holds_its_unsent_lines_in_its_file(tmp_path: Path) -> None:
    """With `keep`, the lines not yet sent are also in a file the controller reads if
    the worker dies: whole lines only, kept from `take` until `sent`; so a release's
    invoke need not be sent at once."""
    path = tmp_path / "c0.unsent"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def kept() -> bytes:
        data = path.read_bytes()
        return data[8:8 + int.from_bytes(data[:8], sys.byteorder)]

    try:
        s = crecord.Spool(3, _string, _dumps, Encoded, t0=0, prompt=False, every_ns=10**12,
                          keep=fd)
        assert kept() == b""
        s.add(1, 1, "invoke", "acquire", "k0", {"ttl_ms": 5}, None)
        one = kept()
        assert one.endswith(b"\n") and one.count(b"\n") == 1
        assert s.record(1, "invoke", "release", "k0") is False  # the file keeps it
        two = kept()
        assert two.startswith(one) and two.count(b"\n") == 2
        assert s.take() == two and kept() == two  # not sent yet: still kept
        s.add(2, 1, "ok", "release", "k0", None, None)  # another thread, before `sent`
        s.sent()
        assert kept().startswith(two) and kept().count(b"\n") == 3
        assert len(s) == len(kept()) - len(two)
        assert s.take() == kept()[len(two):]
        s.sent()
        assert kept() == b"" and len(s) == 0
        for i in range(5000):  # past the file's first size: it grows with the spool
            s.add(i, 1, "invoke", "acquire", "k0", {"ttl_ms": 1000}, None)
        big = kept()
        assert big.count(b"\n") == 5000 and len(big) > 65536
        assert s.take() == big
        del s
    finally:
        os.close(fd)
