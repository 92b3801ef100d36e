"""What one backend is: a database, a lock client and a variant's switches, with what
must be installed for them. The table of backends by name is `lockcheck.backends`; a
family of its own (`lockcheck/families/`) builds its entries from this class alone, so
that it imports nothing of the table."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockcheck.errors import BadInput
from lockcheck.registry import load
from lockcheck.servers import Debian, Source, sources_of

if TYPE_CHECKING:
    from lockcheck.cluster.api import DB
    from lockcheck.locks.api import ClientFactory
    from lockcheck.spec import TestSpec


@dataclass(frozen=True, kw_only=True)
class Backend:
    name: str
    family: str  # backends of one family share a database: redis, redlock, zookeeper, ...
    description: str
    db: str  # "module:factory", called as factory(spec, options) -> DB
    client: str  # "module:factory", a `locks.api.ClientFactory`
    library: str  # the PyPI distribution of the client library (its version is reported)
    library_extras: tuple[str, ...] = ()  # the extras pyproject.toml asks of it
    fence: str | None  # where fencing tokens come from; None: the backend issues none
    # a promise about the fence: it counts the grants of each lock name one by one (a
    # counter +1 in the same atomic write as the grant, from 1 on a fresh cluster, never
    # skipping, never repeating, under every fault the backend takes), so a fence
    # number that no ok acquire got was granted to an acquire the client did not report
    # as ok. Only then does the hidden-grants checker run (`checker/hidden_grants.py`);
    # set it only where that was read in the client and measured under faults
    fence_counts_grants: bool = False
    expect: str  # what a run is expected to show, in a sentence
    default_nodes: int = 1
    min_nodes: int = 1
    max_nodes: int | None = None
    min_ttl_ms: int | None = None  # the shortest lease its service grants: the default --ttl-ms
    # the server programs a node runs (a name on PATH, a path, or a path with a `*` for
    # a version folder: `preflight.find_program`) -> where each comes from, as
    # `lockcheck.servers.parse` reads it: a Debian package's name, `npm:name@version`,
    # `deb:suite:package=version`
    servers: Mapping[str, str] = field(default_factory=dict)
    # what `--server` calls the servers above ("redis"), and the other servers the
    # backend can run instead (`--server valkey`), each with its programs and packages
    # as in `servers`; the database starts `<server>-server` and `<server>-sentinel`
    server: str = ""
    alternatives: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # the variant's switches
    unsafe: bool = False  # a variant that exists to show a known failure
    # the client calls `ClientOptions.at_grant_reply` with a grant's replies unread,
    # so `client-pause --pause-at acquire` can stop it there
    stops_at_reply: bool = False
    # the client's release is a check then an act and it calls
    # `ClientOptions.at_release_check` between them, so `client-pause --pause-at release`
    # stops it there; other clients are stopped from outside as they start to release
    stops_at_release: bool = False
    # a server of lockcheck's own rather than a lock service people deploy: runnable
    # without root (`--provider inproc`), left out of test-all's default matrix
    own_server: bool = False

    @property
    def binaries(self) -> tuple[str, ...]:
        """The server programs that must be installed."""
        return tuple(self.servers)

    @property
    def packages(self) -> tuple[str, ...]:
        """The Debian packages (of this distribution) that bring them."""
        return tuple(dict.fromkeys(s.package for s in self.sources().values()
                                   if isinstance(s, Debian)))

    def sources(self, choice: str | None = None) -> dict[str, Source]:
        """Where each server program (of the chosen server) comes from."""
        return sources_of(self.server_programs(choice))

    def choose_server(self, choice: str | None) -> str | None:
        """`--server`'s choice as a run records it: None for the backend's own server,
        or a name from `alternatives`; anything else is refused with one line."""
        if choice is None or choice == self.server:
            return None
        if choice in self.alternatives:
            return choice
        if not self.alternatives:
            raise BadInput(f"--server {choice}: backend {self.name} runs "
                           f"{self.server or 'its own server'} only")
        names = ", ".join([self.server, *self.alternatives])
        raise BadInput(f"unknown --server {choice!r} for backend {self.name}; choose from "
                       f"{names}")

    def server_programs(self, choice: str | None) -> Mapping[str, str]:
        """The programs (-> Debian packages) of the chosen server."""
        chosen = self.choose_server(choice)
        return self.servers if chosen is None else self.alternatives[chosen]

    def make_db(self, spec: TestSpec) -> DB:
        factory: Callable[..., DB] = load(self.db)
        return factory(spec, self.options)

    def client_factory(self) -> ClientFactory:
        factory: ClientFactory = load(self.client)
        return factory

    def prepare(self, db: DB, spec: TestSpec) -> None:
        """The backend's one-off preparation once its database serves (a table, say),
        run from the controller: `options["setup"]` names it as "module:function"."""
        setup = self.options.get("setup")
        if setup:
            load(str(setup))(db.client_config(), spec)

    def library_version(self) -> str:
        try:
            return importlib.metadata.version(self.library)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"
