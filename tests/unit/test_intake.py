"""The intake on real pipes: workers' lines reach the history whole, indexed, in each
worker's order, however the pipe cuts them; a line not in the Recorder's layout is
dropped and counted; observers see the ops they want whole; the history is on disk
as lines arrive, not at the end."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockcheck.history import HistoryWriter, read_history
from lockcheck.intake import GATHER_S, QUIET_GATHER_S, Intake, Source, in_layout
from lockcheck.nemesis.client_pause import Holders
from lockcheck.results.progress import LiveStats
from lockcheck.runner import history_intake
from lockcheck.workloads.worker import Recorder
from tests.conftest import wait_for


def recorded(worker: int, n: int) -> bytes:
    buf = io.StringIO()
    rec = Recorder(buf, 0, worker)
    for i in range(n):
        lease = {"fence": i, "lease": f"w{worker}-{i}"}
        rec(worker, "invoke", "acquire", "k0", {"ttl_ms": 100})
        rec(worker, "ok", "acquire", "k0", lease)
        rec(worker, "event", "enter", "k0", lease)
        rec(worker, "event", "exit", "k0", {**lease, "reason": "done"})
    return buf.getvalue().encode()


def setup(tmp_path: Path) -> tuple[Intake, HistoryWriter, list[dict[str, Any]]]:
    writer = HistoryWriter(tmp_path / "history.jsonl")
    seen: list[dict[str, Any]] = []
    intake = Intake(writer, [seen.append], wants=[b'"type": "event"'])
    intake.start()
    return intake, writer, seen


def feed(data: bytes, cuts: list[int]) -> tuple[int, threading.Thread]:
    """A pipe that gets `data` in pieces cut at `cuts`; returns its read end."""
    r, w = os.pipe()

    def write() -> None:
        last = 0
        for c in [*sorted(cuts), len(data)]:
            os.write(w, data[last:c])
            last = c
            time.sleep(0.001)
        os.close(w)

    t = threading.Thread(target=write)
    t.start()
    return r, t


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 2000), max_size=12), st.integers(1, 3))
def test_lines_survive_any_cut_and_keep_each_workers_order(tmp_path_factory: Any,
                                                           cuts: list[int],
                                                           workers: int) -> None:
    tmp = tmp_path_factory.mktemp("intake")
    intake, writer, seen = setup(tmp)
    threads, sources = [], []
    for w in range(workers):
        data = recorded(w, 20)
        fd, t = feed(data, [c % len(data) for c in cuts])
        sources.append(intake.add(f"w{w}", os.fdopen(fd, "rb")))
        threads.append(t)
    for t in threads:
        t.join()
    assert all(s.wait_ended(5) for s in sources)
    intake.close()
    writer.close()
    ops = read_history(tmp / "history.jsonl")
    assert [o.index for o in ops] == list(range(len(ops)))
    assert len(ops) == workers * 80 and all(s.bad_lines == 0 for s in sources)
    events = [o for o in ops if o.type == "event"]
    assert seen == [o.to_json() for o in events], "events whole, with their index"
    for w in range(workers):
        mine = [o for o in ops if o.worker == w]
        assert [o.value["fence"] for o in mine if o.f == "acquire" and o.type == "ok"] == \
            list(range(20))


def test_a_line_out_of_layout_is_dropped_and_counted(tmp_path: Path) -> None:
    intake, writer, seen = setup(tmp_path)
    good = recorded(0, 1)
    junk = b'hello from a library that printed to stdout\n{"not": "ours"}\n'
    fd, t = feed(good + junk + good + b'{"time": 5, "process": 0, "ty', [])
    src = intake.add("w0", os.fdopen(fd, "rb"))
    t.join()
    assert src.wait_ended(5)
    intake.close()
    writer.close()
    assert src.bad_lines == 3  # two junk lines, and the last one cut off mid-line
    ops = read_history(tmp_path / "history.jsonl")
    assert len(ops) == 8 and len(seen) == 4


def test_the_lines_a_dead_worker_had_not_sent_come_from_its_spool_file(
        tmp_path: Path) -> None:
    """The pipe brought five lines and the start of a sixth; the worker's spool file
    holds lines from the fourth on (lines already sent may stay in front of it): the
    history gets each line once, in order, the cut-off one whole."""
    lines = recorded(2, 3).splitlines(keepends=True)  # twelve lines
    keep = tmp_path / "w.unsent"
    body = b"".join(lines[3:])
    keep.write_bytes(len(body).to_bytes(8, sys.byteorder) + body + b'{"time": 9, "proc')
    intake, writer, _ = setup(tmp_path)
    fd, t = feed(b"".join(lines[:5]) + lines[5][:10], [])
    src = intake.add("w2", os.fdopen(fd, "rb"), str(keep))
    t.join()
    assert src.wait_ended(5)
    intake.close()
    writer.close()
    got = (tmp_path / "history.jsonl").read_bytes().splitlines()
    assert [json.loads(x)["index"] for x in got] == list(range(12))
    assert [{k: v for k, v in json.loads(x).items() if k != "index"} for x in got] \
        == [json.loads(x) for x in lines]
    assert (src.bad_lines, src.unsent_lines) == (0, 7)
    assert not keep.exists()


def test_a_print_after_the_last_line_sent_does_not_hide_it(tmp_path: Path) -> None:
    """A client library's print may be the last thing the pipe brought: the lines taken
    from the spool file still start after the last op line, none twice."""
    lines = recorded(1, 2).splitlines(keepends=True)  # eight lines
    keep = tmp_path / "w.unsent"
    body = b"".join(lines[2:])
    keep.write_bytes(len(body).to_bytes(8, sys.byteorder) + body)
    r, w = os.pipe()
    os.close(w)
    with os.fdopen(r, "rb") as stream:
        src = Source("w1", stream, str(keep))
        src.block(lines[0] + lines[1] + lines[2] + lines[3] + b"a library said hello\n")
        assert src.unsent() == b"".join(lines[4:])


def test_a_worker_killed_with_lines_in_its_spool_loses_none(tmp_path: Path) -> None:
    """A worker's Recorder keeps what it has not sent in a file; killed before it sends
    them, its lines still reach the history, through the intake."""
    pytest.importorskip("lockcheck._crecord", reason="the compiled recorder was not built")
    keep = tmp_path / "w.unsent"
    code = ("import io, os, sys\n"
            "from lockcheck.workloads.worker import Recorder\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "out = io.BufferedWriter(io.FileIO(1, 'w', closefd=False))\n"
            "rec = Recorder(out, 0, 4, prompt=False, keep=fd)\n"
            "rec(4, 'invoke', 'acquire', 'k0', {'ttl_ms': 100})\n"
            "rec(4, 'fail', 'acquire', 'k0', None, 'busy')\n"
            "rec(4, 'invoke', 'acquire', 'k1', {'ttl_ms': 100})\n"
            "rec.flush()\n"
            "rec(4, 'ok', 'acquire', 'k1', {'fence': 1})\n"
            "rec(4, 'invoke', 'release', 'k1', {'fence': 1})\n"
            "os.kill(os.getpid(), 9)\n")
    intake, writer, _ = setup(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", code, str(keep)], stdout=subprocess.PIPE)
    assert p.stdout is not None
    src = intake.add("w4", p.stdout, str(keep))
    assert p.wait(30) == -9
    assert src.wait_ended(5)
    intake.close()
    writer.close()
    ops = read_history(tmp_path / "history.jsonl")
    assert [(op.type, op.f, op.key) for op in ops] == [
        ("invoke", "acquire", "k0"), ("fail", "acquire", "k0"), ("invoke", "acquire", "k1"),
        ("ok", "acquire", "k1"), ("invoke", "release", "k1")]
    assert src.unsent_lines == 2 and not keep.exists()


def test_lines_are_on_disk_as_they_arrive(tmp_path: Path) -> None:
    intake, writer, _ = setup(tmp_path)
    r, w = os.pipe()
    src = intake.add("w0", os.fdopen(r, "rb"))
    os.write(w, recorded(0, 1))
    deadline = time.monotonic() + 5
    while len((tmp_path / "history.jsonl").read_text().splitlines()) < 4:
        assert time.monotonic() < deadline, "the lines never reached the file"
        time.sleep(0.005)
    os.close(w)
    assert src.wait_ended(5)
    intake.close()
    writer.close()


def test_only_whole_lines_in_the_recorder_layout_are_taken() -> None:
    line = recorded(3, 1).splitlines(keepends=True)[1]
    assert in_layout(line) and json.loads(line)["worker"] == 3
    assert not in_layout(line.rstrip(b"\n"))  # not complete
    assert not in_layout(b'{"index": 1, "time": 1}\n')
    assert not in_layout(b"hello\n")


def run_through(tmp_path: Path, data: bytes,
                count: dict[str, int] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """`data` through an intake in one piece; the source, and what the observer saw."""
    writer = HistoryWriter(tmp_path / "history.jsonl")
    seen: list[dict[str, Any]] = []

    def counted(by_type: dict[str, int]) -> None:
        for t, n in by_type.items():
            assert count is not None
            count[t] = count.get(t, 0) + n

    intake = Intake(writer, [seen.append], wants=[b'"type": "event"'],
                    count=counted if count is not None else None)
    intake.start()
    fd, t = feed(data, [])
    src = intake.add("w0", os.fdopen(fd, "rb"))
    t.join()
    assert src.wait_ended(5)
    intake.close()
    writer.close()
    return src, seen


def test_a_wanted_line_that_is_not_json_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    good = recorded(0, 2)
    broken = b'{"time": 7, "process": 0, "type": "event", "f": "enter", "key": oops}\n'
    src, seen = run_through(tmp_path, good[:len(good) // 2] + broken + good[len(good) // 2:])
    assert src.bad_lines == 1
    ops = read_history(tmp_path / "history.jsonl")
    assert [o.index for o in ops] == list(range(8)) and len(seen) == 4
    assert [o["index"] for o in seen] == [o.index for o in ops if o.type == "event"]


def test_a_line_that_is_not_ascii_is_dropped(tmp_path: Path) -> None:
    odd = '{"time": 7, "process": 0, "type": "ok", "f": "acquire", "key": "é"}\n'.encode()
    src, _ = run_through(tmp_path, recorded(0, 1) + odd + recorded(0, 1))
    assert src.bad_lines == 1 and len(read_history(tmp_path / "history.jsonl")) == 8


def test_the_lines_not_read_whole_are_counted_by_type(tmp_path: Path) -> None:
    count: dict[str, int] = {}
    _, seen = run_through(tmp_path, recorded(0, 5), count)
    assert count == {"invoke": 5, "ok": 5} and len(seen) == 10


def through(tmp_path: Path, name: str, data: bytes, rows: bool,
            writes: bool = True) -> tuple[Any, Any, Any]:
    """`data` through the run's intake (events read as rows) or through one that reads
    them with the JSON decoder; the source, the live counts and the holders."""
    writer = HistoryWriter(tmp_path / name)
    stats, holders = LiveStats(), Holders()
    if rows:
        intake = history_intake(writer, stats, holders, writes=writes)
    else:
        def observe(op: dict[str, Any]) -> None:
            stats.observe(op)
            holders.observe(op)
        intake = Intake(writer, [observe], wants=[b'"type": "event"', b'"f": "write"'],
                        count=stats.count)
    intake.start()
    fd, t = feed(data, [len(data) // 3])
    src = intake.add("w0", os.fdopen(fd, "rb"))
    t.join()
    assert src.wait_ended(5)
    intake.close()
    writer.close()
    return src, stats, holders


def test_events_read_as_rows_tell_the_observers_what_the_decoder_tells_them(
        tmp_path: Path) -> None:
    buf = io.StringIO()
    rec = Recorder(buf, 0, 1)
    for i in range(30):
        p, key = i % 4, f"k{i % 3}" if i % 7 else 'k"\u00e9'  # an escaped key: decoded
        lease = {"fence": i, "lease": f"t{i}", "granted_by": ["n1", "n2"]}
        rec(p, "invoke", "acquire", key, {"ttl_ms": 100})
        rec(p, "ok", "acquire", key, lease)
        rec(p, "event", "enter", key, lease)
        if i % 5:
            rec(p, "event", "exit", key, {**lease, "reason": "done"})
    for p, f in ((0, "enter"), (1, "enter"), (0, "exit"), (1, "exit")):  # two at once
        rec(p, "event", f, "kx", {"fence": 99, "lease": f"x{p}"})
    broken = b'{"time": 7, "process": 0, "type": "event", "f": "exit", "key": "k0", ' \
             b'"value": {"fence": ], "worker": 1}\n'
    data = buf.getvalue().encode()
    cut = data.index(b"\n", len(data) // 2) + 1
    data = data[:cut] + broken + data[cut:]
    a_src, a_stats, a_holders = through(tmp_path, "rows.jsonl", data, rows=True)
    b_src, b_stats, b_holders = through(tmp_path, "decoded.jsonl", data, rows=False)
    assert a_src.bad_lines == b_src.bad_lines == 1, "the event that is not JSON is dropped"
    assert (tmp_path / "rows.jsonl").read_bytes() == (tmp_path / "decoded.jsonl").read_bytes()
    assert (a_stats.ops, a_stats.by_type, a_stats.overlaps) == \
        (b_stats.ops, b_stats.by_type, b_stats.overlaps)
    assert a_stats.overlaps == 1 and a_stats.by_type["event"] == 30 + 24 + 4
    assert a_holders.now() == b_holders.now() and len(a_holders.now()) == 2
    assert {h.granted_by for h in a_holders.now()} == {("n1", "n2")}
    assert [a_holders.taken_over(h) for h in b_holders.now()] == \
        [b_holders.taken_over(h) for h in b_holders.now()]
    assert any(a_holders.taken_over(h) for h in b_holders.now())


def registered(intake: Intake, n: int) -> None:
    """Until the intake's thread watches `n` pipes (and its own wake-up pipe)."""
    wait_for(lambda: len(intake.sel.get_map()) == n + 1, 10, f"{n} pipes registered")


def gathering(intake: Intake) -> None:
    """Until the intake's thread waits in a gather (on its hurry event): the state a
    fixed sleep only made likely."""
    def waits() -> bool:
        frame = sys._current_frames().get(intake.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_locals.get("self") is intake._hurried:
                return True
            frame = frame.f_back
        return False

    wait_for(waits, 10, "the intake to gather")


def test_hurry_ends_a_long_gather(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "history.jsonl")
    intake = Intake(writer, [], wants=[], gather_s=30.0, hurried_s=0.001)
    intake.start()
    quiet_r, quiet_w = os.pipe()  # a second worker that writes nothing: the intake gathers
    r, w = os.pipe()
    intake.add("w1", os.fdopen(quiet_r, "rb"))
    src = intake.add("w0", os.fdopen(r, "rb"))
    registered(intake, 2)
    os.write(w, recorded(0, 1))
    gathering(intake)  # its 30 s gather
    intake.hurry()
    deadline = time.monotonic() + 5
    while len(writer) < 4:
        assert time.monotonic() < deadline, "the gather was not cut short"
        time.sleep(0.01)
    os.write(w, recorded(0, 1))
    deadline = time.monotonic() + 5
    while len(writer) < 8:
        assert time.monotonic() < deadline, "the next gather was not the hurried one"
        time.sleep(0.01)
    os.close(w)
    os.close(quiet_w)
    assert src.wait_ended(5)
    intake.close()
    assert not intake.is_alive()
    writer.close()


def test_close_while_the_last_worker_ends_in_a_gather_ends_the_thread(tmp_path: Path) -> None:
    """The close asked during a gather, the last pipe ending in the same wake-up: the
    intake ends then (once, it deadlocked on its own lock and `close` waited its whole
    timeout, the thread left running)."""
    writer = HistoryWriter(tmp_path / "history.jsonl")
    # a gather long enough to be seen under way on a loaded machine, shorter than close's
    intake = Intake(writer, [], wants=[], gather_s=2.0)
    intake.start()
    (r0, w0), (r1, w1) = os.pipe(), os.pipe()
    intake.add("w0", os.fdopen(r0, "rb"))
    intake.add("w1", os.fdopen(r1, "rb"))
    registered(intake, 2)
    os.write(w0, recorded(0, 1))  # one of two ready: the intake gathers 2 s
    gathering(intake)
    os.close(w0)
    os.close(w1)
    closer = threading.Thread(target=intake.close, kwargs={"timeout": 5.0})
    closer.start()
    closer.join(10)
    assert not intake.is_alive(), "the intake's thread did not end at close"
    assert len(writer) == 4
    writer.close()


@pytest.mark.parametrize("prompt", [False, True])
def test_the_runs_intake_gathers_long_until_a_fault_asks_who_holds(tmp_path: Path,
                                                                     prompt: bool) -> None:
    holders = Holders()
    intake = history_intake(HistoryWriter(tmp_path / "h.jsonl"), LiveStats(), holders, prompt)
    assert intake.gather_s == (0.0 if prompt else QUIET_GATHER_S)
    holders.next_exit(0.01)
    assert intake.gather_s == (0.0 if prompt else GATHER_S)
    holders.now()
    assert intake.gather_s == (0.0 if prompt else GATHER_S)


def test_the_runs_intake_drops_a_line_out_of_layout_too(tmp_path: Path) -> None:
    """The one-pass scan of the run's intake leaves such a block to the line-by-line
    path."""
    odd = ('{"time": 7, "process": 0, "type": "ok", "f": "acquire", "key": "\u00e9", '
           '"value": null, "worker": 0}\n').encode()
    for i, bad in enumerate((odd, b"hello from a library\n")):
        src, stats, _ = through(tmp_path, f"h{i}.jsonl", recorded(0, 1) + bad + recorded(0, 1),
                                rows=True)
        assert src.bad_lines == 1 and len(read_history(tmp_path / f"h{i}.jsonl")) == 8
        assert stats.by_type == {"invoke": 2, "ok": 2, "event": 4}


@pytest.mark.parametrize("writes", [True, False])
def test_resource_writes_reach_the_live_counts_when_the_workload_has_them(
        tmp_path: Path, writes: bool) -> None:
    """A stale write the resource accepted shows in the progress line's violations; a
    workload without a resource has no writes, and its intake does not look for them."""
    stale = (b'{"time": 8, "process": 0, "type": "invoke", "f": "write", "key": "k0", '
             b'"value": {"fence": 2}, "worker": 0}\n'
             b'{"time": 9, "process": 0, "type": "ok", "f": "write", "key": "k0", '
             b'"value": {"fence": 2, "accepted": true, "max_fence": 3}, "worker": 0}\n')
    _, stats, _ = through(tmp_path, "h.jsonl", recorded(0, 1) + stale, rows=True,
                          writes=writes)
    assert stats.stale_accepted == (1 if writes else 0)
    assert len(read_history(tmp_path / "h.jsonl")) == 6
