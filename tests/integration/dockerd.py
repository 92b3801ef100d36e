"""A Docker daemon for the docker provider's tests, started so that it cannot hurt the
machine it shares with the local provider (and with other people's tests).

    dockerd --iptables=false --ip-forward=false --ip-masq=false --ip6tables=false
            --bridge=none --data-root /var/lib/lockcheck-docker
            --exec-root /run/lockcheck-docker/exec --host unix:///run/lockcheck-docker/...

A default dockerd sets the FORWARD policy to DROP and turns on ip_forward, which cuts
the local provider's bridges (infra.md §6); this one touches neither, nor any other
firewall rule, and makes no `docker0`. Its data root is kept between runs: the node
image is the cache (`lockcheck images build` skips an image built from the same
Dockerfile). Everything else goes at `stop`: the daemon and its containerd (by PID),
their mounts and cgroups, `/run/docker` and `/etc/docker/key.json` if they were not
there before. `stop` also checks that the firewall and ip_forward are as they were.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DATA_ROOT = Path("/var/lib/lockcheck-docker")
RUN_ROOT = Path("/run/lockcheck-docker")
PACKAGES = ("docker.io", "debootstrap")
SAFE_FLAGS = ("--iptables=false", "--ip-forward=false", "--ip-masq=false",
              "--ip6tables=false", "--bridge=none", "--group", "root",
              "--cgroup-parent", "/lockcheck-docker")


def firewall() -> tuple[str, str]:
    """This machine's rules (without counters) and ip_forward."""
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    lines = [ln for ln in rules.splitlines() if not ln.startswith("#")]
    lines = [ln.split(" [")[0] if ln.startswith(":") else ln for ln in lines]
    return "\n".join(lines), Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()


def missing_packages() -> list[str]:
    out = []
    for p in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                           text=True)
        if "install ok installed" not in r.stdout:
            out.append(p)
    return out


def install_packages() -> str | None:
    """apt-get install what is missing (no service may start meanwhile); why not, or None."""
    missing = missing_packages()
    if not missing:
        return None
    had_group = subprocess.run(["getent", "group", "docker"], capture_output=True).returncode == 0
    made = not Path("/usr/sbin/policy-rc.d").exists()
    try:
        if made:
            Path("/usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
            os.chmod("/usr/sbin/policy-rc.d", 0o755)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                            *missing], capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env,
                           timeout=300)
            r = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                *missing], capture_output=True, text=True, env=env,
                               timeout=600)
        if r.returncode != 0:
            return f"apt-get install {' '.join(missing)} failed: {r.stderr.strip()[-200:]}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"apt-get install {' '.join(missing)} failed: {e}"
    finally:
        if made:
            Path("/usr/sbin/policy-rc.d").unlink(missing_ok=True)
        # the package makes a `docker` group; our daemon does not use it (--group root)
        if not had_group:
            subprocess.run(["groupdel", "docker"], capture_output=True)
    return None


@dataclass
class Dockerd:
    popen: subprocess.Popen[bytes] | None = None
    lock_fd: int | None = None
    before: tuple[str, str] = ("", "")
    had: dict[str, bool] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return RUN_ROOT / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 60.0) -> Dockerd:
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        # one such daemon per machine: a second test session waits for the first
        self.lock_fd = os.open(DATA_ROOT, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        self.before = firewall()
        self.had = {p: Path(p).exists() for p in ("/run/docker", "/etc/docker/key.json",
                                                  "/etc/docker", "/run/containerd")}
        RUN_ROOT.mkdir(parents=True, exist_ok=True)
        log = (RUN_ROOT / "dockerd.log").open("ab")
        self.popen = subprocess.Popen(
            ["dockerd", *SAFE_FLAGS, "--data-root", str(DATA_ROOT),
             "--exec-root", str(RUN_ROOT / "exec"), "--pidfile", str(RUN_ROOT / "dockerd.pid"),
             "--host", self.host],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        # the SDK, not the `docker` CLI: Debian 13's docker.io no longer brings the CLI
        while not self.answers():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                tail = (RUN_ROOT / "dockerd.log").read_text()[-600:]
                self.stop()
                raise RuntimeError(f"dockerd did not start: {tail}")
            time.sleep(0.2)
        return self

    def answers(self) -> bool:
        import docker
        import docker.errors

        client = None
        try:
            client = docker.DockerClient(base_url=self.host, timeout=2)
            return bool(client.ping())
        except (docker.errors.DockerException, OSError):
            return False
        finally:
            if client is not None:
                client.close()

    def _containerd_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((RUN_ROOT / "exec/containerd/containerd.pid").read_text())
        return None

    def stop(self) -> list[str]:
        """Stop it and remove what it left; returns what could not be put back."""
        problems: list[str] = []
        containerd = self._containerd_pid()
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if containerd is not None:  # it exits with dockerd; if not, by its PID
            for _ in range(50):
                if not Path(f"/proc/{containerd}").exists():
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(containerd, signal.SIGKILL)
        self._unmount()
        shutil.rmtree(RUN_ROOT, ignore_errors=True)
        for path in ("/run/docker", "/run/containerd"):
            if not self.had.get(path) and Path(path).exists():
                shutil.rmtree(path, ignore_errors=True)
        if not self.had.get("/etc/docker/key.json"):
            Path("/etc/docker/key.json").unlink(missing_ok=True)
        for cg in Path("/sys/fs/cgroup").glob("*/lockcheck-docker"):
            for d in sorted(cg.rglob("*"), key=lambda p: len(str(p)), reverse=True):
                if d.is_dir():
                    with contextlib.suppress(OSError):
                        d.rmdir()
            with contextlib.suppress(OSError):
                cg.rmdir()
            if cg.exists():
                problems.append(f"cgroup {cg} is still there")
        if self.before != ("", "") and firewall() != self.before:
            problems.append("the machine's firewall or ip_forward changed")
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        return problems

    def _unmount(self) -> None:
        with open("/proc/mounts") as fh:
            targets = [line.split()[1] for line in fh]
        mine = [t for t in targets if t.startswith((str(RUN_ROOT), str(DATA_ROOT)))]
        for t in sorted(mine, key=len, reverse=True):
            subprocess.run(["umount", "-l", t], capture_output=True)
