"""The Consul database's pure parts: how each agent is started (a server on its data
directory, joined to the others, kept to the run's network) and what the database
tells the clients and the nemesis, without starting any agent."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.db.consul import (
    HTTP_PORT,
    SETTINGS,
    ConsulAgent,
    ConsulDB,
    http_get,
)
from lockcheck.families.consul import BACKENDS, MIN_TTL_MS


@dataclass
class StandInNode:
    """What an agent reads of its node before it is launched."""

    name: str
    address: str
    workdir: Path

    def run(self, *args: Any, **kw: Any) -> Any:
        raise AssertionError("nothing may run on the node in these tests")

    def spawn(self, *args: Any, **kw: Any) -> Any:
        raise AssertionError("nothing may start on the node in these tests")


def nodes(n: int = 3) -> list[StandInNode]:
    return [StandInNode(f"n{i}", f"10.77.3.{i}", Path(f"/tmp/run/n{i}"))
            for i in range(1, n + 1)]


def agent(i: int = 0, n: int = 3) -> ConsulAgent:
    ns = nodes(n)
    me = ns[i]
    return ConsulAgent(me, tuple(m.address for m in ns if m is not me), n)  # type: ignore[arg-type]


def options(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_every_agent_is_a_server_on_its_data_directory_never_dev_mode() -> None:
    argv = agent().argv()
    assert argv[1:3] == ["agent", "-server"]
    assert "-dev" not in argv  # -dev keeps everything in memory: a kill would lose it
    assert options(argv, "-data-dir") == ["/tmp/run/n1/consul/data"]
    assert options(argv, "-bootstrap-expect") == ["3"]
    assert options(argv, "-node") == ["n1"]


def test_an_agent_joins_the_others_not_itself() -> None:
    argv = agent(1).argv()
    assert options(argv, "-retry-join") == ["10.77.3.1", "10.77.3.3"]
    assert options(agent(0, n=5).argv(), "-bootstrap-expect") == ["5"]


def test_an_agent_listens_on_its_own_address_only() -> None:
    argv = agent(2).argv()
    for flag in ("-bind", "-advertise", "-client"):
        assert options(argv, flag) == ["10.77.3.3"], flag
    assert options(argv, "-http-port") == [str(HTTP_PORT)]
    assert agent(2).http_url == f"http://10.77.3.3:{HTTP_PORT}"


def test_nothing_leaves_the_run_and_elections_are_quick() -> None:
    argv = agent().argv()
    hcl = options(argv, "-hcl")
    assert hcl == list(SETTINGS)
    text = " ".join(hcl)
    for needed in ("disable_update_check = true", "disable_anonymous_signature = true",
                   "raft_multiplier = 1", "dns = -1", "grpc = -1", "serf_wan = -1",
                   "https = -1", "ui = false"):
        assert needed in text, needed
    assert "-disable-host-node-id" in argv


def test_the_database_hands_clients_every_agent() -> None:
    db = ConsulDB(None, None)  # type: ignore[arg-type]
    ns = nodes()
    db.servers = {n.name: ConsulAgent(n, (), 3) for n in ns}  # type: ignore[arg-type]
    assert db.client_config() == {"endpoints": [f"http://10.77.3.{i}:{HTTP_PORT}"
                                                for i in (1, 2, 3)]}
    described = db.describe()
    assert described["n2"] == {"service": "consul", "address": "10.77.3.2",
                               "port": HTTP_PORT, "pid": None}
    assert db.primaries() == []  # nobody alive names a leader


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_agent_nobody_answers_for_does_not_serve() -> None:
    port = closed_port()
    assert http_get("127.0.0.1", "/v1/status/leader", port=port, timeout=0.5) is None


def test_the_family_declares_consuls_minimum_ttl() -> None:
    assert MIN_TTL_MS == 10_000
    assert {b.name for b in BACKENDS} == {"consul", "consul-lockindex-fence",
                                          "consul-no-ttl"}
    for b in BACKENDS:
        assert b.min_ttl_ms == 10_000 and b.family == "consul" and b.default_nodes == 3
    by_name = {b.name: b for b in BACKENDS}
    assert not by_name["consul"].unsafe
    assert by_name["consul-lockindex-fence"].unsafe
    assert by_name["consul-lockindex-fence"].options == {"fence": "lock-index"}
    assert by_name["consul-no-ttl"].options == {"ttl": False}
