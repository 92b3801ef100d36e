"""`--client`: resolving a user's factory, refusing bad ones in one line, wrapping its
errors, and what a run says about the client (lockcheck/clients.py, client_notes.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lockcheck import exitcodes
from lockcheck.checker.client_notes import client_notes
from lockcheck.cli import main
from lockcheck.clients import (
    CLIENTS,
    UNMAPPED,
    MappedClient,
    ResolvedClient,
    check_shape,
    client_label,
    probe_factory,
    resolve_client,
    worker_clients,
)
from lockcheck.errors import BadInput
from lockcheck.history import Op, op_from_json
from lockcheck.locks.api import ClientOptions, Definite, Indefinite, Lease, NotOwner
from lockcheck.python_api import make_spec
from lockcheck.spec import TestSpec

OPTS = ClientOptions(ttl_ms=1000, op_timeout_s=0.25)

GOOD = '''
from lockcheck.api import Lease

class C:
    def acquire(self, key): return Lease(key=key, token="t", fence=None, ttl_ms=1, valid_until_ns=1)
    def renew(self, lease): pass
    def release(self, lease): pass
    def close(self): pass

def make_clients(config, keys, opts):
    host, port = config["masters"][0]
    return {k: C() for k in keys}

def as_list(config, keys, opts):
    return [C() for k in keys]

def half(config, keys, opts):
    return {keys[0]: object()}

def raising(config, keys, opts):
    raise RuntimeError("boom")

not_callable = 3
'''


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "goodmod.py").write_text(GOOD)
    (tmp_path / "brokenmod.py").write_text("import no_such_package_lc\n")
    monkeypatch.chdir(tmp_path)
    saved = list(sys.path)
    yield tmp_path
    sys.path[:] = saved
    for m in ("goodmod", "brokenmod"):
        sys.modules.pop(m, None)


def test_a_module_in_the_current_folder_resolves_and_carries_its_folder(modules: Path) -> None:
    r = resolve_client("goodmod:make_clients", "redis")
    assert r.factory == "goodmod:make_clients" and r.path == str(modules)
    assert r.adapter is None and r.label == "goodmod.make_clients"


def test_a_file_path_resolves_to_its_folder(modules: Path) -> None:
    r = resolve_client(f"{modules / 'goodmod.py'}:make_clients", "redis")
    assert r.factory == "goodmod:make_clients" and r.path == str(modules)
    assert client_label("some/dir/goodmod.py:make_clients") == "goodmod.make_clients"


@pytest.mark.parametrize(("text", "words"), [
    ("brokenmod:make_clients", ["cannot import brokenmod", "ModuleNotFoundError",
                                "no_such_package_lc"]),
    ("goodmod:not_callable", ["goodmod.not_callable is not callable", "int"]),
    ("goodmod:nothing_here", ["module goodmod has no nothing_here"]),
    ("goodmod", ["give MODULE:FACTORY"]),
    ("goodmod:", ["give MODULE:FACTORY"]),
    ("missing.py:f", ["no such file missing.py"]),
    ("python-redis-lock", None),  # a shipped adapter on the wrong backend
])
def test_bad_clients_are_one_line(modules: Path, text: str, words: list[str] | None) -> None:
    with pytest.raises(BadInput) as e:
        resolve_client(text, "etcd")
    msg = str(e.value)
    assert "\n" not in msg
    for w in words or ["runs against the servers of redis, not etcd", "--backend redis"]:
        assert w in msg, msg


def test_every_shipped_adapter_names_known_backends() -> None:
    from lockcheck.backends import BACKENDS

    for a in CLIENTS.values():
        assert set(a.backends) <= set(BACKENDS), a.name
        assert a.client.startswith("lockcheck.locks.") and a.expect and a.description


@pytest.mark.parametrize(("factory", "words"), [
    ("goodmod:as_list", ["returned a list", "mapping of each lock name"]),
    ("goodmod:half", ["no client for lock name(s) k1"]),
    ("goodmod:raising", ["cannot use the servers of backend redis", "RuntimeError: boom"]),
])
def test_a_factory_is_probed_with_the_servers_config(modules: Path, factory: str,
                                                     words: list[str]) -> None:
    r = resolve_client(factory, "redis")
    with pytest.raises(BadInput) as e:
        probe_factory(r, "redis", {"masters": [["10.0.0.1", 6379]]}, ["k0", "k1"], OPTS)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_a_factory_that_wants_other_servers_is_refused(modules: Path) -> None:
    r = resolve_client("goodmod:make_clients", "etcd")
    with pytest.raises(BadInput, match=r"cannot use the servers of backend etcd \(its client "
                                       r"config has endpoints\): KeyError"):
        probe_factory(r, "etcd", {"endpoints": ["http://x:2379"]}, ["k0"], OPTS)
    probe_factory(r, "redis", {"masters": [["10.0.0.1", 6379]]}, ["k0"], OPTS)  # fine


def test_a_client_without_the_methods_is_refused() -> None:
    r = ResolvedClient("m:f", "m:f")
    with pytest.raises(BadInput, match=r"without renew\(\), release\(\), close\(\)"):
        check_shape({"k0": type("Half", (), {"acquire": lambda self, k: None})()}, ["k0"], r)


class Raises:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def acquire(self, key: str) -> Lease | None:
        raise self.error

    def renew(self, lease: Lease) -> None:
        raise self.error

    def release(self, lease: Lease) -> None:
        raise self.error

    def close(self) -> None:
        pass


def test_unmapped_exceptions_become_indefinite_with_their_class(
        capsys: pytest.CaptureFixture[str]) -> None:
    c = MappedClient(Raises(ConnectionResetError("peer reset")), set())
    with pytest.raises(Indefinite) as e:
        c.acquire("k")
    assert str(e.value) == f"{UNMAPPED}ConnectionResetError: peer reset"
    with pytest.raises(Indefinite):
        c.acquire("k")
    assert capsys.readouterr().err.count("Traceback") == 1  # once per class, in the log


@pytest.mark.parametrize("error", [Definite("refused"), NotOwner("not-owner"),
                                   Indefinite("timeout")])
def test_lockchecks_own_errors_pass_through(error: Exception) -> None:
    lease = Lease(key="k", token="t", fence=None, ttl_ms=1, valid_until_ns=1)
    c = MappedClient(Raises(error), set())
    for call in (lambda: c.acquire("k"), lambda: c.renew(lease), lambda: c.release(lease)):
        with pytest.raises(type(error)) as e:
            call()
        assert e.value is error


def test_a_worker_wraps_each_client_once(modules: Path) -> None:
    clients = worker_clients("goodmod:make_clients", str(modules),
                             {"masters": [["h", 1]]}, ["k0", "k1"], OPTS)
    assert all(isinstance(c, MappedClient) for c in clients.values())
    assert clients["k0"].acquire("k0") is not None


def ops(*specs: tuple[str, str, Any, str | None]) -> list[Op]:
    out = []
    for i, (type_, f, value, error) in enumerate(specs):
        out.append(op_from_json({"index": i, "time": i, "process": 0, "type": type_, "f": f,
                                 "key": "k", "value": value, **({"error": error} if error
                                                                else {})}))
    return out


def test_notes_say_no_fence_and_how_to_map_errors() -> None:
    h = ops(("invoke", "acquire", None, None), ("ok", "acquire", {"fence": None,
                                                                  "lease": "a"}, None),
            ("invoke", "renew", None, None),
            ("info", "renew", None, f"{UNMAPPED}redis.exceptions.TimeoutError: x"),
            ("invoke", "acquire", None, None),
            ("info", "acquire", None, f"{UNMAPPED}redis.exceptions.TimeoutError: y"))
    n = client_notes(h, {"client": {"name": "mine"}})
    assert n["fence"] == "none: the client returned fence=None on all 1 grants"
    assert n["unmapped_errors"] == {"redis.exceptions.TimeoutError": 2}
    assert "maps none of these errors" in n["notes"][-1]
    assert "Definite" in n["notes"][-1] and "Indefinite" in n["notes"][-1]


def test_notes_count_the_clients_own_fences() -> None:
    h = ops(("ok", "acquire", {"fence": 7, "lease": "a"}, None),
            ("ok", "acquire", {"fence": None, "lease": "b"}, None))
    n = client_notes(h, {"client": {"name": "x", "fence": "a counter"}})
    assert n["fence"] == "the client's own: a counter (1 of 2 grants carried one)"
    assert n["unmapped_errors"] == {} and len(n["notes"]) == 1


def test_specs_from_keywords() -> None:
    s = make_spec(backend="redlock", client="redlock-py", nemesis="client-pause,kill",
                  hold_ms="100-200", time_limit=20)
    assert s.nemesis == ("client-pause", "kill") and s.hold_ms == (100, 200)
    assert s.nodes == 5 and s.name == "redlock+redlock-py-mutex-client-pause+kill"
    assert make_spec(s, nemesis=["partition"]).nemesis == ("partition",)
    with pytest.raises(BadInput, match=r"unknown option.*nemeses"):
        make_spec(nemeses="none")
    assert TestSpec(client="a/b/c.py:f").name == "redis+c.f-mutex-partition"


def test_cli_refuses_a_client_that_does_not_import(modules: Path) -> None:
    r = CliRunner().invoke(main, ["test", "--client", "brokenmod:make_clients",
                                  "--nemesis", "none"], catch_exceptions=False)
    assert r.exit_code == exitcodes.BAD_INPUT
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "cannot import brokenmod" in lines[0], r.output
    r = CliRunner().invoke(main, ["client-check", "goodmod:not_callable"],
                           catch_exceptions=False)
    assert r.exit_code == exitcodes.BAD_INPUT and "not callable" in r.output


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_each_shipped_adapter_loads(name: str) -> None:
    from lockcheck.registry import load

    a = CLIENTS[name]
    r = resolve_client(name, a.backends[0])
    assert r.adapter is a and callable(load(a.client))


def test_the_public_api_is_the_internal_one() -> None:
    import lockcheck
    import lockcheck.api as api
    import lockcheck.locks.api as internal

    assert api.API_VERSION == 1
    for name in ("LockClient", "Lease", "Definite", "Indefinite", "NotOwner", "ClientOptions",
                 "lease_deadline", "LockClientError"):
        assert getattr(api, name) is getattr(internal, name), name
    assert api.RunResult.__name__ == "RunResult" and api.TestSpec is TestSpec
    with pytest.raises(BadInput, match="unknown option"):
        lockcheck.run(backend="redis", nemeses="none")


def test_an_unsafe_result_explains_itself() -> None:
    from lockcheck.python_api import RunResult, UnsafeRun

    r = RunResult(valid=False, summary="mutual exclusion violated: 2 overlapping critical "
                  "sections on 1 key", checkers={
                      "mutual-exclusion": {"valid": False, "violation_count": 2, "sections": 9,
                                           "violations": [{"key": "k0", "workers": [1, 0]}]},
                      "lease-safety": {"valid": True}},
                  metrics={}, results_dir=Path("/r"), report=Path("/r/report.html"),
                  spec=TestSpec(), results={})
    with pytest.raises(UnsafeRun) as e:
        r.assert_safe()
    assert str(e.value).splitlines() == [
        "lockcheck redis-mutex-partition: INVALID: mutual exclusion violated: 2 overlapping "
        "critical sections on 1 key",
        "  mutual-exclusion: INVALID: 2 overlaps in 9 critical sections; the first: key k0, "
        "workers [1, 0]",
        "report: /r/report.html"]
    RunResult(valid=True, summary="", checkers={}, metrics={}, results_dir=Path("/r"),
              report=None, spec=TestSpec(), results={}).assert_safe()
