"""Stand-in SSH hosts for the ssh provider's tests: Debian's sshd in namespaces here.

Each host is a network namespace on a bridge of its own (`lcs<id>`, a free /24 of
10.79.0.0/16), with an sshd started from a config file, host key and authorized keys
in the test's temp folder, on port 2222, under a small init (`reaper.py`). Nothing of
the machine's own SSH setup is read or changed; the only shared thing is the
privilege-separation folder /run/sshd that sshd insists on, made if missing and
removed again if we made it. Names (`lcs-<id>-h1`, bridge `lcs<id>`) are not
lockcheck's own (`lc-<id>-...`, `lcb<id>`), so no lockcheck reap ever takes them.

These hosts share this machine's kernel, clock and file system: they are what the
ssh provider must recognize as "this very machine".
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SSH_PORT = 2222
REAPER = Path(__file__).with_name("reaper.py")
PRIVSEP = Path("/run/sshd")


def ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=check)


def free_subnet() -> ipaddress.IPv4Network:
    out = ip("-o", "-4", "addr", "show").stdout
    used = {ipaddress.IPv4Interface(m).network
            for m in re.findall(r"inet (\d+\.\d+\.\d+\.\d+/\d+)", out)}
    for third in range(256):
        net = ipaddress.IPv4Network(f"10.79.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 in 10.79.0.0/16")


def sshd_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (stand-in hosts are network namespaces)"
    for b in ("/usr/sbin/sshd", shutil.which("ssh-keygen") or "ssh-keygen"):
        if not Path(b).exists():
            return f"{b} not found (scripts/install --dev installs openssh-server)"
    return None


@dataclass
class Host:
    name: str
    address: str
    netns: str
    reaper: subprocess.Popen[bytes]


@dataclass
class StandIns:
    """N stand-in hosts; `nodes_file(...)` writes a lockcheck nodes file for them."""

    dir: Path
    n: int
    hid: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: list[Host] = field(default_factory=list)
    subnet: ipaddress.IPv4Network | None = None
    made_privsep: bool = False

    @property
    def bridge(self) -> str:
        return f"lcs{self.hid}"

    @property
    def key(self) -> Path:
        return self.dir / "id_test"

    @property
    def host_key(self) -> Path:
        return self.dir / "host_ed25519"

    def client_addresses(self, n: int) -> list[str]:
        assert self.subnet is not None
        return [str(self.subnet.network_address + 101 + i) for i in range(n)]

    def start(self) -> StandIns:
        self.dir.mkdir(parents=True, exist_ok=True)
        for path in (self.key, self.host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lockcheck-test",
                            "-f", str(path)], check=True)
        (self.dir / "authorized_keys").write_text((self.dir / "id_test.pub").read_text())
        if not PRIVSEP.exists():
            PRIVSEP.mkdir(mode=0o755)
            self.made_privsep = True
        self.subnet = net = free_subnet()
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{net.network_address + 1}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i in range(self.n):
            name, addr = f"h{i + 1}", str(net.network_address + 11 + i)
            ns, veth = f"lcs-{self.hid}-{name}", f"lcs{self.hid}{name}"
            ip("netns", "add", ns)
            ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", veth, "master", self.bridge, "up")
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            cfg = self.dir / f"sshd_{name}.conf"
            cfg.write_text(self.sshd_config(name, addr))
            log = (self.dir / f"sshd_{name}.log").open("ab")
            reaper = subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, str(REAPER), "/usr/sbin/sshd",
                 "-D", "-e", "-f", str(cfg)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            log.close()
            self.hosts.append(Host(name, addr, ns, reaper))
        for h in self.hosts:
            self._wait_listening(h)
        return self

    def sshd_config(self, name: str, addr: str) -> str:
        d = self.dir
        return "\n".join([
            f"Port {SSH_PORT}", f"ListenAddress {addr}", f"HostKey {self.host_key}",
            f"PidFile {d / f'sshd_{name}.pid'}", f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "UseDNS no",
            "PrintMotd no", "MaxSessions 64", "MaxStartups 64", "LogLevel INFO",
            "Subsystem sftp internal-sftp", ""])

    def _wait_listening(self, h: Host, timeout: float = 15.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if h.reaper.poll() is not None:
                raise RuntimeError(f"sshd on {h.name} exited: "
                                   f"{(self.dir / f'sshd_{h.name}.log').read_text()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection(
                    (h.address, SSH_PORT), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"sshd on {h.name} did not answer in {timeout} s")

    def known_hosts(self, path: Path | None = None) -> Path:
        """A known_hosts file with every stand-in's key."""
        path = path or self.dir / "known_hosts"
        pub = (self.dir / "host_ed25519.pub").read_text().split()
        path.write_text("".join(f"[{h.address}]:{SSH_PORT} {pub[0]} {pub[1]}\n"
                                for h in self.hosts))
        return path

    def nodes_file(self, *, clients: int | None = 10, known_hosts: Path | None = None,
                   name: str = "nodes.json", extra_hosts: list[dict[str, object]] | None = None
                   ) -> Path:
        """A nodes file for these hosts; `clients`: that many client namespace addresses
        on the hosts' bridge (None: clients as plain processes)."""
        data: dict[str, object] = {
            "user": "root", "port": SSH_PORT, "key": str(self.key),
            "known_hosts": str(known_hosts or self.known_hosts()),
            "hosts": [{"name": f"n{i + 1}", "address": h.address}
                      for i, h in enumerate(self.hosts)] + list(extra_hosts or [])}
        if clients:
            data["clients"] = {"link": self.bridge,
                               "addresses": self.client_addresses(clients)}
        path = self.dir / name
        path.write_text(json.dumps(data, indent=1))
        return path

    # -- looking at the hosts ------------------------------------------------------------

    def processes(self, h: Host) -> list[str]:
        """Command lines of every process in the host's namespace but its init, sshd
        and sshd's own session processes."""
        pids = [int(p) for p in ip("netns", "pids", h.netns, check=False).stdout.split()]
        out = []
        for pid in pids:
            if pid == h.reaper.pid:
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            # an empty command line is a process on its way out (its memory is already
            # gone: an sshd session child just after `cluster down`), not one left behind
            # (OpenSSH 9.8 and newer, as in Debian 13, names a session's processes
            # sshd-session and sshd-auth)
            if state in ("Z", "X") or not cmd.strip() or cmd.startswith(
                    ("/usr/sbin/sshd", "sshd:", "sshd-session:", "sshd-auth:")):
                continue
            out.append(f"{h.name}: pid {pid} {cmd.strip()[:100]}")
        return out

    def rules(self, h: Host) -> list[str]:
        """iptables lines in the host's namespace that are not the empty defaults."""
        r = subprocess.run(["ip", "netns", "exec", h.netns, "iptables-save"],
                           capture_output=True, text=True)
        return [f"{h.name}: {line}" for line in r.stdout.splitlines()
                if line.startswith(("-A", ":lc-", "-N"))]

    def leftovers(self, run_id: str) -> list[str]:
        out: list[str] = []
        for h in self.hosts:
            out += self.processes(h) + self.rules(h)
        if Path(f"/var/tmp/lockcheck-{run_id}").exists():
            out.append(f"folder /var/tmp/lockcheck-{run_id}")
        return out

    def diagnosis(self) -> str:
        """What each host's sshd said last and which TCP connections it has: for a
        failure to say why a host could not be reached."""
        out = []
        for h in self.hosts:
            log = self.dir / f"sshd_{h.name}.log"
            tail = log.read_text(errors="replace").splitlines()[-8:] if log.exists() else []
            socks = ip("netns", "exec", h.netns, "ss", "-tanp", check=False).stdout
            out.append(f"== {h.name} ({h.address}) sshd alive: {h.reaper.poll() is None}\n"
                       + "\n".join(tail) + "\n-- sockets --\n" + socks[-1500:])
        return "\n".join(out)

    # -- the end ----------------------------------------------------------------------------

    def stop(self) -> None:
        for h in self.hosts:
            # anything lockcheck left running on a "host" is ours to end: it runs in
            # our namespace, under our init
            for pid in ip("netns", "pids", h.netns, check=False).stdout.split():
                if int(pid) != h.reaper.pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            if h.reaper.poll() is None:
                h.reaper.terminate()
            try:
                h.reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                h.reaper.kill()
                h.reaper.wait()
            ip("netns", "del", h.netns, check=False)
        self.hosts.clear()
        ip("link", "del", self.bridge, check=False)
        if self.made_privsep:
            with contextlib.suppress(OSError):
                PRIVSEP.rmdir()
            self.made_privsep = False


@contextlib.contextmanager
def standins(tmp: Path, n: int) -> Iterator[StandIns]:
    s = StandIns(tmp, n)
    try:
        yield s.start()
    finally:
        s.stop()
