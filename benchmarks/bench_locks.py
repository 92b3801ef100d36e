"""Benchmark: the `linearizable` checker (fenced-mutex) on large lock histories.

    python benchmarks/bench_locks.py                 # the 200,000-op rows (below)
    python benchmarks/bench_locks.py --ops 20000     # smaller
    python benchmarks/bench_locks.py --search-timeout 120
    python benchmarks/bench_locks.py --shapes all    # the 1,000,000-op rows, four shapes
    python benchmarks/bench_locks.py --shapes no-fences --ops 200000

`--shapes` writes, per shape, a valid history and one with a planted lie (a refused
acquire of k0 recorded as ok, with the holder's own fence: a second holder), and checks
each in a fresh subprocess: read + `check_linearizable`, wall time and peak RSS. The
shapes (`SHAPES`): `acq-fences` (fences in acquires only, renews and releases carry
none, no lease tokens: Jepsen's shape), `all-fences` (fences and lease tokens in
acquires, renews and releases: lockcheck's format), `no-fences` (lease tokens, no
fences: Redlock), `no-fences-crash5` (the same with 5 % crashed ops). In every shape
any `info` retires the process, as the history's process rules require (the rows of
`fenced` measured before 2026-12 kept the id after an `info` renew); after an `info`
renew the worker releases under its new id naming the lease (where it has a token).

It simulates a lease lock service with TTLs (10 keys, 20 clients by default) and
writes a lockcheck `history.jsonl` of N operations (an invoke plus its completion
each): acquires (ok, or failed because the lock is busy), renews, releases, crashed
ops (`info`, after which the process id is retired), and clients that stall past
their TTL so that their lease expires without a release. The service applies every op
at one instant, so the history is linearizable.

Each check runs in a fresh subprocess, which reports its own wall time and peak RSS
(`ru_maxrss`):

* `fenced`: the history as generated, fast path on (the target: < 10 s, < 1 GB);
* `fenced-search`: the same, fast path off (search only), with a timeout;
* `nofence`: the same history with every fence removed, so only the search can check
  it, with a timeout;
* `lease-safety`: the lease-safety checker on the fenced history, for scale;
* `fenced-bad`, `fenced-bad-search`: the fenced history with two consecutive grants of
  one key swapping their fences (a fence-order bug), with and without the fast path.

The load average is printed before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MS = 1_000_000


@dataclass
class _Lease:
    holder: int | None = None
    fence: int = 0
    expires: int = 0
    token: str | None = None


@dataclass
class _Client:
    worker: int
    process: int
    key: str = ""
    holding: bool = False
    fence: int | None = None  # the lease it believes it holds
    lease: str | None = None
    renews_left: int = 0
    owner_id: int | None = None  # the process that acquired the lease it holds

    @property
    def owner(self) -> int:
        return self.process if self.owner_id is None else self.owner_id


@dataclass(order=True)
class _Ev:
    time: int
    seq: int
    kind: str = field(compare=False)  # "start", "apply", "complete"
    client: _Client = field(compare=False)
    op: dict[str, Any] = field(compare=False, default_factory=dict)


@dataclass(frozen=True)
class Shape:
    """What the simulated service and clients write (see the module doc)."""

    fences: bool = True  # ok acquires carry a fence (else null)
    named: bool = True  # renews and releases name their fence (else they carry none)
    leases: bool = False  # grants carry a lease token; renews/releases name it
    crash: float = 0.01  # share of acquires and releases that crash (renews: 0.3 of it)
    plant: bool = False  # one lie: a refused acquire of k0 recorded as ok


SHAPES: dict[str, Shape] = {
    # the 200,000-op rows as before (lockcheck's format of 2026-11)
    "fenced": Shape(),
    # the 1,000,000-op rows
    "acq-fences": Shape(named=False),
    "all-fences": Shape(leases=True),
    "no-fences": Shape(fences=False, named=False, leases=True),
    "no-fences-crash5": Shape(fences=False, named=False, leases=True, crash=0.05),
}


def generate(
    path: Path, *, ops: int, keys: int, clients: int, ttl_ms: int, seed: int,
    shape: Shape = SHAPES["fenced"],
) -> dict[str, int]:
    """Write a lockcheck history of `ops` operations; return counts. Linearizable
    unless ``shape.plant``."""
    rng = random.Random(seed)
    names = [f"k{n}" for n in range(keys)]
    leases = {k: _Lease() for k in names}
    ttl = ttl_ms * MS
    heap: list[_Ev] = []
    seq = 0
    lines: list[tuple[int, int, dict[str, Any]]] = []  # (time, seq, record)
    counts: dict[str, int] = {}
    started = 0
    planted = not shape.plant
    tokens = 0

    def push(t: int, kind: str, c: _Client, op: dict[str, Any] | None = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, _Ev(t, seq, kind, c, op or {}))

    def record(t: int, c: _Client, typ: str, f: str, value: Any, error: str | None) -> None:
        nonlocal seq
        seq += 1
        rec: dict[str, Any] = {
            "time": t,
            "process": c.process,
            "type": typ,
            "f": f,
            "key": c.key,
            "value": value,
        }
        if error:
            rec["error"] = error
        rec["worker"] = c.worker
        lines.append((t, seq, rec))

    def lease_value(c: _Client, **extra: Any) -> dict[str, Any] | None:
        v: dict[str, Any] = dict(extra)
        if shape.named:
            v["fence"] = c.fence
        if shape.leases:
            v["fence"] = c.fence if shape.named else None
            v["lease"] = c.lease
        return v or None

    for w in range(clients):
        push(rng.randint(0, 5 * MS), "start", _Client(w, w))

    while heap:
        ev = heapq.heappop(heap)
        c, t = ev.client, ev.time
        if ev.kind == "start":
            if started >= ops:
                continue
            started += 1
            args: Any
            if not c.holding:
                c.key = rng.choice(names)
                f, args = "acquire", {"ttl_ms": ttl_ms}
            elif c.renews_left > 0:
                c.renews_left -= 1
                f, args = "renew", lease_value(c, ttl_ms=ttl_ms)
            else:
                f, args = "release", lease_value(c)
            record(t, c, "invoke", f, args, None)
            crash = rng.random() < (shape.crash * 0.3 if f == "renew" else shape.crash)
            applies = not crash or rng.random() < 0.5
            t_apply = t + rng.randint(MS // 10, 2 * MS)
            op: dict[str, Any] = {"f": f, "crash": crash}
            if applies:
                push(t_apply, "apply", c, op)
            if crash:
                # the client gives up after a timeout, whatever happened
                push(t + 50 * MS, "complete", c, op)
            continue
        if ev.kind == "apply":
            op = ev.op
            lease = leases[c.key]
            f = op["f"]
            live = lease.holder is not None and lease.expires > t
            if f == "acquire":
                if not live:
                    lease.fence += rng.choice((1, 1, 1, 2))
                    lease.holder, lease.expires = c.owner, t + ttl
                    tokens += 1
                    lease.token = f"L{tokens}"
                    op["result"] = ("ok", lease.fence, lease.token)
                elif not planted and c.key == "k0" and started > ops // 2 and not op["crash"]:
                    planted = True  # the service lies: a second holder, the same fence
                    tokens += 1
                    op["result"] = ("ok", lease.fence, f"L{tokens}")
                else:
                    op["result"] = ("fail", None, "busy")
            else:
                mine = live and lease.holder == c.owner and lease.token == c.lease
                if mine and f == "renew":
                    lease.expires = t + ttl
                    op["result"] = ("ok", None, None)
                elif mine:
                    lease.holder = None
                    op["result"] = ("ok", None, None)
                else:
                    op["result"] = ("fail", None, "not-owner")
            if not op["crash"]:
                push(t + rng.randint(MS // 10, 2 * MS), "complete", c, op)
            continue
        # complete
        op = ev.op
        f = op["f"]
        value: Any
        if op["crash"]:
            typ, value, error = "info", None, "timeout"
        elif f == "acquire":
            typ, fence, error = op["result"][0], op["result"][1], op["result"][2]
            value = None
            if typ == "ok":
                c.fence, c.lease = (fence if shape.fences else None), op["result"][2]
                value = {"fence": c.fence}
                if shape.leases:
                    value["lease"] = c.lease
                error = None
        else:
            typ, error = op["result"][0], op["result"][2]
            value = lease_value(c)
        record(t, c, typ, f, value, error)
        counts[f"{f}:{typ}"] = counts.get(f"{f}:{typ}", 0) + 1
        pause = rng.randint(MS // 2, 5 * MS)
        if typ == "info":
            c.process += clients  # retire the id, as Jepsen does
            if f == "renew" and shape.leases:
                c.renews_left = 0  # still inside: release the lease under the new id
            else:
                c.holding = False
                c.fence = c.lease = c.owner_id = None
        elif f == "acquire" and typ == "ok":
            c.holding = True
            c.owner_id = c.process
            c.renews_left = rng.choice((0, 0, 1, 1, 2, 3))
            if rng.random() < 0.01:  # the client stalls past its TTL
                pause = ttl + rng.randint(MS, 20 * MS)
            else:
                pause = rng.randint(MS, ttl // 4)
        elif f == "renew":
            if typ == "fail":
                c.renews_left = 0  # lost the lease: release (it will be refused)
            pause = rng.randint(MS, ttl // 4)
        elif f == "release":
            c.holding = False
            c.fence = c.lease = c.owner_id = None
        elif f == "acquire" and typ == "fail":
            pause = rng.randint(20 * MS, 120 * MS)  # busy: back off
        push(t + pause, "start", c)

    lines.sort(key=lambda x: (x[0], x[1]))
    with path.open("w", encoding="utf-8") as fh:
        for n, (_, _, rec) in enumerate(lines):
            fh.write(json.dumps({"index": n, **rec}) + "\n")
    counts["operations"] = started
    counts["lines"] = len(lines)
    return counts


def strip_fences(src: Path, dst: Path) -> None:
    """The same history as if the service issued no fences."""
    with src.open(encoding="utf-8") as fin, dst.open("w", encoding="utf-8") as fout:
        for line in fin:
            d = json.loads(line)
            if isinstance(d.get("value"), dict) and "fence" in d["value"]:
                d["value"]["fence"] = None
            fout.write(json.dumps(d) + "\n")


def swap_fences(src: Path, dst: Path, key: str = "k0", nth: int = 1000) -> tuple[int, int]:
    """The same history with a fence-order bug: on `key`, the `nth` and `nth + 1`-th
    grants swap their fences (and so do the renews and releases naming them)."""
    grants: list[int] = []
    with src.open(encoding="utf-8") as fin:
        for line in fin:
            d = json.loads(line)
            if d["key"] == key and d["f"] == "acquire" and d["type"] == "ok":
                grants.append(d["value"]["fence"])
    a, b = grants[min(nth, len(grants) - 2)], grants[min(nth, len(grants) - 2) + 1]
    swap = {a: b, b: a}
    with src.open(encoding="utf-8") as fin, dst.open("w", encoding="utf-8") as fout:
        for line in fin:
            d = json.loads(line)
            v = d.get("value")
            if d["key"] == key and isinstance(v, dict) and v.get("fence") in swap:
                v["fence"] = swap[v["fence"]]
            fout.write(json.dumps(d) + "\n")
    return a, b


def _peak_mb() -> float:
    """This process's peak RSS since it started (VmHWM). Not ru_maxrss: that one keeps
    the high-water mark across exec, so a child forked from a big parent inherits it."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def check_child(path: Path, timeout: float | None, fast: bool, lease: bool) -> dict[str, Any]:
    """Run in the subprocess: read, check, report time and peak memory."""
    from lockcheck.checker.api import CheckOptions
    from lockcheck.checker.lease_safety import check_lease_safety
    from lockcheck.checker.linearizable import check_linearizable
    from lockcheck.history import read_history

    t0 = time.perf_counter()
    if fast and not lease:
        # the lock check as `check_linearizable_file` does it: read and check in one
        from lockcheck.checker import lockscan
        from lockcheck.checker.linearizable import check_linearizable_file

        r = check_linearizable_file(path, CheckOptions(timeout_s=timeout))
        return {
            "reader": "lock columns (compiled)" if lockscan.COMPILED else "read_history",
            "read_check_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(time.process_time(), 2),
            "valid": r["valid"],
            "path": r["path"],
            "note": r.get("note", ""),
            "bad_key": r.get("key"),
            "keys_ok": sum(1 for k in r["keys"].values() if k["result"] == "ok"),
            "keys": len(r["keys"]),
            "explanation": r.get("explanation", "")[:160],
            "peak_rss_mb": _peak_mb(),
        }
    ops = read_history(path)
    t1 = time.perf_counter()
    if lease:
        ls = check_lease_safety(ops, CheckOptions())
        return {
            "read_s": round(t1 - t0, 2),
            "check_s": round(time.perf_counter() - t1, 2),
            "valid": ls["valid"],
            "certificates": ls["certificates"],
            "peak_rss_mb": _peak_mb(),
        }
    r = check_linearizable(ops, CheckOptions(timeout_s=timeout, extra={"fast_path": fast}))
    t2 = time.perf_counter()
    return {
        "read_s": round(t1 - t0, 2),
        "check_s": round(t2 - t1, 2),
        "cpu_s": round(time.process_time(), 2),
        "valid": r["valid"],
        "path": r["path"],
        "note": r.get("note", ""),
        "bad_key": r.get("key"),
        "keys_ok": sum(1 for k in r["keys"].values() if k["result"] == "ok"),
        "keys": len(r["keys"]),
        "cache_entries": r.get("search_cache_entries"),
        "peak_rss_mb": _peak_mb(),
    }


def run_child(path: Path, timeout: float | None, fast: bool, lease: bool,
              base: Path | None = None) -> dict[str, Any]:
    """Check in a fresh process; with `base`, with that checkout's lockcheck and script."""
    script = Path(__file__) if base is None else base / "benchmarks" / Path(__file__).name
    cmd = [sys.executable, str(script), "--child", str(path), "--fast", str(int(fast))]
    if lease:
        cmd.append("--lease")
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1] if base is None else base)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-2000:], "wall_s": round(wall, 2)}
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    res["wall_s"] = round(wall, 2)
    return res


def run_shapes(args: argparse.Namespace) -> None:
    """The --shapes rows: per shape a valid history and one with a planted lie."""
    import dataclasses

    from lockcheck.history import JSON_READER

    names = [n for n in SHAPES if n != "fenced"] if args.shapes == "all" else (
        args.shapes.split(","))
    ops = args.ops or 1_000_000
    print(f"{ops} ops, {args.keys} keys, {args.clients} clients; reader {JSON_READER}")
    with tempfile.TemporaryDirectory() as tmp:
        d = args.dir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        for name in names:
            for plant in (False, True):
                shape = dataclasses.replace(SHAPES[name], plant=plant)
                p = d / f"{name}{'-lie' if plant else ''}.jsonl"
                if args.reuse and p.exists():
                    print(f"{p.name}: reused, {p.stat().st_size / 1e6:.0f} MB")
                else:
                    t0 = time.perf_counter()
                    counts = generate(p, ops=ops, keys=args.keys, clients=args.clients,
                                      ttl_ms=args.ttl_ms, seed=args.seed, shape=shape)
                    size = p.stat().st_size / 1e6
                    info = sum(v for k, v in counts.items() if k.endswith(":info"))
                    print(f"{p.name}: generated in {time.perf_counter() - t0:.0f} s, "
                          f"{size:.0f} MB, {counts['lines']} lines, {info} info")
                for _ in range(args.rounds):  # with --base: the two interleaved
                    for label, base in [("base", args.base)] * bool(args.base) + [("this", None)]:
                        print(f"  {label}, {_load()}")
                        res = run_child(p, None, True, False, base)
                        print(f"    {json.dumps(res)}")
                if not args.reuse:
                    p.unlink()


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=None,
                    help="operations [200,000; 1,000,000 with --shapes]")
    ap.add_argument("--shapes", default="", help="comma-separated shapes, or all")
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--ttl-ms", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--search-timeout", type=float, default=60.0)
    ap.add_argument("--skip", default="", help="comma-separated runs to skip")
    ap.add_argument("--dir", type=Path, default=None, help="keep the histories here")
    ap.add_argument("--reuse", action="store_true",
                    help="with --dir and --shapes: check the histories already there, keep them")
    ap.add_argument("--base", type=Path, default=None,
                    help="with --shapes: also check each history with this checkout's "
                         "lockcheck (e.g. a worktree of main), interleaved, for a before/after")
    ap.add_argument("--rounds", type=int, default=1, help="with --shapes: checks per history")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--fast", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lease", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(check_child(args.child, args.timeout, bool(args.fast), args.lease)))
        return

    if args.shapes:
        run_shapes(args)
        return
    args.ops = args.ops or 200_000
    with tempfile.TemporaryDirectory() as tmp:
        d = args.dir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        fenced, nofence = d / "fenced.jsonl", d / "nofence.jsonl"
        print(f"before: {_load()}")
        t0 = time.perf_counter()
        counts = generate(
            fenced,
            ops=args.ops,
            keys=args.keys,
            clients=args.clients,
            ttl_ms=args.ttl_ms,
            seed=args.seed,
        )
        strip_fences(fenced, nofence)
        bad = d / "fenced-bad.jsonl"
        swapped = swap_fences(fenced, bad)
        size = fenced.stat().st_size / 1e6
        print(f"generated in {time.perf_counter() - t0:.1f} s: {size:.1f} MB, {counts}")
        print(f"fenced-bad: fences {swapped} of key k0 swapped")
        skip = set(args.skip.split(","))
        runs = [
            ("fenced", fenced, None, True, False),
            ("fenced-search", fenced, args.search_timeout, False, False),
            ("nofence", nofence, args.search_timeout, True, False),
            ("lease-safety", fenced, None, True, True),
            ("fenced-bad", bad, None, True, False),
            ("fenced-bad-search", bad, args.search_timeout, False, False),
        ]
        for name, p, timeout, fast, lease in runs:
            if name in skip:
                continue
            res = run_child(p, timeout, fast, lease)
            print(f"{name}: {json.dumps(res)}")
            print(f"  {_load()}")


if __name__ == "__main__":
    main()
