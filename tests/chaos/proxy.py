"""A TCP proxy the fault suite puts between the nodes and a service (the
receiver, or each backend of the partition node's links): it can hold the
service's answers back (``set_delay``: a slow receiver, seconds per answer,
while the request itself reaches the service at once, so the receiver's log
keeps the true arrival time) or drop connections (``set_loss``: a lossy
link). This kernel has no ``netem``: delay and loss come from here;
partitions are links taken down (``netns``).

A connection its client gives up on before the service accepted it is not
carried on (the client's own connection attempt would have ended with it).
It runs its own event loop on a thread of the test process, or alone as a
process (``main``: a forwarder inside a network namespace).
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
import time
from contextlib import suppress

CHUNK = 65536


class DelayProxy:
    """``host``:``port`` (127.0.0.1, a free port by default) forwarding to
    ``upstream``; ``start()``/``stop()``."""

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0
                 ) -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.delay = 0.0  # seconds each answer chunk is held back
        self.loss = 0.0  # probability that a chunk crossing drops its connection
        self.dropped = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxy",
                                        daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/callback"

    def start(self) -> DelayProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = fut.result(10)
        return self

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  backlog=4096)
        return int(self._server.sockets[0].getsockname()[1])

    def set_delay(self, seconds: float) -> None:
        self.delay = max(0.0, seconds)

    def set_loss(self, probability: float) -> None:
        self.loss = min(1.0, max(0.0, probability))

    def _reset_all(self) -> None:
        for w in list(self._writers):
            w.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        connecting = asyncio.ensure_future(asyncio.open_connection(*self.upstream))
        gave_up = asyncio.ensure_future(_closed(writer))
        try:
            await asyncio.wait((connecting, gave_up), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gave_up.cancel()
        if not connecting.done():
            connecting.cancel()  # the client gave up first: its attempt ends here
        try:
            up_reader, up_writer = await connecting
        except (OSError, asyncio.CancelledError):
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pump(reader, up_writer, delayed=False),
                                 self._pump(up_reader, writer, delayed=True))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *,
                    delayed: bool) -> None:
        """Copy ``src`` to ``dst``; answers (``delayed``) go out ``delay`` s
        after they came in, in order."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await src.read(CHUNK)
                if data and self.loss and random.random() < self.loss:
                    self.dropped += 1
                    # dst aborted below: its peer's read ends, and the other pump with it
                    raise ConnectionResetError("dropped by the lossy link")
                due = time.monotonic() + (self.delay if delayed else 0.0)
                await queue.put((due, data))
                if not data:
                    break
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()
            with suppress(BaseException):
                await sender
            dst.transport.abort()

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            self._reset_all()

        if self._thread.is_alive():
            with suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


async def _closed(writer: asyncio.StreamWriter) -> None:
    """Until the peer of ``writer`` has closed or reset its connection
    (peeked on a duplicate of its socket: what it sent stays queued)."""
    fd = writer.get_extra_info("socket").fileno()
    with socket.socket(fileno=os.dup(fd)) as peek:
        while not writer.transport.is_closing():
            try:
                if peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    return
            except BlockingIOError:
                pass
            except OSError:
                return
            await asyncio.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    """``LISTEN_HOST LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT``, repeated: forward
    each until killed."""
    import resource
    import sys

    # Connections held across a partition pile up: as many as the system lets.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    args = argv if argv is not None else sys.argv[1:]
    for i in range(0, len(args), 4):
        host, port, up_host, up_port = args[i:i + 4]
        proxy = DelayProxy((up_host, int(up_port)), host=host, port=int(port)).start()
        print(f"forwarding {host}:{proxy.port} to {up_host}:{up_port}", flush=True)
    threading.Event().wait()
