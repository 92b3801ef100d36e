"""lockcheck.history: the writer, the strict reader and pairing (docs/history-format.md)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockcheck.history import (
    HistoryError,
    HistoryWriter,
    Op,
    ProcessRules,
    op_from_json,
    pair_ops,
    read_history,
    read_history_full,
    read_history_lines,
    sort_by_time,
    validate_processes,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "history-format.md"


def line(**kw: Any) -> str:
    d: dict[str, Any] = {"index": 0, "time": 0, "process": 0, "type": "invoke",
                         "f": "acquire", "key": "k1", "value": {"ttl_ms": 1000}}
    d.update(kw)
    return json.dumps(d) + "\n"


def write(tmp_path: Path, text: str, name: str = "history.jsonl") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8"))
    return p


# -- the documented example --------------------------------------------------------------


def doc_example() -> str:
    m = re.search(r"## Example\s+```json\n(.*?)```", DOC.read_text(), re.S)
    assert m, "docs/history-format.md lost its example block"
    return m.group(1)


def test_documented_example_reads_and_pairs(tmp_path: Path) -> None:
    ops = read_history(write(tmp_path, doc_example()))
    assert [o.index for o in ops] == list(range(len(ops)))
    assert ops[0] == Op(process=0, type="invoke", f="acquire", key="k1",
                        value={"ttl_ms": 2000}, time=1204331, index=0, worker=0)
    assert ops[0].worker == 0 and ops[0].extra == {}
    assert ops[1].fence == 1
    nem = [o for o in ops if o.process == "nemesis"]
    assert [o.type for o in nem] == ["invoke", "info"] and nem[1].value["nodes"] == ["n1"]
    assert ops[-1].error == "not-owner"
    pairs = list(pair_ops(ops))
    assert [(p.invoke.f, p.type) for p in pairs] == [
        ("acquire", "ok"), ("write", "ok"), ("kill", "info"), ("release", "fail")]


# -- writer -----------------------------------------------------------------------------


def test_writer_assigns_indexes_keeps_field_order_and_flushes(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    w = HistoryWriter(p)
    d = w.append({"time": 5, "process": 1, "type": "invoke", "f": "acquire", "key": "k0",
                  "value": {"ttl_ms": 100}, "worker": 1, "index": 99})
    assert d["type"] == "invoke"  # what the writer returns goes on to LiveStats
    w.append(Op(process=1, type="ok", f="acquire", key="k0", value={"fence": 3}, time=7,
                worker=1))
    # readable while the writer is still open: every line is flushed
    text = p.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 2
    first = text.splitlines()[0]
    assert first.startswith('{"index": 0, "time": 5, "process": 1, ')
    ops = read_history(p)
    assert [o.index for o in ops] == [0, 1]
    assert ops[1].fence == 3 and ops[1].worker == 1
    assert len(w) == 2 and w.counts == {"invoke": 1, "ok": 1}
    w.close()
    w.close()  # idempotent


def test_writer_is_thread_safe(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path / "h.jsonl")

    def pump(p: int) -> None:
        for i in range(200):
            w.append({"time": i, "process": p, "type": "event", "f": "enter", "key": "k",
                      "value": None})

    threads = [threading.Thread(target=pump, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    ops = read_history(tmp_path / "h.jsonl")
    assert [o.index for o in ops] == list(range(1600))
    for p in range(8):
        assert [o.time for o in ops if o.process == p] == list(range(200))


def test_writer_appends_to_an_existing_file_without_reusing_content(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    w = HistoryWriter(p)
    w.append({"time": 1, "process": 0, "type": "invoke", "f": "acquire", "key": "k",
              "value": None})
    w.close()
    assert read_history(p)[0].index == 0


def _well_formed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Drop the rows that break the process rules (the reader refuses those)."""
    rules = ProcessRules()
    return [row for row in rows if not rules.step(*row[1:4])]


@given(st.lists(st.tuples(st.integers(0, 10**12), st.one_of(st.integers(0, 50),
                                                                st.just("nemesis")),
                          st.sampled_from(["invoke", "ok", "fail", "info", "event"]),
                          st.sampled_from(["acquire", "renew", "release", "write", "enter"]),
                          st.one_of(st.none(), st.text(max_size=5)),
                          st.one_of(st.none(), st.dictionaries(st.text(max_size=5),
                                                               st.integers(), max_size=3))),
                max_size=30))
def test_writer_reader_round_trip(rows: list[tuple[Any, ...]]) -> None:
    import tempfile

    rows = _well_formed(rows)

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "h.jsonl"
        w = HistoryWriter(p)
        for t, proc, typ, f, key, value in rows:
            w.append({"time": t, "process": proc, "type": typ, "f": f, "key": key,
                      "value": value})
        w.close()
        ops = read_history(p)
    assert [(o.time, o.process, o.type, o.f, o.key, o.value) for o in ops] == list(rows)
    assert [o.index for o in ops] == list(range(len(rows)))


# -- strict reader ----------------------------------------------------------------------


def test_blank_lines_are_skipped_and_unknown_fields_kept(tmp_path: Path) -> None:
    text = line(index=0, extra_field=[1]) + "\n   \n" + line(index=1, type="ok",
                                                             value={"fence": 2})
    ops = read_history(write(tmp_path, text))
    assert len(ops) == 2
    assert ops[0].extra == {"extra_field": [1]}
    assert ops[0].to_json()["extra_field"] == [1]


@pytest.mark.parametrize(("text", "lineno", "message"), [
    ("{not json}\n", 1, "not valid JSON"),
    ("[1, 2]\n", 1, "expected a JSON object"),
    (line(index=0) + '{"index": 1, "time": 0, "process": 0, "type": "ok"}\n', 2,
     "missing field 'f'"),
    (line(index="0"), 1, "'index' must be an integer"),
    (line(index=True), 1, "'index' must be an integer"),
    (line(time=1.5), 1, "'time' must be an integer"),
    (line(process=None), 1, "'process' must be an integer or a string"),
    (line(process=False), 1, "'process' must be an integer or a string"),
    (line(type="begin"), 1, "unknown type 'begin'"),
    (line(f=3), 1, "'f' must be a string"),
    (line(key=7), 1, "'key' must be a string or null"),
    (line(index=0) + line(index=0), 2, "index 0 does not increase"),
    (line(index=3) + line(index=2), 2, "index 2 does not increase"),
    (line(index=0) + "\n" + line(index=1, process=1) + '{"index": 2, "ti\n' + line(index=3), 4,
     "not valid JSON"),
])
def test_malformed_line_names_file_and_line(tmp_path: Path, text: str, lineno: int,
                                            message: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(HistoryError) as ei:
        read_history(p)
    assert ei.value.line == lineno
    assert ei.value.path == str(p)
    assert str(ei.value).startswith(f"{p}:{lineno}: ")
    assert message in str(ei.value)


def test_indexes_may_skip_but_must_increase() -> None:
    ops = read_history_lines([line(index=0), line(index=5, process=1)]).ops
    assert [o.index for o in ops] == [0, 5]


def test_truncated_last_line_is_refused_unless_allowed(tmp_path: Path) -> None:
    text = line(index=0) + line(index=1, type="ok")[:25]
    p = write(tmp_path, text)
    with pytest.raises(HistoryError) as ei:
        read_history(p)
    assert ei.value.line == 2 and "truncated" in str(ei.value)
    r = read_history_full(p, allow_truncated=True)
    assert len(r.ops) == 1 and r.truncated_line == 2
    # a complete file reports no truncation
    assert read_history_full(write(tmp_path, line(), "ok.jsonl")).truncated_line is None


def test_bad_line_in_the_middle_is_an_error_even_with_allow_truncated(tmp_path: Path) -> None:
    p = write(tmp_path, line(index=0) + '{"index": 1,\n' + line(index=2))
    with pytest.raises(HistoryError) as ei:
        read_history(p, allow_truncated=True)
    assert ei.value.line == 2


def test_complete_last_line_without_newline_is_accepted(tmp_path: Path) -> None:
    # a hand-edited file often lacks the final newline; the op on it is complete JSON
    p = write(tmp_path, line(index=0) + line(index=1, type="ok").rstrip("\n"))
    assert [op.index for op in read_history(p)] == [0, 1]


def test_not_utf8_is_a_history_error(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_bytes(b'{"index": 0, "f": "\xff\xfe"}\n')
    with pytest.raises(HistoryError, match="UTF-8"):
        read_history(p)


def test_empty_file_is_an_empty_history(tmp_path: Path) -> None:
    assert read_history(write(tmp_path, "")) == []


def test_op_from_json_defaults() -> None:
    op = op_from_json({"index": 4, "time": 9, "process": "nemesis", "type": "info",
                       "f": "kill", "error": 17})
    assert op.key is None and op.value is None and op.error is None  # non-string error dropped
    assert op.fence is None
    assert Op(process=0, type="ok", f="acquire", value={"fence": True}).fence is True
    assert Op(process=0, type="ok", f="acquire", value={"fence": "3"}).fence is None
    assert Op(process=0, type="ok", f="acquire", value=[1]).fence is None


def test_to_json_round_trips_through_op_from_json() -> None:
    op = Op(process=3, type="fail", f="release", key="k2", value={"fence": 4}, time=10,
            index=2, error="not-owner", worker=0, extra={"note": "kept"})
    assert op_from_json(json.loads(json.dumps(op.to_json()))) == op
    assert "error" not in Op(process=0, type="ok", f="x").to_json()


# -- pairing and ordering ---------------------------------------------------------------


def ops_of(*rows: tuple[Any, ...]) -> list[Op]:
    return [Op(process=p, type=t, f=f, key="k", time=i * 10, index=i)
            for i, (p, t, f) in enumerate(rows)]


def test_pair_ops_matches_by_process_and_f() -> None:
    ops = ops_of(
        (0, "invoke", "acquire"), (1, "invoke", "acquire"), (1, "fail", "acquire"),
        (0, "ok", "acquire"), (0, "event", "enter"),
        (0, "invoke", "write"), (0, "invoke", "renew"),  # a renew overlaps the write
        (0, "ok", "renew"), (0, "ok", "write"),
        (0, "event", "exit"), (0, "invoke", "release"),  # no completion: cut short
        ("nemesis", "invoke", "kill"), ("nemesis", "info", "kill"),
        (5, "ok", "acquire"),  # a completion without an invoke is ignored
    )
    pairs = list(pair_ops(ops))
    got = [(p.invoke.process, p.invoke.f, p.complete.index if p.complete else None, p.type)
           for p in pairs]
    assert got == [
        (0, "acquire", 3, "ok"), (1, "acquire", 2, "fail"), (0, "write", 8, "ok"),
        (0, "renew", 7, "ok"), (0, "release", None, "info"), ("nemesis", "kill", 12, "info"),
    ]


def test_pair_ops_with_retired_process_ids() -> None:
    # worker 0 with concurrency 2: an info acquire retires process 0, it continues as 2
    ops = ops_of((0, "invoke", "acquire"), (0, "info", "acquire"),
                 (2, "invoke", "acquire"), (2, "ok", "acquire"))
    assert [(p.invoke.process, p.type) for p in pair_ops(ops)] == [(0, "info"), (2, "ok")]


def test_sort_by_time_breaks_ties_by_index() -> None:
    a = Op(process=0, type="invoke", f="x", time=5, index=2)
    b = Op(process=1, type="invoke", f="x", time=5, index=1)
    c = Op(process=2, type="invoke", f="x", time=1, index=3)
    assert sort_by_time([a, b, c]) == [c, b, a]


@pytest.mark.parametrize("typ", ["ok", "fail", "info"])
def test_a_completion_without_an_open_invoke_is_malformed(tmp_path: Path, typ: str) -> None:
    text = (line(index=0) + line(index=1, type="ok", value={"fence": 1})
            + line(index=2, type=typ, f="release", value=None))
    with pytest.raises(HistoryError, match="no open invoke") as e:
        read_history(write(tmp_path, text))
    assert e.value.line == 3
    # a different process, or a second completion, is an orphan too
    for extra in (line(index=2, type=typ, process=7), line(index=2, type=typ)):
        with pytest.raises(HistoryError, match="no open invoke"):
            read_history(write(tmp_path, line(index=0) + line(index=1, type="ok") + extra))
    # the nemesis and events are not paired
    ok = line(index=0, process="nemesis", type="info", f="kill") + line(
        index=1, type="event", f="enter")
    assert len(read_history(write(tmp_path, ok))) == 2


# -- Jepsen's process rules (history.ProcessRules) -----------------------------------------


@pytest.mark.parametrize(("rows", "line_no", "message"), [
    # a renew sent while the acquire is still in flight
    ([dict(type="invoke"), dict(type="invoke", f="renew")], 2,
     "invoke renew of process 0 while another op of that process is in flight"),
    # anything of a process after its info: an invoke, or a late completion
    ([dict(type="invoke"), dict(type="info"), dict(type="invoke", f="release")], 3,
     "invoke release of process 0 after an info of that process"),
    ([dict(type="invoke"), dict(type="info"), dict(type="ok")], 3,
     "ok acquire of process 0 after an info"),
    # the completion of another f than the one in flight
    ([dict(type="invoke"), dict(type="ok", f="renew")], 2,
     "ok renew of process 0 with no open invoke"),
])
def test_process_rules_are_the_readers(tmp_path: Path, rows: list[dict[str, Any]],
                                       line_no: int, message: str) -> None:
    text = "".join(line(index=i, **r) for i, r in enumerate(rows))
    with pytest.raises(HistoryError, match=re.escape(message)) as e:
        read_history(write(tmp_path, text))
    assert e.value.line == line_no
    ops = [op_from_json({"index": i, "time": 0, "process": 0, "f": "acquire", **r})
           for i, r in enumerate(rows)]
    broken = validate_processes(ops)
    assert broken is not None and broken[0].index == line_no - 1
    assert message in broken[1]


def test_process_rules_let_through_what_jepsen_allows(tmp_path: Path) -> None:
    """Events (an exit recorded after the info that ended the section), the nemesis, other
    processes, and the retired process's successor id all go on."""
    rows = [dict(type="invoke"), dict(type="ok", value={"fence": 1}),
            dict(type="event", f="enter"),
            dict(process="nemesis", type="invoke", f="kill", key=None),
            dict(process=1, type="invoke"),
            dict(type="invoke", f="renew"), dict(type="info", f="renew"),
            dict(type="event", f="exit"),
            dict(process="nemesis", type="info", f="kill", key=None),
            dict(process=1, type="fail", error="busy"),
            dict(process=4, type="invoke", f="release"), dict(process=4, type="ok", f="release")]
    text = "".join(line(index=i, **r) for i, r in enumerate(rows))
    assert len(read_history(write(tmp_path, text))) == len(rows)
