"""`reply-loss`: the worker's stop before a send, the nemesis's handshake (stop, drop the
replies, resume, lift), its options, and the checkers' link from an anomaly to the
withheld reply it followed (lockcheck/checker/withheld.py)."""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass, field
from typing import Any

import pytest

from lockcheck.checker.api import CheckOptions, check_safe
from lockcheck.checker.mutual_exclusion import check_mutual_exclusion
from lockcheck.checker.withheld import annotate, cause, intervals, withheld_replies
from lockcheck.errors import BadInput
from lockcheck.history import Op
from lockcheck.nemesis.api import Holding, WorkerRef
from lockcheck.nemesis.registry import NEMESES
from lockcheck.nemesis.reply_loss import ReplyLoss, hold_ms, stop_before, validate
from lockcheck.results.progress import checker_detail
from lockcheck.results.report import withheld_notes
from lockcheck.spec import TestSpec
from lockcheck.workloads.stop_point import ARM, DISARM, EVENTS, StopPoint
from lockcheck.workloads.worker import aimed_send
from tests.unit.test_fault_targets import FakeDaemon

S = 1_000_000_000


# -- the worker's side -------------------------------------------------------------------


def test_an_armed_worker_stops_before_the_aimed_op_only() -> None:
    records: list[tuple[Any, ...]] = []
    stops: list[int] = []
    point = StopPoint(lambda *a: records.append(a), lambda: None, worker=2,
                      at="send-release", stop=lambda: stops.append(len(records)))
    before = aimed_send("release", point)
    point.armed = True
    before("acquire", "k0", None)  # not the aimed op: stays armed, nothing recorded
    assert records == [] and point.armed
    before("release", "k0", 7)
    assert records == [(2, "event", "stop-before-release", "k0",
                        {"at": "send-release", "fence": 7})]
    assert stops == [1]  # stopped after the record went out
    before("release", "k0", 8)  # disarmed by its own stop: once per arming
    assert len(records) == 1 and stops == [1]


def test_the_stop_before_events_are_stop_events() -> None:
    assert {EVENTS[f"send-{op}"] for op in ("acquire", "renew", "release")} == {
        "stop-before-acquire", "stop-before-renew", "stop-before-release"}


# -- options -----------------------------------------------------------------------------


def test_options_are_checked_in_one_line() -> None:
    ok = TestSpec(nemesis=("reply-loss",), concurrency=3)
    validate(ok)
    for bad, word in [({"reply_op": "read"}, "--reply-op"),
                      ({"reply_client": "c3"}, "--reply-client"),
                      ({"reply_client": "n1"}, "--reply-client"),
                      ({"reply_hold_ms": 0}, "--reply-hold-ms"),
                      ({"nemesis": ("reply-loss", "client-pause"), "pause_at": "release"},
                       "run them apart"),
                      ({"nemesis": ("reply-loss", "loss"), "nemesis_mode": "all"},
                       "--nemesis-mode one")]:
        spec = TestSpec(**{"nemesis": ("reply-loss",), "concurrency": 3, **bad})
        with pytest.raises(BadInput, match=word):
            validate(spec)
    validate(TestSpec(nemesis=("reply-loss", "client-pause"), concurrency=3))
    validate(TestSpec(nemesis=("reply-loss", "partition"), concurrency=3))  # one at a time


def test_defaults_the_workers_op_and_the_hold() -> None:
    spec = TestSpec(nemesis=("reply-loss",), ttl_ms=1000)
    assert stop_before(spec) == "release"
    assert stop_before(TestSpec(nemesis=("loss",))) is None
    assert hold_ms(spec) == 750  # 3x the op timeout (TTL/4)
    assert hold_ms(TestSpec(nemesis=("reply-loss",), reply_hold_ms=40)) == 40
    kind = NEMESES["reply-loss"]
    assert kind.prompt and not kind.needs


# -- the nemesis's handshake -------------------------------------------------------------


@dataclass
class FakeHost:
    name: str
    address: str = "10.0.0.101"
    own_network: bool = True
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def block(self, sources: list[str], probability: float = 1.0) -> None:
        self.calls.append(("block", list(sources)))

    def heal(self) -> None:
        self.calls.append(("heal", None))


def rig(stopper: int | None, aim: str = "all") -> tuple[ReplyLoss, list[FakeDaemon],
                                                       list[FakeHost]]:
    daemons = [FakeDaemon(node=f"c{i}") for i in range(3)]
    hosts = [FakeHost(f"c{i}") for i in range(3)]
    workers = [WorkerRef(i, f"c{i}", d) for i, d in enumerate(daemons)]  # type: ignore[arg-type]

    def stopped_at_point(arm: Any, ready: Any, timeout: float) -> Holding | None:
        arm(ready)
        if stopper is None:
            return None
        return Holding(worker=stopper, process=stopper + 10, key="k0", fence=5,
                       since_ns=123)

    nem = ReplyLoss(workers, {h.name: h for h in hosts}, ["10.0.0.11", "10.0.0.12"],  # type: ignore[arg-type]
                    stopped_at_point, op="release", aim=aim, hold_s=0.75, wait_s=1.0)
    return nem, daemons, hosts


def test_the_stopped_worker_hears_nothing_from_the_nodes_until_the_stop() -> None:
    nem, daemons, hosts = rig(stopper=1)
    v = nem.start(random.Random(0))
    assert v == {"fault": "reply-loss", "targets": ["c1"], "worker": 1, "process": 11,
                 "key": "k0", "op": "release", "fence": 5, "stopped_ns": 123,
                 "hold_ms": 750}
    # only the aimed host drops, and only what comes from the nodes
    assert hosts[1].calls == [("block", ["10.0.0.11", "10.0.0.12"])]
    assert hosts[0].calls == hosts[2].calls == []
    # armed, disarmed, and resumed after the rule was in place
    assert daemons[1].signals == [ARM, DISARM, signal.SIGCONT]
    stop = nem.stop()
    assert stop["targets"] == ["c1"] and stop["worker"] == 1 and stop["op"] == "release"
    assert ("heal", None) in hosts[1].calls


def test_aimed_at_one_client_arms_only_that_one() -> None:
    nem, daemons, _ = rig(stopper=2, aim="c2")
    nem.start(random.Random(0))
    assert daemons[0].signals == [] and daemons[1].signals == []
    assert daemons[2].signals[:2] == [ARM, DISARM]


def test_no_send_in_time_is_a_skipped_start_with_nothing_blocked() -> None:
    nem, _, hosts = rig(stopper=None)
    v = nem.start(random.Random(0))
    assert v["targets"] == [] and "skipped" in v
    assert all(not h.calls for h in hosts)
    assert nem.stop()["targets"] == []


def test_heal_lifts_every_rule_and_resumes_every_worker() -> None:
    nem, daemons, hosts = rig(stopper=0)
    nem.start(random.Random(0))
    nem.heal()
    assert all(("heal", None) in h.calls for h in hosts)
    assert all(d.signals[-1] == signal.SIGCONT for d in daemons)


# -- the checkers' link ------------------------------------------------------------------


def op(i: int, t: float, process: Any, type_: str, f: str, key: str | None = "k0",
       value: Any = None) -> Op:
    return Op(index=i, time=int(t * S), process=process, type=type_, f=f, key=key,
              value=value, worker=process if isinstance(process, int) else None)


def history(*, lifted: bool = True) -> list[Op]:
    """Worker 0 releases k0; its reply is withheld from 1.0 s to 1.75 s and its retry
    lands at 2.0 s; meanwhile 1 holds k0 and 2 is granted it too."""
    start = {"fault": "reply-loss", "targets": ["c0"], "worker": 0, "process": 0,
             "key": "k0", "op": "release", "fence": 4, "stopped_ns": int(0.99 * S),
             "hold_ms": 750}
    ops = [op(0, 0.1, 0, "invoke", "acquire"), op(1, 0.2, 0, "ok", "acquire"),
           op(2, 0.2, 0, "event", "enter"), op(3, 0.9, 0, "event", "exit"),
           op(4, 0.95, 0, "invoke", "release"),
           op(5, 0.99, 0, "event", "stop-before-release", value={"at": "send-release"}),
           op(6, 1.0, "nemesis", "info", "start-reply-loss", None, start),
           op(7, 1.2, 1, "invoke", "acquire"), op(8, 1.3, 1, "ok", "acquire"),
           op(9, 1.3, 1, "event", "enter")]
    if lifted:
        ops.append(op(10, 1.75, "nemesis", "info", "stop-reply-loss", None,
                      {"fault": "reply-loss", "targets": ["c0"]}))
    ops += [op(11, 2.0, 0, "ok", "release"),
            op(12, 2.1, 2, "invoke", "acquire"), op(13, 2.2, 2, "ok", "acquire"),
            op(14, 2.2, 2, "event", "enter"), op(15, 2.5, 1, "event", "exit"),
            op(16, 2.6, 2, "event", "exit")]
    return ops


def test_a_withheld_reply_spans_from_its_send_to_its_late_completion() -> None:
    [w] = withheld_replies(history())
    assert (w.host, w.op, w.key, w.fence) == ("c0", "release", "k0", 4)
    assert (w.sent, w.start, w.lifted, w.done, w.end) == (
        int(0.99 * S), S, int(1.75 * S), 2 * S, 2 * S)
    assert w.note() == "after c0's release reply was withheld at 1.0 s (key k0, fence 4)"
    # never lifted: it runs to the end of the history
    [open_] = withheld_replies(history(lifted=False))
    assert open_.lifted is None and open_.end == int(2.6 * S)


def test_skipped_starts_withhold_nothing() -> None:
    ops = [op(0, 1.0, "nemesis", "info", "start-reply-loss", None,
              {"fault": "reply-loss", "targets": [], "skipped": "no client sent"}),
           op(1, 2.0, "nemesis", "info", "stop-reply-loss", None,
              {"fault": "reply-loss", "targets": []})]
    assert withheld_replies(ops) == []


def test_cause_is_the_latest_window_a_span_touches() -> None:
    ws = withheld_replies(history())
    assert cause([(int(1.3 * S), int(2.5 * S))], ws) == ws[0]
    assert cause([(int(2.1 * S), int(2.5 * S))], ws) is None  # after its window
    assert cause([(0, int(0.5 * S))], ws) is None  # before it
    assert intervals({"sections": [[1, 2], [3, 4]], "window": [5, 6], "start": 7,
                      "end": 8, "holder": {"invoke_ns": 9, "ok_ns": 10,
                                           "valid_until_ns": 12}}) == [
        (1, 2), (3, 4), (5, 6), (7, 8), (9, 12)]


def test_a_violation_is_named_after_the_withheld_reply_it_followed() -> None:
    ops = history()
    r = annotate(check_mutual_exclusion(ops, CheckOptions()), ops)
    assert r["valid"] is False
    [v] = r["violations"]
    assert v["after_withheld_reply"] == \
        "after c0's release reply was withheld at 1.0 s (key k0, fence 4)"
    assert [w["note"] for w in r["withheld_replies"]] == [v["after_withheld_reply"]]
    # through check_safe (what every run's check goes through), then shown
    safe = check_safe("mutual-exclusion", check_mutual_exclusion, ops, CheckOptions())
    assert safe["withheld_replies"] == r["withheld_replies"]
    assert "after c0's release reply" in checker_detail("mutual-exclusion", safe)
    assert withheld_notes({"mutual-exclusion": safe}) == [v["after_withheld_reply"]]


def test_valid_results_and_histories_without_the_fault_are_left_alone() -> None:
    ops = history()
    assert annotate({"valid": True, "violations": [{"start": 0, "end": 3 * S}]}, ops) == {
        "valid": True, "violations": [{"start": 0, "end": 3 * S}]}
    plain = [o for o in ops if o.process != "nemesis"]
    r = annotate({"valid": False, "summary": "x", "violations": [{"start": 0, "end": S}]},
                 plain)
    assert r == {"valid": False, "summary": "x", "violations": [{"start": 0, "end": S}]}
    r = annotate({"valid": False, "summary": "x",
                  "gaps": [{"window": [int(1.1 * S), int(1.2 * S)]}]}, ops)
    assert r["summary"].startswith("x (after c0's release reply")
    assert r["gaps"][0]["after_withheld_reply"].startswith("after c0's")


def test_the_worker_calls_before_send_after_each_invoke_and_before_the_call() -> None:
    from tests.unit.test_worker import MemoryClient, MemoryLocks, make_worker, ops_of

    client = MemoryClient(MemoryLocks())
    w, out = make_worker(client, hold_ms=(250, 250))  # renewed inside the section
    seen: list[tuple[str, str, Any, int, list[str]]] = []
    w.before_send = lambda f, key, fence: seen.append(
        (f, key, fence, len(out.getvalue().splitlines()), list(client.calls)))
    assert w.one_round("k0")
    fs = [s[0] for s in seen]
    assert fs[0] == "acquire" and fs[-1] == "release" and "renew" in fs
    lines = ops_of(out)
    for n, (f, key, fence, recorded, calls) in enumerate(seen):
        # its invoke is the last line recorded, and the client has not been called yet
        assert (lines[recorded - 1].type, lines[recorded - 1].f) == ("invoke", f)
        assert calls.count(f) == fs[:n].count(f)
        assert key == "k0" and (fence is None) == (f == "acquire")
