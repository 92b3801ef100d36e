"""The Jepsen history.edn reader (our own small EDN reader)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from lockcheck.checker.formats.jepsen_edn import (
    Keyword,
    Symbol,
    parse_jepsen_edn,
    read_edn_forms,
    read_jepsen_edn,
)
from lockcheck.history import HistoryError

LOCK_HISTORY = """\
{:type :invoke, :f :acquire, :value nil, :process 0, :time 1000, :index 0}
{:type :invoke, :f :acquire, :value nil, :process 1, :time 1100, :index 1}
{:type :ok, :f :acquire, :value nil, :process 0, :time 2000, :index 2}
{:type :fail, :f :acquire, :value nil, :process 1, :time 2100, :index 3, :error :busy}
{:type :info, :f :start, :value nil, :process :nemesis, :time 2500, :index 4}
{:type :invoke, :f :release, :value nil, :process 0, :time 3000, :index 5}
{:type :info, :f :release, :value nil, :process 0, :time 4000, :index 6, :error [:timeout "t"]}
"""


def forms(text: str) -> list[object]:
    return [v for _, v in read_edn_forms(text)]


def test_scalars() -> None:
    assert forms('nil true false 42 -7 3N 2.5 1e3 -1.5M 1/4 "s" :k :ns/k sym') == [
        None,
        True,
        False,
        42,
        -7,
        3,
        2.5,
        1000.0,
        -1.5,
        0.25,
        "s",
        Keyword("k"),
        Keyword("ns/k"),
        Symbol("sym"),
    ]


def test_strings_and_chars() -> None:
    assert forms(r'"a\"b\\c\n\t\u00e9"') == ['a"b\\c\n\té']
    assert forms(r"\a \newline \space \u0041") == ["a", "\n", " ", "A"]
    assert forms('"two\nlines" :after') == ["two\nlines", Keyword("after")]


def test_collections_comments_discard_and_tags() -> None:
    text = """
    ; a comment
    {:a [1 2 (3 4)], :b #{5}, "s" {:n nil}} #_ {:skipped 1}
    #inst "2024-01-01T00:00:00Z"
    #jepsen.history.Op{:type :ok}
    """
    assert forms(text) == [
        {Keyword("a"): [1, 2, [3, 4]], Keyword("b"): [5], "s": {Keyword("n"): None}},
        "2024-01-01T00:00:00Z",
        {Keyword("type"): Keyword("ok")},
    ]


def test_form_lines() -> None:
    assert [line for line, _ in read_edn_forms('1\n"a\nb"\n\n[\n2]')] == [1, 2, 5]


def test_lock_history_as_sequence_of_maps() -> None:
    ops = parse_jepsen_edn(LOCK_HISTORY)
    assert [(o.process, o.type, o.f, o.key) for o in ops[:3]] == [
        (0, "invoke", "acquire", "lock"),
        (1, "invoke", "acquire", "lock"),
        (0, "ok", "acquire", "lock"),
    ]
    assert ops[3].error == "busy"
    assert ops[4].process == "nemesis" and ops[4].key is None
    assert ops[6].error == "['timeout', 't']"
    assert [o.time for o in ops] == [1000, 1100, 2000, 2100, 2500, 3000, 4000]
    assert [o.index for o in ops] == list(range(7))
    assert ops[2].extra["line"] == 3


def test_vector_of_maps_with_lines() -> None:
    text = (
        "[{:type :invoke, :f :read, :process 0, :value nil}\n"
        " {:type :ok, :f :read, :process 0, :value 3}]"
    )
    ops = parse_jepsen_edn(text)
    assert [(o.type, o.value, o.time) for o in ops] == [("invoke", None, 0), ("ok", 3, 1)]
    assert [o.extra["line"] for o in ops] == [1, 2]


def test_values_keys_and_fences() -> None:
    text = """
    {:type :invoke, :f :cas, :value [1 2], :process 0}
    {:type :invoke, :f :cas, :value ["k" [1 2]], :process 1}
    {:type :invoke, :f :write, :value [:x 4], :process 2}
    {:type :invoke, :f :acquire, :value nil, :process 3}
    {:type :ok, :f :acquire, :value 7, :process 3}
    {:type :invoke, :f :acquire, :value ["lk" {:ttl-ms 500}], :process 4}
    {:type :invoke, :f :release, :value {:fence 3}, :process 5}
    """
    ops = parse_jepsen_edn(text)
    assert (ops[0].key, ops[0].value) == (None, [1, 2])
    assert (ops[1].key, ops[1].value) == ("k", [1, 2])
    assert (ops[2].key, ops[2].value) == ("x", 4)
    assert (ops[4].key, ops[4].value, ops[4].fence) == ("lock", {"fence": 7}, 7)
    assert (ops[5].key, ops[5].value) == ("lk", {"ttl_ms": 500})
    assert ops[6].fence == 3


def test_records_are_read_as_maps() -> None:
    text = "#jepsen.history.Op{:index 0, :time 5, :type :invoke, :process 0, :f :read, :value nil}"
    (op,) = parse_jepsen_edn(text)
    assert (op.type, op.time, op.extra["jepsen_index"]) == ("invoke", 5, 0)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('{:type :ok}\n{:type :invoke, :f "x"', 2, "not closed"),
        ("{:a 1}\n\n[1 2)", 3, "closes"),
        ("{:a}", 1, "even number"),
        ("{:type :ok, :f :read, :process 0}\n]", 2, "unexpected ']'"),
        ('{:type :ok, :f :read, :process 0}\n"open', 2, "unexpected character"),
        ("{:f :read, :process 0}", 1, ":type"),
        ("{:type :ok, :process 0}", 1, ":f"),
        ("{:type :done, :f :read, :process 0}", 1, "unknown :type"),
        ("{:type :ok, :f :read, :process 0, :time 1.5}", 1, ":time"),
        ("{:type :ok, :f :read, :process true}", 1, ":process"),
        ("1\n2\n[3]", 1, "op map"),
        ('{:type :ok, :f :read, :process 0, :value "\\q"}', 1, "bad escape"),
        ("{:type :ok, :f :read, :process 0, :value 12abc}", 1, "bad number"),
        ("{:type :ok, :f :read, :process 0} #_", 1, "end of input"),
    ],
)
def test_malformed_input_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(HistoryError) as e:
        parse_jepsen_edn(text, "h.edn")
    assert e.value.line == line
    assert e.value.path == "h.edn"
    assert words in str(e.value)


def test_truncated_input_allowed() -> None:
    text = "[{:type :invoke, :f :read, :process 0, :value nil}\n{:type :ok, :f :re"
    with pytest.raises(HistoryError):
        parse_jepsen_edn(text)
    ops = parse_jepsen_edn(text, allow_truncated=True)
    assert len(ops) == 1
    seq = LOCK_HISTORY + "{:type :invoke, :f"
    assert len(parse_jepsen_edn(seq, allow_truncated=True)) == 7


def test_read_file_errors(tmp_path: Path) -> None:
    with pytest.raises(HistoryError):
        read_jepsen_edn(tmp_path / "missing.edn")
    bad = tmp_path / "bad.edn"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(HistoryError) as e:
        read_jepsen_edn(bad)
    assert "UTF-8" in str(e.value)
    good = tmp_path / "history.edn"
    good.write_text(LOCK_HISTORY)
    assert len(read_jepsen_edn(good)) == 7


def test_agrees_with_edn_format_when_installed() -> None:
    edn_format = pytest.importorskip("edn_format")
    text = '[{:a 1, :b [2 3.5 "x\\n"], :c nil, :d true, :e :kw} (1 2) #{4} \\z]'
    ours = forms(text)[0]
    theirs = edn_format.loads(text)

    def norm(v: object) -> object:
        if isinstance(v, edn_format.Keyword):
            return Keyword(v.name)
        if isinstance(v, edn_format.Symbol):
            return Symbol(v.name)
        if isinstance(v, Mapping):
            return {norm(k): norm(x) for k, x in v.items()}
        if isinstance(v, str):
            return str(v)
        if isinstance(v, Iterable):
            return [norm(x) for x in v]
        return v

    assert ours == norm(theirs)
