"""`check_external`: `lockcheck check PATH --model M --format F`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lockcheck.checker.external import check_external, infer_format
from lockcheck.errors import BadInput
from lockcheck.history import HistoryError, Op

from .histories import H

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "porcupine"
NO_CORPUS = (f"Porcupine's test corpus is not beside this clone ({CORPUS}); "
             "it ships in the project's shared/ folder only")
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)


def write_jsonl(path: Path, ops: list[Op]) -> Path:
    path.write_text("".join(json.dumps(op.to_json()) + "\n" for op in ops))
    return path


def run(path: Path, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "model": None,
        "fmt": None,
        "timeout": 30.0,
        "html_dir": None,
        "allow_truncated": False,
    }
    args.update(kw)
    return check_external(path, **args)


GOOD = (
    H()
    .acquire(0, "k", 1, 10, 20)
    .renew(0, "k", 1, 30, 40)
    .release(0, "k", 1, 50, 60)
    .acquire(1, "k", 2, 55, 70)
    .ops()
)
BAD = H().acquire(0, "k", 5, 10, 20).acquire(1, "k", 4, 30, 40).ops()


def test_lockcheck_history_defaults_to_fenced_mutex(tmp_path: Path) -> None:
    r = run(write_jsonl(tmp_path / "history.jsonl", GOOD))
    assert r["valid"] is True
    assert (r["format"], r["model"]) == ("lockcheck", "fenced-mutex")
    assert r["details"]["path"] == "fast"
    assert r["ops"] == len(GOOD)
    assert r["elapsed_s"] >= 0
    assert r["path"].endswith("history.jsonl")


def test_lockcheck_history_illegal(tmp_path: Path) -> None:
    r = run(write_jsonl(tmp_path / "history.jsonl", BAD))
    assert r["valid"] is False
    assert r["details"]["key"] == "k"
    assert "summary" in r


def test_mutex_model_on_lockcheck_history(tmp_path: Path) -> None:
    r = run(write_jsonl(tmp_path / "h.jsonl", GOOD), model="mutex")
    assert r["valid"] is True
    assert r["details"]["path"] == "fast"


@pytest.mark.parametrize("name", ["lease-safety", "linearizable", "mutual-exclusion", "fencing"])
def test_lockcheck_checkers_by_name(tmp_path: Path, name: str) -> None:
    r = run(write_jsonl(tmp_path / "history.jsonl", GOOD), model=name)
    assert r["model"] == name
    assert r["valid"] in (True, False, "unknown")
    assert r["details"]["checker"] == name
    if name in ("lease-safety", "linearizable"):
        assert r["valid"] is True


def test_lease_safety_by_name_finds_violation(tmp_path: Path) -> None:
    r = run(write_jsonl(tmp_path / "history.jsonl", BAD), model="lease-safety")
    assert r["valid"] is False
    assert r["details"]["violation_count"] == 1


def test_run_directory(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "history.jsonl", GOOD)
    (tmp_path / "test.json").write_text(json.dumps({"options": {"ttl_ms": 1000}}))
    r = run(tmp_path)
    assert r["valid"] is True
    # the one resolver `check` uses for every format (results/store.py)
    with pytest.raises(BadInput, match="nothing-here: no such file or directory"):
        run(tmp_path / "nothing-here")
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    with pytest.raises(BadInput, match="empty-dir: not a run directory"):
        run(empty)


def test_truncated_lockcheck_history(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "history.jsonl", GOOD)
    p.write_text(p.read_text() + '{"index": 99, "ti')
    with pytest.raises(HistoryError) as e:
        run(p)
    assert e.value.line == len(GOOD) + 1
    r = run(p, allow_truncated=True)
    assert r["valid"] is True
    assert r["truncated_line_ignored"] == len(GOOD) + 1


def test_malformed_lockcheck_history(tmp_path: Path) -> None:
    p = tmp_path / "history.jsonl"
    p.write_text('{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "acquire"}\n{oops\n')
    with pytest.raises(HistoryError) as e:
        run(p)
    assert e.value.line == 2


def test_bad_model_and_format(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "history.jsonl", GOOD)
    with pytest.raises(BadInput, match="unknown model"):
        run(p, model="queue")
    with pytest.raises(BadInput, match="does not apply"):
        run(p, model="kv")
    with pytest.raises(BadInput, match="unknown format"):
        run(p, fmt="xml")


def test_format_inference(tmp_path: Path) -> None:
    cases = {
        "a.jsonl": "",
        "a.edn": "",
        "etcd_001.log": "",
        "log1": "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n",
        "log2": '{:process 0, :type :invoke, :f :get, :key "1", :value nil}\n',
        "log3": '{"index": 0}\n',
        "log4": "\n\n{:type :invoke}\n",
    }
    want = ["lockcheck", "jepsen-edn", "porcupine-etcd", "porcupine-etcd", "porcupine-kv"]
    want += ["lockcheck", "jepsen-edn"]
    for (name, text), fmt in zip(cases.items(), want, strict=True):
        p = tmp_path / name
        p.write_text(text)
        assert infer_format(p) == fmt, name
    (tmp_path / "empty").write_text("")
    with pytest.raises(HistoryError, match="empty"):
        infer_format(tmp_path / "empty")
    (tmp_path / "odd").write_text("hello\n")
    with pytest.raises(HistoryError, match="format"):
        infer_format(tmp_path / "odd")


EDN_LOCK = """\
{:type :invoke, :f :acquire, :value nil, :process 0, :time 10}
{:type :ok, :f :acquire, :value nil, :process 0, :time 20}
{:type :invoke, :f :acquire, :value nil, :process 1, :time 25}
{:type :invoke, :f :release, :value nil, :process 0, :time 30}
{:type :ok, :f :release, :value nil, :process 0, :time 40}
{:type :ok, :f :acquire, :value nil, :process 1, :time 50}
"""


def test_jepsen_edn_mutex(tmp_path: Path) -> None:
    p = tmp_path / "history.edn"
    p.write_text(EDN_LOCK)
    r = run(p)
    assert (r["format"], r["model"], r["valid"]) == ("jepsen-edn", "mutex", True)
    # process 1 acquires before process 0's release began: two holders
    p.write_text(EDN_LOCK.replace(":time 50", ":time 28"))
    assert run(p)["valid"] is False


EDN_CAS = """\
[{:type :invoke, :f :write, :value 1, :process 0, :time 1}
 {:type :ok, :f :write, :value 1, :process 0, :time 2}
 {:type :invoke, :f :cas, :value [1 2], :process 1, :time 3}
 {:type :info, :f :cas, :value [1 2], :process 1, :time 4}
 {:type :invoke, :f :cas, :value [1 3], :process 2, :time 5}
 {:type :fail, :f :cas, :value [1 3], :process 2, :time 6}
 {:type :invoke, :f :read, :value nil, :process 0, :time 7}
 {:type :ok, :f :read, :value READ, :process 0, :time 8}
 {:type :info, :f :start, :value nil, :process :nemesis, :time 9}]
"""


@pytest.mark.parametrize(("read", "valid"), [("1", True), ("2", True), ("3", False)])
def test_jepsen_edn_cas_register(tmp_path: Path, read: str, valid: bool) -> None:
    p = tmp_path / "history.edn"
    p.write_text(EDN_CAS.replace("READ", read))
    r = run(p)
    assert (r["model"], r["valid"]) == ("cas-register", valid)
    if not valid:
        assert "not linearizable" in r["details"]["explanation"]


def test_jepsen_edn_independent_keys(tmp_path: Path) -> None:
    text = """\
{:type :invoke, :f :write, :value [:a 1], :process 0, :time 1}
{:type :ok, :f :write, :value [:a 1], :process 0, :time 2}
{:type :invoke, :f :read, :value [:b nil], :process 1, :time 3}
{:type :ok, :f :read, :value [:b nil], :process 1, :time 4}
{:type :invoke, :f :read, :value [:a nil], :process 1, :time 5}
{:type :ok, :f :read, :value [:a 1], :process 1, :time 6}
"""
    p = tmp_path / "history.edn"
    p.write_text(text)
    r = run(p, model="register")
    assert r["valid"] is True
    assert r["details"]["partitions"] == 2


def test_jepsen_edn_bad_cas_value(tmp_path: Path) -> None:
    p = tmp_path / "history.edn"
    p.write_text("{:type :invoke, :f :cas, :value 5, :process 0}\n")
    with pytest.raises(HistoryError) as e:
        run(p, model="cas-register")
    assert e.value.line == 1 and e.value.path.endswith("history.edn")


def test_jepsen_edn_malformed(tmp_path: Path) -> None:
    p = tmp_path / "history.edn"
    p.write_text(EDN_LOCK + "{:type :ok, :f")
    with pytest.raises(HistoryError) as e:
        run(p)
    assert e.value.line == 7
    assert run(p, allow_truncated=True)["valid"] is True


def _hard_register_history(n: int) -> str:
    """n crashed writes (each may take effect once, at any later time), then reads of 1,
    2 and 1 again: impossible, but only after trying the subsets of the other writes.
    (A process issues nothing after its info, so crashed ops are of distinct processes.)"""
    lines = []
    for p in range(n):
        lines += [f"{{:type :invoke, :f :write, :value {p + 1}, :process {p}, :time {1 + p}}}",
                  f"{{:type :info, :f :write, :value {p + 1}, :process {p}, :time {2 + p}}}"]
    for i, v in enumerate((1, 2, 1)):
        q, t = 100 + i, 100 + 10 * i
        lines += [f"{{:type :invoke, :f :read, :value nil, :process {q}, :time {t}}}",
                  f"{{:type :ok, :f :read, :value {v}, :process {q}, :time {t + 1}}}"]
    return "\n".join(lines) + "\n"


def test_timeout_gives_unknown(tmp_path: Path) -> None:
    p = tmp_path / "history.edn"
    p.write_text(_hard_register_history(22))
    r = run(p, timeout=0.05)
    assert (r["model"], r["valid"]) == ("cas-register", "unknown")
    assert "timeout" in r["details"]["note"]
    p.write_text(_hard_register_history(6))  # small enough to decide: not linearizable
    assert run(p, timeout=10)["valid"] is False


def test_html_for_illegal_history(tmp_path: Path) -> None:
    r = run(write_jsonl(tmp_path / "history.jsonl", BAD), html_dir=tmp_path / "html")
    assert r["valid"] is False
    html = r["details"].get("html") or []
    assert html or "html_note" in r["details"]["illegal"][0]
    for f in html:
        assert Path(f).is_file()


@needs_corpus
@pytest.mark.parametrize(
    ("name", "valid"),
    [("jepsen/etcd_000.log", False), ("jepsen/etcd_101.log", True)],
)
def test_porcupine_etcd(tmp_path: Path, name: str, valid: bool) -> None:
    r = run(CORPUS / name)
    assert (r["format"], r["model"], r["valid"]) == ("porcupine-etcd", "cas-register", valid)
    # content sniffing, when the name says nothing
    copy = tmp_path / "renamed.txt"
    shutil.copy(CORPUS / name, copy)
    assert run(copy)["format"] == "porcupine-etcd"


@needs_corpus
@pytest.mark.parametrize(("name", "valid"), [("kv/c01-ok.txt", True), ("kv/c01-bad.txt", False)])
def test_porcupine_kv(name: str, valid: bool) -> None:
    r = run(CORPUS / name)
    assert (r["format"], r["model"], r["valid"]) == ("porcupine-kv", "kv", valid)


def test_porcupine_logs_malformed(tmp_path: Path) -> None:
    p = tmp_path / "etcd_001.log"
    p.write_text("INFO  jepsen.util - 0\t:invoke\t:read\tnil\ngarbage\n")
    with pytest.raises(HistoryError) as e:
        run(p)
    assert e.value.line == 2
    with pytest.raises(BadInput):
        run(p, model="mutex")


def test_nothing_checked_is_unknown_in_every_format(tmp_path: Path) -> None:
    empty = tmp_path / "etcd_999.log"
    empty.write_text("")
    r = run(empty, fmt="porcupine-etcd")
    assert r["valid"] == "unknown" and "empty" in r["not_checked"]
    reads = H().op(0, "invoke", "read", "k", None, 1).op(0, "ok", "read", "k", 3, 2).ops()
    r = run(write_jsonl(tmp_path / "history.jsonl", reads), model="fenced-mutex")
    assert r["valid"] == "unknown" and "read (2)" in r["not_checked"]
    # a lock model on a history of locks and something else drops that kind: unknown
    mixed = GOOD + H().op(7, "invoke", "cas", "k", [1, 2], 90).op(7, "ok", "cas", "k", None,
                                                                   95).ops()
    p = tmp_path / "mixed.edn"
    p.write_text("\n".join(
        f"{{:type :{o.type}, :f :{o.f}, :process {o.process}, :time {o.time}}}" for o in mixed))
    r = run(p, model="mutex")
    assert r["valid"] == "unknown" and "cas (2)" in r["not_checked"]
