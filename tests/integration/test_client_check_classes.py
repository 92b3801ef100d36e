"""`client-check`'s steps 7, 8 and 9 against live servers: a lock that comes back from
the dead, a lease shorter than the one asked for, and a renewal refused in silence.

All start at once, each on a cluster of its own:

* a planted renew that takes a free lock back (`planted_ghost_lock.py`): step 7 reports
  the ghost, and only it;
* a planted TTL in whole seconds (`planted_rounded_ttl_lock.py`): step 8 reports the
  lease of 1500 ms that ended after about 1 s, and only it;
* a planted renewal that ignores a refusal while its own lease clock is valid
  (`planted_silent_renewal_lock.py`): step 9 reports the holder that renewed a lock
  taken away under it, and only it;
* tooz on PostgreSQL (finding L10): a holder whose session was ended renews without
  a word, and the lock goes to another client;
* the shipped etcd client, whose service counts leases in whole seconds (it asks for
  2 s where 1.5 s is wanted: longer, never shorter) and which refuses a held lock with
  Definite: no problems, and steps 7, 8 and 9 ran (etcd's keep-alive says at once
  that a revoked lease is gone).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

REPO = Path(__file__).resolve().parents[2]
CHECKS = {
    "ghost": ("tests/integration/planted_ghost_lock.py:make_clients", "redis"),
    "rounded": ("tests/integration/planted_rounded_ttl_lock.py:make_clients", "redis"),
    "silent": ("tests/integration/planted_silent_renewal_lock.py:make_clients", "redis"),
    "etcd": ("lockcheck.locks.etcd:make_clients", "etcd"),
    "tooz-postgres": ("tooz", "postgres"),
}


@pytest.fixture(scope="module")
def runs(module_cli: Any) -> Iterator[dict[str, Any]]:
    started = {name: module_cli.start("client-check", client, "--backend", backend, cwd=REPO)
               for name, (client, backend) in CHECKS.items()}
    yield {name: p.wait(timeout=120) for name, p in started.items()}


def lines(r: Any, kind: str = "") -> list[str]:
    return [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("  " + kind)]


def took_s(r: Any) -> float:
    m = re.search(r"(?:problem\(s\)|no problems) in ([\d.]+) s", r.stdout)
    assert m, r.explain()
    return float(m.group(1))


def test_a_renew_that_takes_a_free_lock_back_is_reported(runs: dict[str, Any]) -> None:
    r = runs["ghost"]
    bad = lines(r, "FAIL")
    assert r.code == 1 and len(bad) == 2, r.explain()
    assert bad[0].startswith("FAIL  renew by the expired holder after the lock was freed: "
                             "SUCCEEDED"), r.explain()
    assert "BROUGHT THE LOCK BACK" in bad[0]
    # the same renew takes back a lock deleted under its holder (step 9)
    assert bad[1].startswith("FAIL  a lock taken away under its renewing holder: ")
    assert bad[1].endswith("the renew brought it back"), r.explain()
    # the renews and releases of step 6, while another client held the lock, were right:
    # only a free lock is taken back
    assert "ok    renew by the expired holder: refused with NotOwner" in lines(r), r.explain()
    assert any(ln.startswith("ok    release by a non-owner") for ln in lines(r))


def test_a_ttl_in_whole_seconds_is_reported(runs: dict[str, Any]) -> None:
    r = runs["rounded"]
    bad = lines(r, "FAIL")
    assert r.code == 1 and len(bad) == 1, r.explain()
    m = re.fullmatch(r"FAIL  a lease of 1500 ms lasts 1500 ms: asked for 1500 ms, but another "
                     r"client was GRANTED the lock (\d+) ms after the acquire was sent.*", bad[0])
    assert m, r.explain()
    # `EX 1`: the service let the lock go after 1 s (and the next poll got it)
    assert 1000 <= int(m.group(1)) < 1400, r.explain()
    assert took_s(r) < 10, r.explain()


def test_a_renewal_refused_in_silence_is_reported(runs: dict[str, Any]) -> None:
    r = runs["silent"]
    bad = lines(r, "FAIL")
    assert r.code == 1 and len(bad) == 1, r.explain()
    m = re.fullmatch(r"FAIL  a lock taken away under its renewing holder: deleted (\d+) key\(s\) "
                     r"with a TTL \(another client then took the lock and released it\); the "
                     r"holder's renew (\d+) ms later SUCCEEDED, and the client never said the "
                     r"lease was lost: .*; another client then got the lock, so two "
                     r"clients believe they hold it", bad[0])
    assert m and int(m.group(1)) >= 1, r.explain()
    # within one renewal interval (a third of the 1000 ms TTL), and the loaded machine's
    # slack
    assert 300 <= int(m.group(2)) < 1000, r.explain()
    # the lapsed-lease steps were right: it renews strictly once its lease clock ran out
    assert "ok    renew by the expired holder: refused with NotOwner" in lines(r), r.explain()
    assert took_s(r) < 10, r.explain()


def test_the_shipped_etcd_client_keeps_both(runs: dict[str, Any]) -> None:
    r = runs["etcd"]
    assert r.code == 0 and not lines(r, "FAIL") and not lines(r, "note"), r.explain()
    got = lines(r)
    assert "ok    renew by the expired holder after the lock was freed: refused with NotOwner" \
        in got, r.explain()
    assert ("ok    release by the expired holder after the lock was freed: refused with "
            "NotOwner; another client then got the lock") in got, r.explain()
    m = next(re.fullmatch(r"ok    a lease of 1500 ms lasts 1500 ms: another client was "
                          r"still refused (\d+) ms after the acquire was sent", ln)
             for ln in got if "a lease of 1500 ms" in ln)
    assert m, r.explain()
    assert int(m.group(1)) >= 1483, r.explain()  # 1500 ms less 1% and 2 ms
    assert any(re.fullmatch(r"ok    a lock taken away under its renewing holder: revoked \d+ "
                            r"lease\(s\); the client said the lease is lost \d+ ms later", ln)
               for ln in got), r.explain()


def test_tooz_on_postgres_never_hears_that_its_session_ended(runs: dict[str, Any]) -> None:
    r = runs["tooz-postgres"]
    bad = lines(r, "FAIL")
    assert r.code == 1 and len(bad) == 1, r.explain()
    assert re.fullmatch(r"FAIL  a lock taken away under its renewing holder: expired 0 lease "
                        r"row\(s\), ended [1-9]\d* session\(s\) holding advisory locks .*"
                        r"SUCCEEDED.*another client then got the lock, so two clients believe "
                        r"they hold it", bad[0]), r.explain()
