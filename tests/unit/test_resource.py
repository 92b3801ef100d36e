"""The protected resource: fenced/unfenced accept/reject, seq and max_fence, and its socket."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest

from lockcheck.workloads.resource import ResourceClient, ResourceServer, ResourceState


def fenced() -> ResourceState:
    return ResourceState(mode="fenced")


def unfenced() -> ResourceState:
    return ResourceState(mode="unfenced")


def outcome(r: dict[str, object]) -> tuple[object, object, object]:
    return r["accepted"], r["seq"], r["max_fence"]


def test_fenced_accepts_only_increasing_fences() -> None:
    s = fenced()
    assert outcome(s.write("k", 3, 0)) == (True, 1, None)
    assert outcome(s.write("k", 5, 1)) == (True, 2, 3)
    assert outcome(s.write("k", 5, 2)) == (False, 3, 5)  # equal: stale
    assert outcome(s.write("k", 4, 2)) == (False, 4, 5)  # lower: stale
    assert outcome(s.write("k", 6, 2)) == (True, 5, 5)
    assert s.max_fence == {"k": 6}
    assert (s.writes, s.rejected) == (5, 2)


def test_fenced_rejects_a_write_without_a_fence() -> None:
    s = fenced()
    assert outcome(s.write("k", None, 0)) == (False, 1, None)
    assert outcome(s.write("k", 1, 0)) == (True, 2, None)
    assert outcome(s.write("k", None, 0)) == (False, 3, 1)


def test_unfenced_accepts_everything_and_still_reports_max_fence() -> None:
    s = unfenced()
    assert outcome(s.write("k", 5, 0)) == (True, 1, None)
    assert outcome(s.write("k", 3, 1)) == (True, 2, 5)  # stale, accepted anyway
    assert outcome(s.write("k", 5, 1)) == (True, 3, 5)
    assert outcome(s.write("k", None, 1)) == (True, 4, 5)
    assert outcome(s.write("k", 9, 1)) == (True, 5, 5)
    assert outcome(s.write("k", 1, 1)) == (True, 6, 9)
    assert s.max_fence == {"k": 9}  # a lower accepted fence never lowers it
    assert (s.writes, s.rejected) == (6, 0)


@pytest.mark.parametrize("mode", ["fenced", "unfenced"])
def test_keys_are_independent(mode: str) -> None:
    s = ResourceState(mode=mode)
    s.write("a", 10, 0)
    assert outcome(s.write("b", 1, 1)) == (True, 1, None)
    assert outcome(s.write("a", 11, 0)) == (True, 2, 10)
    assert s.seq == {"a": 2, "b": 1}


def test_every_write_is_logged_with_its_outcome() -> None:
    log = io.StringIO()
    s = ResourceState(mode="fenced", log=log, t0_ns=0)
    s.write("k", 2, 7)
    s.write("k", 1, 8)
    recs = [json.loads(x) for x in log.getvalue().splitlines()]
    assert [(r["process"], r["key"], r["fence"], r["accepted"], r["seq"], r["max_fence"])
            for r in recs] == [(7, "k", 2, True, 1, None), (8, "k", 1, False, 2, 2)]
    assert all(isinstance(r["time"], int) and r["time"] > 0 for r in recs)


def test_concurrent_writes_get_distinct_seqs() -> None:
    s = fenced()

    def go(p: int) -> None:
        for i in range(100):
            s.write("k", p * 1000 + i, p)

    ts = [threading.Thread(target=go, args=(p,)) for p in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert s.seq["k"] == 400 and s.writes == 400
    assert s.max_fence["k"] == 3099


def test_server_and_client_over_a_unix_socket(tmp_path: Path) -> None:
    sock, log = tmp_path / "r.sock", tmp_path / "resource.jsonl"
    srv = ResourceServer(sock, log, "fenced", t0_ns=0).start()
    try:
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        c = ResourceClient(str(sock), timeout_s=2.0)
        assert c.write("k", 4, 0)["accepted"] is True
        r = c.write("k", 4, 1)
        assert (r["accepted"], r["seq"], r["max_fence"]) == (False, 2, 4)
        c2 = ResourceClient(str(sock), timeout_s=2.0)
        assert c2.write("k", 5, 2)["seq"] == 3
        c.close()
        c2.close()
    finally:
        srv.stop()
    assert not sock.exists()
    assert len(log.read_text().splitlines()) == 3


def test_client_raises_oserror_when_the_resource_is_gone(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    srv = ResourceServer(sock, tmp_path / "resource.jsonl", "fenced", t0_ns=0).start()
    c = ResourceClient(str(sock), timeout_s=1.0)
    c.write("k", 1, 0)
    c.close()
    srv.stop()
    with pytest.raises(OSError):  # no socket any more: connect fails
        c.write("k", 2, 0)
    # (A connection opened before stop() is still served by its handler thread; the
    # runner stops every worker before the resource, so no worker sees that.)
