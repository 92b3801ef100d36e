"""A probe that lives in one namespace and measures real traffic on request.

    python prober.py TCP_PORT UDP_PORT

It accepts TCP connections on TCP_PORT and counts UDP datagrams on UDP_PORT, and
answers one JSON line per command line on stdin:

    tcp ADDR...             -> {"ADDR": true/false}: a TCP connect to ADDR:TCP_PORT
    send ADDR N             -> {"sent": N}: N UDP datagrams to ADDR:UDP_PORT
    count                   -> {"received": N}: datagrams received since the last count
    rtt ADDR PORT N         -> {"ms": [...]}: N redis PINGs on one connection, each
                               round trip in ms (or {"error": ...})

Only addresses of the test's own namespaces are ever given to it.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

CONNECT_TIMEOUT = 0.3


def serve_tcp(port: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(128)
    while True:
        s.accept()[0].close()


class Counter:
    def __init__(self, port: int) -> None:
        self.n = 0
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(("0.0.0.0", port))
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while True:
            self.sock.recv(64)
            with self.lock:
                self.n += 1

    def take(self) -> int:
        with self.lock:
            n, self.n = self.n, 0
        return n


def connects(addr: str, port: int) -> bool:
    try:
        socket.create_connection((addr, port), timeout=CONNECT_TIMEOUT).close()
        return True
    except OSError:
        return False


def tcp(addrs: list[str], port: int) -> dict[str, bool]:
    out: dict[str, bool] = {}
    threads = [threading.Thread(target=lambda a=a: out.__setitem__(a, connects(a, port)))
               for a in addrs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def send(addr: str, port: int, n: int) -> dict[str, int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        s.sendto(b"x" * 32, (addr, port))
        if i % 50 == 49:
            time.sleep(0.002)  # never faster than the receiver drains its buffer
    s.close()
    time.sleep(0.1)  # the last ones arrive
    return {"sent": n}


def rtt(addr: str, port: int, n: int) -> dict[str, object]:
    try:
        with socket.create_connection((addr, port), timeout=5) as s:
            s.settimeout(5)
            out = []
            for _ in range(n):
                t = time.monotonic()
                s.sendall(b"PING\r\n")
                buf = b""
                while not buf.endswith(b"\r\n"):
                    chunk = s.recv(64)
                    if not chunk:
                        return {"error": "closed"}
                    buf += chunk
                out.append((time.monotonic() - t) * 1000)
            return {"ms": out}
    except OSError as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main() -> None:
    tcp_port, udp_port = int(sys.argv[1]), int(sys.argv[2])
    threading.Thread(target=serve_tcp, args=(tcp_port,), daemon=True).start()
    counter = Counter(udp_port)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "tcp":
            reply: object = tcp(args, tcp_port)
        elif cmd == "send":
            reply = send(args[0], udp_port, int(args[1]))
        elif cmd == "count":
            reply = {"received": counter.take()}
        elif cmd == "rtt":
            reply = rtt(args[0], int(args[1]), int(args[2]))
        else:
            reply = {"error": f"unknown command {cmd}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
