"""A TCP proxy that holds every chunk for a while: latency without netem.

    python -m lockcheck.cluster.delay_proxy ADDR PORT TARGET_ADDR TARGET_PORT CONTROL_PORT

It runs on a node, in front of the node's service (clients' connections reach it
through `Node.intercept`), and forwards each connection to the service. Each chunk,
in either direction, is held for half the current delay after it arrived, so a round
trip gains the whole delay; chunks keep their order. The delay is set at run time on
the control port, by a line "250" (ms), answered "delay 250" once in force. It is a
daemon of the node like its server, so it goes with the run (teardown, or the next
run's reap).

Bounded: at most `MAX_QUEUED` chunks wait per direction (then it stops reading, and
TCP pushes back), and the delay itself is capped (`spec.MAX_DELAY_MS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

MAX_QUEUED = 256  # chunks held per direction of a connection
CHUNK = 65536
MAX_DELAY_S = 10.0


class Delay:
    def __init__(self) -> None:
        self.seconds = 0.0


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               delay: Delay) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(MAX_QUEUED)

    async def read() -> None:
        last = 0.0
        try:
            while data := await reader.read(CHUNK):
                # half the round-trip delay on the way through; never overtake
                last = max(last, loop.time() + delay.seconds / 2)
                await queue.put((last, data))
        finally:
            await queue.put((0.0, b""))

    async def write() -> None:
        try:
            while True:
                at, data = await queue.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, at - loop.time()))
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    await asyncio.gather(read(), write(), return_exceptions=True)


async def serve(listen: tuple[str, int], target: tuple[str, int], control: int) -> None:
    delay = Delay()

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection(*target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cr, sw, delay), pump(sr, cw, delay),
                             return_exceptions=True)

    async def command(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while line := await r.readline():
            try:
                ms = float(line)
            except ValueError:
                w.write(f"error: not a delay in ms: {line.strip()!r}\n".encode())
            else:
                delay.seconds = min(max(0.0, ms / 1000.0), MAX_DELAY_S)
                w.write(f"delay {round(delay.seconds * 1000)}\n".encode())
            await w.drain()
        w.close()

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    controls = await asyncio.start_server(command, listen[0], control, reuse_address=True)
    async with server, controls:
        await asyncio.gather(server.serve_forever(), controls.serve_forever())


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    asyncio.run(serve((argv[0], int(argv[1])), (argv[2], int(argv[3])), int(argv[4])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
