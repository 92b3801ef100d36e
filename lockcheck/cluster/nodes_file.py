"""The ssh provider's `--nodes-file`: which hosts, and how to log in to each (YAML or JSON).

    user: vagrant                # defaults for every host (each may override them)
    port: 22
    key: keys/id_ed25519         # relative paths are relative to this file's folder
    known_hosts: ~/.ssh/known_hosts
    clients:                     # optional: client workers in namespaces of this machine
      link: virbr1               #   on this interface (a bridge: veth ports; else macvlan)
      addresses: 192.168.56.201-192.168.56.230
    hosts:
      - {name: n1, address: 192.168.56.11}
      - {name: n2, address: 192.168.56.12, key: other_key}

Without `clients`, workers are plain processes of the controller: partitions then cut
between nodes only. Every problem is one line naming the file and the entry.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcheck.errors import BadInput

HOST_KEYS = ("name", "address", "port", "user", "key", "sudo")
TOP_KEYS = ("user", "port", "key", "sudo", "known_hosts", "clients", "hosts",
            "connect_timeout")
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")


@dataclass(frozen=True)
class Host:
    name: str  # the node's name in lockcheck (n1, ...)
    address: str  # IPv4: where lockcheck logs in, and where the node's services listen
    port: int
    user: str
    key: str | None  # a private key file; None: the SSH agent and ~/.ssh's default keys
    sudo: bool  # prefix every command with `sudo -n` (a user that is not root)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "port": self.port,
                "user": self.user, "key": self.key, "sudo": self.sudo}


@dataclass(frozen=True)
class ClientLink:
    link: str  # an interface of the controller on the hosts' network
    addresses: tuple[str, ...]  # free addresses there, one per client
    prefixlen: int


@dataclass(frozen=True)
class NodesFile:
    path: str
    hosts: tuple[Host, ...]
    known_hosts: str
    clients: ClientLink | None
    connect_timeout: float


def _bad(path: Path, what: str) -> BadInput:
    return BadInput(f"--nodes-file {path}: {what}")


def _ipv4(path: Path, where: str, text: object) -> str:
    if not isinstance(text, str) or not text:
        raise _bad(path, f"{where}: address must be a host name or an IPv4 address")
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        pass
    try:
        return socket.gethostbyname(text)
    except OSError:
        raise _bad(path, f"{where}: cannot resolve {text!r}") from None


def parse_addresses(path: Path, spec: object) -> list[str]:
    """A list of addresses, or a range "A-B" of one network."""
    if isinstance(spec, list):
        return [_ipv4(path, "clients", a) for a in spec]
    if isinstance(spec, str) and "-" in spec:
        lo_s, hi_s = (s.strip() for s in spec.split("-", 1))
        try:
            lo, hi = ipaddress.IPv4Address(lo_s), ipaddress.IPv4Address(hi_s)
        except ValueError:
            raise _bad(path, f"clients: bad address range {spec!r}") from None
        if hi < lo or int(hi) - int(lo) > 1000:
            raise _bad(path, f"clients: address range {spec!r} is empty or too large")
        return [str(ipaddress.IPv4Address(a)) for a in range(int(lo), int(hi) + 1)]
    raise _bad(path, "clients.addresses must be a list or a range like 10.0.0.101-10.0.0.150")


def _key_path(path: Path, where: str, key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str):
        raise _bad(path, f"{where}: key must be a file name")
    p = Path(key).expanduser()
    if not p.is_absolute():
        p = path.parent / p
    if not p.is_file():
        raise _bad(path, f"{where}: key file {p} does not exist")
    return str(p.resolve())


def _port(path: Path, where: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
        raise _bad(path, f"{where}: port must be a number from 1 to 65535")
    return v


def read(path_text: str) -> dict[str, Any]:
    path = Path(path_text).expanduser()
    try:
        text = path.read_text()
    except OSError as e:
        raise _bad(path, f"cannot read it: {e.strerror or e}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (ValueError, Exception) as e:  # yaml.YAMLError is an Exception
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _bad(path, f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                         f"{first}") from None
    if not isinstance(data, dict):
        raise _bad(path, "must be a mapping with a `hosts` list")
    return data


def load(path_text: str) -> NodesFile:
    path = Path(path_text).expanduser().resolve()
    data = read(str(path))
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise _bad(path, f"unknown key {unknown[0]!r} (known: {', '.join(TOP_KEYS)})")
    entries = data.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise _bad(path, "`hosts` must be a non-empty list")
    defaults = {k: data[k] for k in ("user", "port", "key", "sudo") if k in data}
    hosts: list[Host] = []
    for i, entry in enumerate(entries):
        where = f"hosts[{i}]"
        if isinstance(entry, str):
            entry = {"address": entry}
        if not isinstance(entry, dict):
            raise _bad(path, f"{where} must be a mapping or an address")
        bad = sorted(set(entry) - set(HOST_KEYS))
        if bad:
            raise _bad(path, f"{where}: unknown key {bad[0]!r} (known: {', '.join(HOST_KEYS)})")
        e = {**defaults, **entry}
        name = e.get("name", f"n{i + 1}")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise _bad(path, f"{where}: name must be short, lower-case, like n1")
        user = e.get("user", "root")
        if not isinstance(user, str) or not user:
            raise _bad(path, f"{where}: user must be a name")
        sudo = e.get("sudo", user != "root")
        if not isinstance(sudo, bool):
            raise _bad(path, f"{where}: sudo must be true or false")
        hosts.append(Host(name=name, address=_ipv4(path, where, e.get("address")),
                          port=_port(path, where, e.get("port", 22)), user=user,
                          key=_key_path(path, where, e.get("key")), sudo=sudo))
    for attr in ("name", "address"):
        seen: set[str] = set()
        for h in hosts:
            v = getattr(h, attr)
            if v in seen:
                raise _bad(path, f"two hosts have the {attr} {v}")
            seen.add(v)
    known = data.get("known_hosts", "~/.ssh/known_hosts")
    if not isinstance(known, str):
        raise _bad(path, "known_hosts must be a file name")
    known_path = Path(known).expanduser()
    if not known_path.is_absolute():
        known_path = path.parent / known_path
    timeout = data.get("connect_timeout", 10)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise _bad(path, "connect_timeout must be a positive number of seconds")
    return NodesFile(str(path), tuple(hosts), str(known_path), _clients(path, data),
                     float(timeout))


def _clients(path: Path, data: dict[str, Any]) -> ClientLink | None:
    c = data.get("clients")
    if c is None:
        return None
    if not isinstance(c, dict) or not isinstance(c.get("link"), str):
        raise _bad(path, "clients must be a mapping with `link` (an interface of this "
                         "machine) and `addresses`")
    addrs = parse_addresses(path, c.get("addresses"))
    prefix = c.get("prefixlen", 24)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or not 8 <= prefix <= 30:
        raise _bad(path, "clients.prefixlen must be a number from 8 to 30")
    if set(c) - {"link", "addresses", "prefixlen"}:
        raise _bad(path, "clients takes link, addresses and prefixlen only")
    return ClientLink(c["link"], tuple(addrs), prefix)
