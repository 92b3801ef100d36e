"""etcd findings, real 3-member clusters, through the `lockcheck` command.

The runs start together (each has its own run id and subnet) and several tests look
at each, so the module costs about as long as its longest run (and the
`etcd-no-keepalive` run, which comes after them). The two `client-pause` findings are
detections: the first of up to three runs that shows one, made alone after every
other test (tests/integration/detect.py).

* `etcd` + `client-pause` + `mutex`: a holder stopped past its lease wakes up inside
  its critical section while the next holder is in it (Kleppmann's scenario A);
* the same with the `fenced` workload: the resource refuses the stale writer, because
  the fence (the lock key's create_revision) of the next grant is higher;
* `etcd-lease-fence`: lease IDs as fences go backwards across members with no fault;
* `etcd3gw-with`: etcd3gw's `with lock:` enters without the lock, with no fault;
* `etcd` + `partition`: the minority cannot grant, and every key serves after the heal;
* `etcd-no-keepalive` (a keepalive that died silently): sections longer than the 2 s
  lease overlap the next holder's, with no fault.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from lockcheck.history import Op, pair_ops, read_history
from tests.integration.detect import first_showing

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

# A TTL of 2 s is what etcd grants anyway (its minimum: 1.5x the election timeout,
# rounded up to whole seconds); two pauses of 4 s (2x TTL), so the lease surely
# expires while the holder is stopped (expiry is checked every 0.5 s) and the others
# have seconds to take the lock, even with 500 ms op timeouts on a loaded machine.
# The first pause comes after 1.5 s, once the workers hold locks; both end before the
# quiet second at the end (a pause cut short may wake its holder before anyone writes).
PAUSE = ("--nemesis", "client-pause", "--ttl-ms", "2000", "--time-limit", "12",
         "--nemesis-interval", "1.5", "--quiet", "1")
PAUSES: dict[str, tuple[str, ...]] = {
    "pause": ("--backend", "etcd", *PAUSE),
    "pause_fenced": ("--backend", "etcd", "--workload", "fenced", *PAUSE),
}
RUNS: dict[str, tuple[str, ...]] = {
    "lease_fence": ("--backend", "etcd-lease-fence", "--workload", "fenced",
                    "--nemesis", "none", "--time-limit", "8", "--quiet", "1"),
    "partition": ("--backend", "etcd", "--nemesis", "partition", "--time-limit", "9",
                  "--nemesis-interval", "1.5", "--quiet", "2"),
    # 8 s: three clusters start at once, and a loaded machine's workers may take
    # seconds to begin; a run they sat out records nothing to judge
    "with": ("--backend", "etcd3gw-with", "--nemesis", "none", "--time-limit", "8",
             "--quiet", "1"),
}
# holds of 2.5-3.5 s outlive the 2 s lease that nothing renews; run on its own, after
# the others (six clusters at once starve each other on a 2-core machine)
NO_KEEPALIVE = ("--backend", "etcd-no-keepalive", "--nemesis", "none",
                "--hold-ms", "2500-3500", "--time-limit", "8", "--quiet", "1")
LEASE_NS = 2_000_000_000  # what etcd grants for the default --ttl-ms 1000


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> dict[str, Any]:
    started = {name: module_cli.start("test", *args) for name, args in RUNS.items()}
    done = {name: p.wait(180) for name, p in started.items()}
    for r in done.values():
        assert r.run_dir is not None and r.code in (0, 1, 2), r.explain()
    return done


def ops_of(r: Any) -> list[Op]:
    return read_history(r.run_dir / "history.jsonl")


def stale_holder_wrote(r: Any) -> bool:
    fe = r.results()["checkers"]["fencing"]
    return bool(fe["saves_stale_holder"] > 0 or fe["stale_accepted_count"] > 0)


@pytest.mark.detection
def test_client_pause_gives_overlapping_critical_sections(module_cli: Any) -> None:
    # up to three runs, the first that detects examined: on a loaded machine the
    # workers start late, and a run may get one pause whose key nobody else wanted
    r = first_showing(module_cli, PAUSES["pause"], lambda r: r.code == 1, timeout=150)
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    paused = [o.value for o in ops_of(r) if o.f == "pause-client" and o.type == "info"
              and "worker" in o.value]
    assert paused, "no holder was paused"
    # the woken holder is the one that stops: its own lease clock had run out, or (if
    # its keepalive thread ran first on waking) etcd told it the lease was gone
    woken = [(v, i) for v in me["violations"] for i in (0, 1)
             if v["exit_reasons"][i] in ("lease-expired", "not-owner")]
    assert woken, me["violations"]
    v, i = woken[0]
    assert v["workers"][i] in {p["worker"] for p in paused}, (v, paused)
    # not the service's fault: the next grant came after the paused lease had expired
    assert res["checkers"]["lease-safety"]["valid"] is True, res["checkers"]["lease-safety"]
    assert res["recovery"]["valid"] is True
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


@pytest.mark.detection
def test_create_revision_fences_stop_the_paused_writer(module_cli: Any) -> None:
    # up to two more runs, only while no woken holder wrote at all (a holder woken in
    # the run's last second may leave without writing): never because a write went
    # through
    r = first_showing(module_cli, PAUSES["pause_fenced"], stale_holder_wrote, timeout=150)
    # a stale holder wrote: the lock failed (invalid), and the resource held
    assert r.code == 1, r.explain()
    assert r.results()["summary"].startswith("the lock failed, the resource held")
    fe = r.results()["checkers"]["fencing"]
    assert fe["resource_valid"] is True and fe["stale_accepted_count"] == 0, fe
    assert fe["saves_stale_holder"] > 0, fe  # the woken holder's write was refused
    assert fe["regression_count"] == 0 and fe["duplicate_fence_count"] == 0, fe
    assert fe["accepted"] > 0
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_lease_id_fences_go_backwards_across_members(module_cli: Any,
                                                     runs: dict[str, Any]) -> None:
    r = runs["lease_fence"]
    res = r.results()
    fe = res["checkers"]["fencing"]
    assert fe["regression_count"] > 0, fe
    # the resource refused current holders whose lease ID was below an earlier one
    assert fe["saves_regressed_fence"] > 0 and fe["stale_accepted_count"] == 0, fe
    assert res["stats"]["faults"] == 0
    # the fences say which member granted: workers start on different members
    fences = {o.fence for o in ops_of(r) if o.f == "acquire" and o.type == "ok"}
    assert len({f >> 48 for f in fences if f is not None}) > 1
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_etcd3gw_with_enters_without_the_lock(module_cli: Any,
                                              runs: dict[str, Any]) -> None:
    r = runs["with"]
    assert r.code == 1, r.explain()
    res = r.results()
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False and me["violation_count"] > 0, me
    assert res["stats"]["faults"] == 0
    # the library knew: the releases of the locks it never had are refused
    refused = [o for o in ops_of(r) if o.f == "release" and o.type == "fail"
               and o.error == "not-owner"]
    assert refused
    assert r.test_json()["versions"]["etcd3gw"]
    module_cli.assert_no_leftovers(r.test_json()["run_id"])


def test_partition_minority_cannot_grant(module_cli: Any, runs: dict[str, Any]) -> None:
    r = runs["partition"]
    assert r.code in (0, 1), r.explain()
    res = r.results()
    assert res["checkers"]["mutual-exclusion"]["valid"] is True, res["checkers"]
    ops = ops_of(r)
    # no grant while a lease was provably valid; a holder that retired after an info
    # releases under its next process id, naming the lease, which counts as its own
    ls = res["checkers"]["lease-safety"]
    assert ls["valid"] is True and ls["violation_count"] == 0, ls["violations"][:3]
    pairs = list(pair_ops(ops))
    starts = [o for o in ops if o.f == "start-partition" and o.type == "info"]
    assert starts and res["stats"]["faults"] == len(starts)
    # clients cut off with a minority could not even get a lease committed
    stops = [o for o in ops if o.f == "stop-partition" and o.type == "info"]
    windows = list(zip([o.time for o in starts], [o.time for o in stops], strict=True))
    cut = [p for p in pairs if p.invoke.f == "acquire" and p.complete is not None
           and any(a <= p.invoke.time <= b for a, b in windows)
           and (p.complete.type == "info" or (p.complete.error or "").startswith("grant:"))]
    assert cut, "no acquire was refused for want of a quorum during the partitions"
    assert res["recovery"]["valid"] is True, res["recovery"]
    module_cli.assert_no_leftovers(r.test_json()["run_id"])
    assert "10.77." not in subprocess.run(["iptables-save"], capture_output=True,
                                          text=True).stdout


def test_etcd_logs_and_versions_are_kept(runs: dict[str, Any]) -> None:
    r = runs["lease_fence"]
    t = r.test_json()
    from lockcheck.db.etcd import etcd_version

    assert t["versions"]["etcd"] == etcd_version() and t["versions"]["requests"]
    assert t["versions"]["etcd"].startswith("3.")
    assert sorted(t["db"]) == ["n1", "n2", "n3"]
    for n in ("n1", "n2", "n3"):
        log = (r.run_dir / "nodes" / n / "etcd.log").read_text()
        assert "elected leader" in log or "became leader" in log


@pytest.fixture(scope="module")
def no_keepalive(module_cli: Any) -> Any:
    r = module_cli("test", *NO_KEEPALIVE, timeout=150)
    module_cli.assert_no_leftovers(r.test_json()["run_id"])
    return r


def test_a_section_that_outlives_an_unrenewed_lease_overlaps_the_next(
        no_keepalive: Any) -> None:
    """E4: `renew()` only moves the client's own lease clock; etcd revokes the lease 2 s
    after the grant and gives the lock to the next waiter while the holder works."""
    r = no_keepalive
    assert r.code == 1, r.explain()
    res = r.results()
    assert res["stats"]["faults"] == 0
    me = res["checkers"]["mutual-exclusion"]
    assert me["valid"] is False, me
    # each overlap began after the first holder had been inside longer than the lease
    late = [v for v in me["violations"]
            if v["start"] - min(sec[0] for sec in v["sections"]) > LEASE_NS]
    assert late, me["violations"][:3]
    # the client believed its renewals; nothing was sent, so the service never refused
    ops = ops_of(r)
    renews = [o for o in ops if o.f == "renew" and o.type != "invoke"]
    assert renews and all(o.type == "ok" for o in renews)
