"""One cell of the comparison: the runs of one backend, workload and nemesis, and what
they add up to.

A cell is a count, not one run's word: unsafe ("k of n runs") as soon as one run found
a violation, with the median and range of the time to the first violation and the
kinds found; safe ("0 of n runs") only with what was tried (ops, fault windows, seconds
under fault) and the 95 % upper bound on the per-run chance of catching the bug that
n clean runs leave (1 - 0.05^(1/n): 0 of 20 gives < 14 %); unknown only where no run
could decide, with the reason. Runs that crashed or could not decide beside decided
ones are counted and named, never folded into the verdict.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcheck.checker.verdict import LOCK_CHECKERS, refusals
from lockcheck.results import store
from lockcheck.results.leadership import leadership_line
from lockcheck.workloads.api import Trial
from lockcheck.workloads.registry import on_trial

# worst first; a cell takes the first of these any of its runs has (see CellView.status)
STATUS_ORDER = ("unsafe", "safe", "error", "unknown", "refused")
NS = 1e9
# violation kinds: (count key, one, many)
KINDS = (("overlaps", "overlap", "overlaps"),
         ("lease", "grant during a valid lease", "grants during a valid lease"),
         ("nonlinearizable_keys", "key not linearizable", "keys not linearizable"),
         ("stale", "stale write accepted", "stale writes accepted"),
         ("duplicate_fences", "duplicate fence", "duplicate fences"),
         ("hidden_grants", "hidden grant", "hidden grants"))


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def workload_label(test: Mapping[str, Any]) -> str:
    w = str(test.get("workload", "?"))
    if w == "transfer":  # sorted against random order, coarse against fine apart
        if test.get("lock_scope") == "coarse":
            return "transfer (one coarse lock)"
        return f"transfer ({test.get('lock_order', 'sorted')} order, " \
               f"{test.get('locks_per_op', 2)} locks)"
    # the leader workload's store is on trial: one that refuses stale terms apart
    unfenced = (on_trial(w) == "lock+resource" or w == "leader") \
        and test.get("resource") == "unfenced"
    return f"{w} (unfenced resource)" if unfenced else w


def nemesis_label(nemesis: Any) -> str:
    if isinstance(nemesis, (list, tuple)):
        return "+".join(str(n) for n in nemesis) or "none"
    return str(nemesis or "none").replace(",", "+")


def status_of(valid: Any) -> str:
    return {True: "safe", False: "unsafe"}.get(valid, "unknown") if isinstance(valid, bool) \
        else "unknown"


@dataclass
class Run:
    backend: str
    workload: str  # label: mutex, fenced, "fenced (unfenced resource)"
    nemesis: str  # "none" or names joined by "+"
    status: str  # safe / unsafe / unknown / error / refused
    trial: Trial = "lock"  # what its workload puts on trial (Workload.on_trial)
    dir: Path | None = None
    log: Path | None = None
    source: str = ""  # the results folder it came from (a shard)
    summary: str = ""
    valid: Any = None
    seed: int | None = None
    started: str = ""
    time_limit: Any = None
    versions: dict[str, Any] = field(default_factory=dict)
    server: str = ""  # the main server's name and major ("redis 7.0", "postgres 17")
    counts: dict[str, int] = field(default_factory=dict)
    saves: int = 0  # writes refused from a holder that had lost the lock
    regressions: int = 0  # current holders' writes refused because the fence went back
    no_fence: bool = False  # fenced workload, and the backend issued no fence
    lock_failed: bool = False
    resource_failed: bool = False
    first_violation_s: float | None = None
    ops: int = 0
    fault_windows: int = 0
    fault_seconds: float = 0.0
    availability: float | None = None  # granted share while the run's faults were active
    answered: float | None = None  # share the service answered (granted or busy), same time
    p50: float | None = None
    p99: float | None = None
    hold_p99: float | None = None
    renewals: int = 0
    renewal_failures: int = 0
    outlived: int = 0  # expiries while working: holds that outlived the holder's lease clock
    # operations taking several locks (transfer): completed per second, deadlock cycles,
    # seconds in deadlock
    throughput: float | None = None
    cycles: int = 0
    deadlock_s: float | None = None
    # elections (leader): changes of leader, ms without one, stale actions
    leader_changes: int | None = None
    leaderless_ms: float | None = None
    stale_accepted: int = 0
    stale_refused: int = 0


def _counts(checkers: Mapping[str, Any]) -> dict[str, int]:
    me, fe = checkers.get("mutual-exclusion") or {}, checkers.get("fencing") or {}
    ls, lin = checkers.get("lease-safety") or {}, checkers.get("linearizable") or {}
    illegal = lin.get("illegal")
    return {"overlaps": _int(me.get("violation_count")),
            "lease": _int(ls.get("violation_count")),
            "stale": _int(fe.get("stale_accepted_count")) + _int(fe.get("interleaved_count")),
            "duplicate_fences": _int(fe.get("duplicate_fence_count")),
            "nonlinearizable_keys": len(illegal) if isinstance(illegal, list) else 0,
            "hidden_grants": _int((checkers.get("hidden-grants") or {}).get(
                "hidden_grant_count"))}


def first_violation_ns(checkers: Mapping[str, Any]) -> int | None:
    """The earliest time (ns into the run) any checker put on a violation it found:
    an overlap's start, a grant during a valid lease, a stale write accepted."""
    times: list[int] = []
    me = checkers.get("mutual-exclusion") or {}
    times += [_int(v.get("start")) for v in me.get("violations") or [] if isinstance(v, dict)]
    ls = checkers.get("lease-safety") or {}
    times += [_int((v.get("granted") or {}).get("ok_ns")) for v in ls.get("violations") or []
              if isinstance(v, dict)]
    fe = checkers.get("fencing") or {}
    for name in ("stale_accepted", "interleaved_writes"):
        times += [_int(v.get("time")) for v in fe.get(name) or [] if isinstance(v, dict)]
    # a hidden grant: the end of the window its fence was granted in (at the latest)
    times += [_int((g.get("window") or [0, 0])[1])
              for g in (checkers.get("hidden-grants") or {}).get("gaps") or []
              if isinstance(g, dict)]
    if (checkers.get("linearizable") or {}).get("valid") is False:
        for d in fe.get("duplicate_fences") or []:
            times += [_int(t) for t in (d.get("times") or [])[1:2]]  # the second grant
    times = [t for t in times if t > 0]
    return min(times) if times else None


def _shares(metrics: Mapping[str, Any], nemesis: str) -> tuple[float | None, float | None]:
    """(granted, answered) shares of the acquires attempted while the run's faults were
    active (the whole run for nemesis none)."""
    av = metrics.get("availability") or {}
    scopes = [av.get("overall") or {}] if nemesis == "none" else list(
        (av.get("faults") or {}).values())
    attempts = sum(_int(f.get("attempts")) for f in scopes)
    ok = sum(_int(f.get("ok")) for f in scopes)
    busy = sum(_int(f.get("busy")) for f in scopes)
    return (ok / attempts, (ok + busy) / attempts) if attempts else (None, None)


def major(version: str) -> str:
    """The part of a version that names a release line: PostgreSQL's first number
    (15, 17), the first two of the others (redis 7.0, etcd 3.5, zookeeper 3.9)."""
    parts = str(version).split(".")
    if parts[0].isdigit() and int(parts[0]) >= 10:
        return parts[0]
    return ".".join(parts[:2])


def server_label(test: Mapping[str, Any]) -> str:
    """'valkey 8.1': the run's main server (the first its database names) and its
    release line; '' for a run from before servers were recorded apart."""
    servers = test.get("server_versions") or {}
    if not isinstance(servers, dict) or not servers:
        return ""
    program, version = next(iter(servers.items()))
    return f"{str(program).removesuffix('-server')} {major(str(version))}"


def keep_server_versions_apart(runs: Sequence[Run]) -> list[str]:
    """A finding is a claim about a server version: where one backend's runs ran
    several release lines of its server, each line gets its own row (the backend's
    label names it), and a note says so."""
    lines: dict[str, set[str]] = {}
    for r in runs:
        if r.server:
            lines.setdefault(r.backend, set()).add(r.server)
    notes = []
    for backend, found in sorted(lines.items()):
        if len(found) > 1:
            notes.append(f"{backend} ran on {len(found)} server versions "
                         f"({', '.join(sorted(found))}): each has a row of its own")
            for r in runs:
                if r.backend == backend and r.server:
                    r.backend = f"{backend} ({r.server})"
    return notes


def read_run(d: Path, source: str = "") -> Run:
    test = json.loads((d / store.TEST).read_text())
    results = store.load_results(d)
    seed = test.get("seed")
    backend = str(test.get("backend", "?"))
    if test.get("server"):  # another server than the backend's own, as its folder says
        backend += f"@{test['server']}"
    run = Run(backend=backend, server=server_label(test), workload=workload_label(test),
              trial=on_trial(str(test.get("workload"))),
              nemesis=nemesis_label(test.get("nemesis")), status="error", dir=d,
              source=source, started=str(test.get("started", "")),
              time_limit=test.get("time_limit"), versions=dict(test.get("versions") or {}),
              seed=seed if isinstance(seed, int) else None)
    if results is None:
        run.summary = "no results.json: the run did not finish"
        return run
    apply_results(run, results)
    return run


def apply_results(run: Run, results: Mapping[str, Any]) -> None:
    """Fill a run's verdict, counts and metrics from its results.json."""
    run.valid = results.get("valid")
    run.status = status_of(run.valid)
    if results.get("failure"):
        run.status = "unsafe" if run.valid is False else "error"
    run.summary = str(results.get("summary", ""))
    checkers = results.get("checkers") or {}
    run.counts = _counts(checkers)
    fe = checkers.get("fencing") or {}
    run.saves, run.regressions = refusals(fe)
    run.no_fence = (run.trial == "lock+resource" and _int(fe.get("unfenced_rejections")) > 0
                    and not _int(fe.get("accepted")) and not _int(fe.get("saves")))
    run.lock_failed = any((checkers.get(n) or {}).get("valid") is False for n in LOCK_CHECKERS)
    run.resource_failed = fe.get("resource_valid") is False
    first = first_violation_ns(checkers)
    run.first_violation_s = None if first is None else first / NS
    stats = results.get("stats") or {}
    run.ops = _int(stats.get("ops")) or _int(results.get("ops"))
    m = results.get("metrics")
    if isinstance(m, dict) and "error" not in m:
        run.availability, run.answered = _shares(m, run.nemesis)
        lat = m.get("acquire_latency_ms") or {}
        run.p50, run.p99 = _num(lat.get("p50")), _num(lat.get("p99"))
        run.hold_p99 = _num((m.get("hold_ms") or {}).get("p99"))
        ren = m.get("renewals") or {}
        run.renewals = _int(ren.get("attempts"))
        run.renewal_failures = _int(ren.get("not_owner")) + _int(ren.get("failed")) + \
            _int(ren.get("info"))
        run.outlived = _int((m.get("expiries_while_working") or {}).get("outlived_lease"))
        faults = (m.get("availability") or {}).get("faults") or {}
        run.fault_windows = _int((m.get("faults") or {}).get("windows"))
        run.fault_seconds = sum(_num(f.get("seconds")) or 0.0 for f in faults.values())
        live = m.get("liveness") or {}
        if live:
            run.throughput = _num(live.get("throughput_per_s"))
            run.cycles, run.deadlock_s = _int(live.get("cycles")), _num(live.get("deadlock_s"))
        lead = m.get("leadership") or {}
        if lead:
            run.leader_changes = _int(lead.get("leadership_changes"))
            run.leaderless_ms = _num(lead.get("leaderless_ms"))
            run.stale_accepted = _int(lead.get("stale_accepted"))
            run.stale_refused = _int(lead.get("stale_refused"))


def detection_bound(n: int) -> float:
    """The 95 % upper bound on the per-run chance of a violation that n clean runs
    allow: the p with (1 - p)^n = 0.05."""
    return 1.0 - 0.05 ** (1.0 / n) if n > 0 else 1.0


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2f}" if v < 10 else f"{v:.0f}")


def _s(v: float) -> str:
    return f"{v:.1f} s"


@dataclass
class CellView:
    runs: list[Run]

    @property
    def decided(self) -> list[Run]:
        return [r for r in self.runs if r.status in ("safe", "unsafe")]

    @property
    def unsafe(self) -> list[Run]:
        return [r for r in self.runs if r.status == "unsafe"]

    @property
    def status(self) -> str:
        """Unsafe if any run was; safe if no run was and some decided; else the worst of
        the undecided (error, unknown), refused only if every run was refused."""
        for s in STATUS_ORDER:
            if any(r.status == s for r in self.runs):
                if s == "refused" and any(r.status != "refused" for r in self.runs):
                    continue
                return s
        return "unknown"

    def total(self, name: str) -> int:
        return sum(r.counts.get(name, 0) for r in self.runs)

    @property
    def saves(self) -> int:
        return sum(r.saves for r in self.runs)

    @property
    def regressions(self) -> int:
        return sum(r.regressions for r in self.runs)

    def median(self, attr: str) -> float | None:
        vals = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return statistics.median(vals) if vals else None

    def headline(self) -> str:
        """"3 of 5 runs unsafe", "0 of 5 runs unsafe", "undecided in 5 of 5 runs"."""
        n = len(self.decided)
        if self.status in ("unsafe", "safe"):
            return f"{len(self.unsafe)} of {n} {'run' if n == 1 else 'runs'} unsafe"
        bad = sum(1 for r in self.runs if r.status == self.status)
        word = {"error": "crashed", "unknown": "undecided", "refused": "refused"}[self.status]
        return f"{word} in {bad} of {len(self.runs)} runs"

    def kinds(self) -> list[str]:
        """Violations by kind: total, and in how many runs."""
        out = []
        for key, one, many in KINDS:
            n = self.total(key)
            if n:
                k = sum(1 for r in self.runs if r.counts.get(key))
                out.append(f"{n:,} {one if n == 1 else many} ({k} of {len(self.runs)})")
        return out

    def lines(self) -> list[str]:
        """The cell's text, line by line (the page adds the verdict mark and links)."""
        lines = [self.headline()]
        fenced = any(r.trial == "lock+resource" for r in self.runs)
        if self.status == "unsafe":
            times = sorted(r.first_violation_s for r in self.unsafe
                           if r.first_violation_s is not None)
            if len(times) == 1:
                lines.append(f"first violation after {_s(times[0])}")
            elif times:
                lines.append(f"first violation after {_s(statistics.median(times))} "
                             f"(median; {_s(times[0])} to {_s(times[-1])})")
            if fenced:
                both = sum(1 for r in self.unsafe if r.lock_failed and r.resource_failed)
                alone = sum(1 for r in self.unsafe if r.lock_failed and not r.resource_failed)
                res = sum(1 for r in self.unsafe if r.resource_failed and not r.lock_failed)
                parts = [f"the lock alone failed in {alone}" if alone else "",
                         f"the lock and the resource in {both}" if both else "",
                         f"the resource alone in {res}" if res else ""]
                lines.append("; ".join(p for p in parts if p))
        elif self.status == "safe":
            n = len(self.decided)
            tried = [_plural(sum(r.ops for r in self.decided), "op", "ops")]
            windows = sum(r.fault_windows for r in self.decided)
            if windows or any(r.nemesis != "none" for r in self.decided):
                tried.append(f"{_plural(windows, 'fault window', 'fault windows')}, "
                             f"{_s(sum(r.fault_seconds for r in self.decided))} under fault")
            lines.append("tried: " + ", ".join(tried))
            lines.append(f"per-run detection chance < {detection_bound(n) * 100:.0f}% "
                         "(95% bound)")
        else:
            first = next(r for r in self.runs if r.status == self.status)
            lines.append(first.summary[:140] or "no reason recorded")
        lines += self.kinds()
        if any(r.no_fence for r in self.runs):
            lines.append("no fence: the resource cannot refuse")
        if self.saves or self.regressions or (fenced and self.decided):
            refused = [_plural(self.saves, "save", "saves")]
            if self.regressions:
                refused.append(_plural(self.regressions, "fence regression",
                                       "fence regressions"))
            lines.append(", ".join(refused))
        undecided = [r for r in self.runs if r.status not in ("safe", "unsafe")]
        if undecided and self.status in ("safe", "unsafe"):
            lines.append(f"{len(undecided)} more run(s) undecided or crashed: "
                         f"{undecided[0].summary[:90]}")
        return lines

    def metric_lines(self, nemesis: str) -> list[str]:
        lines = []
        av = self.median("availability")
        if av is not None:
            lines.append(f"{_pct(av)} granted, {_pct(self.median('answered'))} answered"
                         + (" under the fault" if nemesis != "none" else ""))
        if self.median("p50") is not None:
            lines.append(f"acquire p50/p99 {_ms(self.median('p50'))}/"
                         f"{_ms(self.median('p99'))} ms")
        if self.median("hold_p99") is not None:
            lines.append(f"hold p99 {_ms(self.median('hold_p99'))} ms")
        if self.median("throughput") is not None:
            locked = sum(1 for r in self.runs if r.cycles)
            lines.append(f"{self.median('throughput'):.1f} ops/s; deadlocked in {locked} "
                         f"of {len(self.runs)} run(s), {self.median('deadlock_s') or 0:.2f} s "
                         "lost (median)")
        if self.median("leader_changes") is not None:
            lines.append(leadership_line(
                self.median("leader_changes"), self.median("leaderless_ms"),
                sum(r.stale_accepted for r in self.runs),
                sum(r.stale_refused for r in self.runs), len(self.runs)))
        renewals = sum(r.renewals for r in self.runs)
        if renewals:
            failed = sum(r.renewal_failures for r in self.runs)
            lines.append(f"renewals failed {failed:,} of {renewals:,}")
        outlived = sum(r.outlived for r in self.runs)
        lease = self.total("lease")
        text = f"expiries while working {outlived:,}"
        if lease:
            grants = _plural(lease, "double grant", "double grants")
            text += f" (this alarm cannot see the service's {grants})"
        lines.append(text)
        return lines


def order(values: Sequence[str], preferred: Sequence[str]) -> list[str]:
    vs = set(values)
    return [v for v in preferred if v in vs] + sorted(vs - set(preferred))
