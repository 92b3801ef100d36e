"""The aimed faults find their published scenarios with every option at its default.

* `bridge-clock` on Redlock (Kleppmann): the master that both groups of clients share
  has its clock jumped just after a grant that needed it; a client of the other group
  is granted the lock while the holder's validity runs.
* `pause-past-lease` on etcd's lock-set (Jepsen): a holder stopped from its grant until
  a rival holds the lock wakes and writes; one of the two updates is lost.

Each is the first of up to three runs (15 s each, one at a time) that detects: each
fault needs a rival to ask in time, and on a loaded machine a window can pass unused.
"""

from __future__ import annotations

from typing import Any

import pytest

from lockcheck.history import Op, read_history
from lockcheck.workloads.worker import HURRIED
from tests.integration.detect import first_showing

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns, pytest.mark.detection]

RUNS: dict[str, tuple[str, ...]] = {
    "bridge_clock": ("--backend", "redlock", "--nemesis", "bridge-clock"),
    "pause_past_lease": ("--backend", "etcd", "--workload", "lock-set",
                         "--nemesis", "pause-past-lease"),
}
SHORT = ("--time-limit", "15", "--quiet", "2")


def detected(module_cli: Any, name: str) -> Any:
    """The run's first try that detected (exit 1), or its last."""
    return first_showing(module_cli, (*RUNS[name], *SHORT), lambda r: r.code == 1,
                         timeout=150)


def windows(ops: list[Op], start_f: str, stop_f: str) -> list[tuple[Op, int]]:
    """Each start of a fault that was not skipped, with the time it was stopped."""
    out, start = [], None
    for o in ops:
        if o.process != "nemesis" or o.type != "info":
            continue
        if o.f == start_f and "skipped" not in o.value:
            start = o
        elif o.f == stop_f and start is not None:
            out.append((start, o.time))
            start = None
    return out


@pytest.mark.usefixtures("faked_redis")
def test_bridge_clock_finds_kleppmanns_clock_scenario(module_cli: Any) -> None:
    r = detected(module_cli, "bridge_clock")
    assert r.code == 1, r.explain()
    c = r.results()["checkers"]
    assert c["mutual-exclusion"]["valid"] is False, c["mutual-exclusion"]
    grants = c["lease-safety"]["violations"]
    assert c["lease-safety"]["valid"] is False and grants, c["lease-safety"]
    ops = read_history(r.run_dir / "history.jsonl")
    jumps = windows(ops, "start-bridge-clock", "stop-bridge-clock")
    assert jumps, "no grant leaned on the bridge master"
    enters = [o for o in ops if o.type == "event" and o.f == "enter"]
    explained = []
    for g in grants:
        rival = g["granted"]
        entered = next(o for o in enters if o.process == rival["process"]
                       and o.key == g["key"] and o.time >= rival["ok_ns"])
        for start, stop in jumps:
            # granted while the bridge master's clock was ahead, with that master's yes
            bridge = start.value["bridge"]
            if start.time <= rival["ok_ns"] <= stop and \
                    bridge in entered.value.get("granted_by", []):
                explained.append((g["key"], bridge))
    assert explained, (grants[:2], [(s.value, t) for s, t in jumps])
    # the fault watched the holders: every client then sent its lines every 1 ms
    logs = [p for p in (r.run_dir / "workers").glob("*.log") if p.stem != "recovery"]
    assert logs and all(HURRIED in p.read_text() for p in logs), \
        {p.name: p.read_text()[-300:] for p in logs}


def test_pause_past_lease_finds_jepsens_lost_update(module_cli: Any) -> None:
    r = detected(module_cli, "pause_past_lease")
    assert r.code == 1, r.explain()
    c = r.results()["checkers"]
    lost = c["lock-set"]["lost"]
    assert c["lock-set"]["valid"] is False and lost, c["lock-set"]
    assert c["lease-safety"]["valid"] is True  # the rival came after the lease expired
    ops = read_history(r.run_dir / "history.jsonl")
    pauses = windows(ops, "pause-client", "resume-client")
    assert pauses and all(s.value["fault"] == "pause-past-lease" for s, _ in pauses)
    paused = {s.value["process"] for s, _ in pauses}
    # each lost update is the paused holder's or the rival's its late write erased
    assert any({x["process"], x["erased_by"]["process"]} & paused for x in lost), \
        (lost[:2], paused)
    stops = [o for o in ops if o.process == "nemesis" and o.f == "resume-client"
             and o.type == "info"]
    assert any(o.value.get("taken_over") for o in stops)
