"""The client loop of the `mutex` and `fenced` workloads, run in each worker process.

acquire -> enter -> hold (with a heartbeat renewing every TTL/3) -> [write] -> exit
-> release, over and over, on random lock names. The worker stops its critical
section itself as soon as it can no longer believe it holds the lock: a renew was
refused, or its own lease clock ran out. Every step is one line on stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, Any

from lockcheck.locks.api import Definite, Indefinite, Lease, LockClient, NotOwner


@dataclass(frozen=True)
class WorkerConfig:
    worker: int
    concurrency: int
    backend: str
    workload: str  # "mutex" or "fenced"
    nodes: list[tuple[str, int]]
    keys: list[str]
    ttl_ms: int
    hold_ms: tuple[int, int]
    seed: int
    t0_ns: int
    op_timeout_s: float
    drift: float = 0.01
    backoff_ms: tuple[int, int] = (5, 30)
    resource_socket: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(s: str) -> WorkerConfig:
        d = json.loads(s)
        d["nodes"] = [tuple(n) for n in d["nodes"]]
        d["hold_ms"] = tuple(d["hold_ms"])
        d["backoff_ms"] = tuple(d["backoff_ms"])
        return WorkerConfig(**d)


class Recorder:
    """Writes ops as JSON lines; shared by the main and the heartbeat thread."""

    def __init__(self, out: IO[str], t0_ns: int, worker: int) -> None:
        self.out = out
        self.t0 = t0_ns
        self.worker = worker
        self.lock = threading.Lock()
        self.broken = False

    def __call__(self, process: int, type_: str, f: str, key: str | None, value: Any = None,
                 error: str | None = None) -> None:
        d: dict[str, Any] = {"time": time.monotonic_ns() - self.t0, "process": process,
                             "type": type_, "f": f, "key": key, "value": value}
        if error is not None:
            d["error"] = error
        d["worker"] = self.worker
        line = json.dumps(d) + "\n"
        with self.lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.broken = True  # the controller is gone: stop


class Heartbeat(threading.Thread):
    """Renews the lease every TTL/3 while the critical section runs."""

    def __init__(self, client: LockClient, lease: Lease, process: int, rec: Recorder) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.client, self.lease, self.process, self.rec = client, lease, process, rec
        self.done = threading.Event()
        self.interval = lease.ttl_ms / 3000.0

    def run(self) -> None:
        lease, key = self.lease, self.lease.key
        while not self.done.wait(self.interval):
            self.rec(self.process, "invoke", "renew", key, {"ttl_ms": lease.ttl_ms,
                                                            "fence": lease.fence})
            try:
                self.client.renew(lease)
            except NotOwner:
                lease.lost = True
                self.rec(self.process, "fail", "renew", key, {"fence": lease.fence}, "not-owner")
                return
            except Definite as e:
                self.rec(self.process, "fail", "renew", key, {"fence": lease.fence}, str(e))
            except Indefinite as e:
                self.rec(self.process, "info", "renew", key, {"fence": lease.fence}, str(e))
            else:
                self.rec(self.process, "ok", "renew", key, {"fence": lease.fence})

    def stop(self) -> None:
        self.done.set()
        self.join()


def hold(lease: Lease, seconds: float, stop_now: Callable[[], bool]) -> str | None:
    """Do the 'work': sleep in small slices, quitting as soon as the lease is in doubt."""
    end = time.monotonic() + seconds
    while True:
        if lease.lost:
            return "not-owner"
        if not lease.still_holds():
            return "lease-expired"
        left = end - time.monotonic()
        if left <= 0 or stop_now():
            return None
        # wake up before the lease clock runs out, to notice it promptly
        to_expiry = (lease.valid_until_ns - time.monotonic_ns()) / 1e9
        time.sleep(max(0.0, min(left, 0.01, to_expiry)))


class Worker:
    def __init__(self, cfg: WorkerConfig, clients: dict[str, LockClient], rec: Recorder,
                 resource: Any = None) -> None:
        self.cfg, self.clients, self.rec, self.resource = cfg, clients, rec, resource
        self.rng = random.Random(cfg.seed * 1_000_003 + cfg.worker)
        self.process = cfg.worker
        self.stopping = threading.Event()

    def retire(self) -> None:
        self.process += self.cfg.concurrency

    def backoff(self) -> None:
        lo, hi = self.cfg.backoff_ms
        self.stopping.wait(self.rng.uniform(lo, hi) / 1000.0)

    def run(self) -> None:
        while not self.stopping.is_set() and not self.rec.broken:
            self.one_round(self.rng.choice(self.cfg.keys))

    def one_round(self, key: str) -> None:
        cfg, rec, client = self.cfg, self.rec, self.clients[key]
        p = self.process
        rec(p, "invoke", "acquire", key, {"ttl_ms": cfg.ttl_ms})
        try:
            lease = client.acquire(key)
        except Definite as e:
            rec(p, "fail", "acquire", key, None, str(e))
            self.backoff()
            return
        except Indefinite as e:
            rec(p, "info", "acquire", key, None, str(e))
            self.retire()
            self.backoff()
            return
        if lease is None:
            rec(p, "fail", "acquire", key, None, "busy")
            self.backoff()
            return
        rec(p, "ok", "acquire", key, {"fence": lease.fence})
        rec(p, "event", "enter", key, {"fence": lease.fence})
        hb = Heartbeat(client, lease, p, rec)
        hb.start()
        try:
            lo, hi = cfg.hold_ms
            reason = hold(lease, self.rng.uniform(lo, hi) / 1000.0, self.stopping.is_set)
            if reason is None and cfg.workload == "fenced":
                reason = self.write(key, lease)
        finally:
            hb.stop()
        rec(p, "event", "exit", key, {"fence": lease.fence, "reason": reason or "done"})
        rec(p, "invoke", "release", key, {"fence": lease.fence})
        try:
            client.release(lease)
        except NotOwner:
            rec(p, "fail", "release", key, {"fence": lease.fence}, "not-owner")
        except Definite as e:
            rec(p, "fail", "release", key, {"fence": lease.fence}, str(e))
        except Indefinite as e:
            rec(p, "info", "release", key, {"fence": lease.fence}, str(e))
            self.retire()
        else:
            rec(p, "ok", "release", key, {"fence": lease.fence})

    def write(self, key: str, lease: Lease) -> str | None:
        """One write to the protected resource, carrying the fence; only while we believe."""
        if not lease.still_holds():
            return "not-owner" if lease.lost else "lease-expired"
        p, fence = self.process, lease.fence
        self.rec(p, "invoke", "write", key, {"fence": fence})
        try:
            r = self.resource.write(key, fence, p)
        except OSError as e:
            self.rec(p, "info", "write", key, {"fence": fence}, f"resource: {e}"[:80])
            return None
        if "accepted" not in r:  # the resource refused to process it: nothing was applied
            self.rec(p, "fail", "write", key, {"fence": fence}, f"resource: {r.get('error')}"[:80])
            return None
        value = {"fence": fence, "accepted": r["accepted"], "seq": r["seq"],
                 "max_fence": r["max_fence"]}
        if r["accepted"]:
            self.rec(p, "ok", "write", key, value)
        else:
            self.rec(p, "fail", "write", key, value, "stale-fence")
        return None


def watch_stdin(worker: Worker) -> None:
    """The controller asks us to stop by closing our stdin (or by dying)."""
    parent = os.getppid()

    def run() -> None:
        sys.stdin.read()
        worker.stopping.set()

    def orphan() -> None:
        while not worker.stopping.wait(0.5):
            if os.getppid() != parent:
                worker.stopping.set()

    threading.Thread(target=run, daemon=True).start()
    threading.Thread(target=orphan, daemon=True).start()


def main(argv: list[str]) -> int:
    from lockcheck.locks.backends import make_clients

    cfg = WorkerConfig.from_json(argv[0])
    rec = Recorder(sys.stdout, cfg.t0_ns, cfg.worker)
    clients = make_clients(cfg.backend, cfg.nodes, cfg.keys, ttl_ms=cfg.ttl_ms,
                           op_timeout_s=cfg.op_timeout_s, drift=cfg.drift)
    resource = None
    if cfg.workload == "fenced":
        from lockcheck.workloads.resource import ResourceClient

        assert cfg.resource_socket is not None
        resource = ResourceClient(cfg.resource_socket, cfg.op_timeout_s)
    w = Worker(cfg, clients, rec, resource)
    watch_stdin(w)
    with contextlib.suppress(KeyboardInterrupt):
        w.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
