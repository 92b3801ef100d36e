"""`reply-loss` on real Redis in real namespaces: the release's request arrives and is
applied, only its reply is withheld.

* the shipped `redis` client (token-checked release, a timeout is `info` and the worker
  retires) stays valid, and its withheld releases prove the fault's shape: each timed
  out, and the lock went to the next client long before the releaser's lease could
  have expired, so the release was applied on the server;
* a planted client whose release, on a timeout, makes sure with a plain DEL
  (`planted_reply_release_lock.py`) deletes the next holder's lock once the reply path
  is back: mutual exclusion is violated, and the checker names the withheld reply.

Both fail if the fault is made a no-op (no rule, or a rule that drops nothing): the
releases then answer in time and the planted DEL never runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lockcheck.history import Op, read_history
from tests.integration.detect import first_showing

pytestmark = [pytest.mark.integration, pytest.mark.needs_root_netns]

REPO = Path(__file__).resolve().parents[2]
PLANTED = f"{REPO / 'tests/integration/planted_reply_release_lock.py'}:make_clients"
TTL_MS = 1000
# one lock name: the next holder is always waiting; the default hold (3x the op timeout,
# 750 ms) outlasts the client's op timeout (250 ms)
ARGS = ("--nemesis", "reply-loss", "--reply-op", "release", "--keys", "1",
        "--ttl-ms", str(TTL_MS), "--nemesis-interval", "1", "--time-limit", "8",
        "--quiet", "2")


def withheld(ops: list[Op]) -> list[Op]:
    return [o for o in ops if o.process == "nemesis" and o.type == "info"
            and o.f == "start-reply-loss" and "skipped" not in o.value]


def released_on_the_server(ops: list[Op], start: Op) -> bool:
    """The withheld release was applied: another process was granted the key before
    the releaser's lease (from its last granted acquire or renew) could have expired."""
    v = start.value
    p, key, sent = v["process"], v["key"], v["stopped_ns"]
    granted_at, pending = None, {}
    for o in ops:
        if o.process == p and o.key == key and o.f in ("acquire", "renew") and o.time < sent:
            if o.type == "invoke":
                pending[o.f] = o.time
            elif o.type == "ok":
                granted_at = pending.get(o.f, granted_at)
    assert granted_at is not None, v
    rivals = [o for o in ops if o.type == "ok" and o.f == "acquire" and o.key == key
              and o.process != p and o.time > sent]
    return bool(rivals) and rivals[0].time < granted_at + TTL_MS * 1_000_000


def test_shipped_client_stays_valid_while_its_applied_releases_go_unanswered(
        module_cli: Any) -> None:
    r = module_cli("test", "--backend", "redis", *ARGS, timeout=120)
    assert r.code == 0, r.explain()
    ops = read_history(r.run_dir / "history.jsonl")
    starts = withheld(ops)
    assert starts, r.explain()
    stops = [o for o in ops if o.type == "event" and o.f == "stop-before-release"]
    # every start aims at the worker that stopped before its release, with its fence
    assert {(o.value["worker"], o.value.get("fence")) for o in starts} <= \
        {(o.worker, o.value.get("fence")) for o in stops}
    for s in starts:
        done = next(o for o in ops if o.process == s.value["process"] and o.f == "release"
                    and o.type != "invoke" and o.time > s.value["stopped_ns"])
        # the reply never came: the client timed out ...
        assert (done.type, done.error) == ("info", "timeout"), (s.value, done)
        # ... though the request was applied (only the return path was cut)
        assert released_on_the_server(ops, s), s.value
    module_cli.assert_no_leftovers(None)


@pytest.mark.detection
def test_planted_release_that_retries_with_del_is_found_and_tied_to_the_reply(
        module_cli: Any) -> None:
    def shows(res: Any) -> bool:
        return res.code == 1 and bool(
            res.results()["checkers"]["mutual-exclusion"].get("withheld_replies"))

    r = first_showing(module_cli, ("--backend", "redis", "--client", PLANTED, *ARGS),
                      shows, tries=2, timeout=120)
    assert r.code == 1, r.explain()
    me = r.results()["checkers"]["mutual-exclusion"]
    assert me["valid"] is False
    ops = read_history(r.run_dir / "history.jsonl")
    hosts = {o.value["targets"][0] for o in withheld(ops)}
    notes = [v["after_withheld_reply"] for v in me["violations"]
             if "after_withheld_reply" in v]
    assert notes and all(n.startswith("after c") and "'s release reply was withheld at"
                         in n for n in notes), me["violations"][:3]
    assert {n.split("'")[0].removeprefix("after ") for n in notes} <= hosts
    # the report says it too
    assert "reply was withheld at" in (r.run_dir / "report.html").read_text()
