"""Providers by name: who makes a run's cluster, and who cleans up after dead runs.

`local` (network namespaces on this machine), `docker` (containers on a network
lockcheck creates), `ssh` (hosts listed in a nodes file) and `inproc` (plain processes
on loopback, without root). Adding one is one module
with a `PROVIDER` constant and its "module:attr" entry in `PROVIDERS`; the runner and
the CLI only go through this table. Entries are loaded when asked for, so this module
imports no provider: the providers import it, for `Provider`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockcheck.cluster.api import Cluster
from lockcheck.cluster.state import Registry
from lockcheck.errors import BadInput
from lockcheck.registry import load

if TYPE_CHECKING:
    from lockcheck.preflight import Finding
    from lockcheck.spec import TestSpec


@dataclass(frozen=True, kw_only=True)
class ClusterRequest:
    """What a run asks of a provider."""

    nodes: int
    clients: int
    registry: Registry
    subnet: str | None = None
    kind: str = "test"  # "test", or "cluster" for one left running on purpose
    # the provider's own options (`--nodes-file`, `--accept-new-host-keys`, `--image`)
    options: Mapping[str, Any] = field(default_factory=dict)
    # Debian packages the servers need, for providers that install them on the nodes
    packages: tuple[str, ...] = ()
    # the folder of servers lockcheck installed itself (`lockcheck.servers.ROOT`), when the
    # backend runs one: nodes must see it at the same path (the docker provider mounts it)
    server_root: str | None = None
    say: Callable[[str], None] = lambda line: None  # a line for the user (a new host key)


@dataclass(frozen=True, kw_only=True)
class ProviderOption:
    """A command-line option of one provider. `lockcheck test`, `cluster up` and `doctor`
    offer it; its value reaches the provider as `ClusterRequest.options[key]` (and
    `TestSpec.provider_options`)."""

    flag: str  # "--nodes-file"
    help: str
    is_flag: bool = False
    path: bool = False  # a file: passed on as an absolute path

    @property
    def key(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True, kw_only=True)
class Provider:
    name: str
    description: str
    make: Callable[[ClusterRequest], Cluster]
    # remove what dead runs left behind (never a live run, never a cluster kept on
    # purpose); returns the run ids cleaned
    reap: Callable[[Registry], list[str]]
    # `lockcheck cluster down`: also the clusters that were left running
    remove_kept: Callable[[Registry], list[str]]
    prerequisites: Callable[[], str | None]  # why this provider cannot run here, or None
    max_nodes: int
    max_clients: int
    check_subnet: Callable[[str], None] = lambda subnet: None  # raises BadInput
    # before anything exists: the provider's options and what it can do for this spec
    # (a nodes file that does not parse, a host that cannot be logged in to, a missing
    # image, a fault it cannot inject); raises BadInput; says what the user must know
    check: Callable[[TestSpec, Callable[[str], None]], None] = lambda spec, say: None
    # nemesis -> why this provider can never inject it (refused before the run)
    refused: Mapping[str, str] = field(default_factory=dict)
    # nemesis -> how this provider does it where that differs from the local provider
    notes: Mapping[str, str] = field(default_factory=dict)
    options: tuple[ProviderOption, ...] = ()
    # where `cluster up` says a node runs ("{run_id}" and "{node}" filled in); "": the
    # provider's name
    place: str = ""
    # its nodes can run the servers lockcheck installed under `lockcheck.servers.ROOT`
    # on this machine (they share its files, or it mounts the folder); False: a backend
    # with such a server is refused before anything starts
    reaches_server_root: bool = True
    # the PIDs it registers are this machine's: `cluster status` can tell them up or down
    pids_here: bool = False
    # `lockcheck doctor`: what this provider needs on this machine, given its options;
    # `asked` when the user named it (--provider), else only what is worth showing
    # anyway (findings marked optional do not fail the doctor)
    doctor: Callable[[Mapping[str, Any], bool], list[Finding]] = lambda options, asked: []


PROVIDERS: dict[str, str] = {
    "local": "lockcheck.cluster.netns:PROVIDER",
    "docker": "lockcheck.cluster.containers:PROVIDER",
    "ssh": "lockcheck.cluster.ssh:PROVIDER",
    "inproc": "lockcheck.cluster.inproc:PROVIDER",
}


def provider(name: str) -> Provider:
    try:
        entry = PROVIDERS[name]
    except KeyError:
        raise BadInput(f"unknown provider {name!r}; available: {', '.join(PROVIDERS)}") from None
    p: Provider = load(entry)
    return p


def all_providers() -> list[Provider]:
    return [provider(name) for name in PROVIDERS]


def provider_options(given: Mapping[str, Any], name: str | None) -> dict[str, Any]:
    """The providers' options the user gave (by key; None or False: not given), as the
    options of provider `name`: one that belongs to another provider is refused with
    one line. With no name (`doctor` without --provider) each goes to its own."""
    out: dict[str, Any] = {}
    for p in all_providers():
        for opt in p.options:
            value = given.get(opt.key)
            if value is None or value is False:
                continue
            if name is not None and p.name != name:
                raise BadInput(f"{opt.flag} is an option of --provider {p.name}")
            out[opt.key] = str(Path(value).resolve()) if opt.path else value
    return out


def check_provider(p: Provider, spec: TestSpec,
                   say: Callable[[str], None] = lambda line: None) -> None:
    """Refuse, with one line, a fault this provider cannot inject or options it cannot
    use, before anything is created (exit 254, like a backend's missing capability)."""
    for n in spec.nemesis:
        if n in p.refused:
            raise BadInput(f"--nemesis {n} is not available with --provider {p.name}: "
                           f"{p.refused[n]}")
    p.check(spec, say)
