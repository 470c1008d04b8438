"""A TCP proxy the fault suite puts between the nodes and a service (the
receiver): it can hold the service's answers back (``set_delay``: a slow
receiver, seconds per answer, while the request itself reaches the service
at once, so the receiver's log keeps the true arrival time) or cut every
connection (``set_cut``). This kernel has no ``netem``: delay and loss come
from here.

It runs its own event loop on a thread of the test process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import suppress

CHUNK = 65536


class DelayProxy:
    """127.0.0.1:``port`` forwarding to ``upstream``; ``start()``/``stop()``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.delay = 0.0  # seconds each answer chunk is held back
        self.cut = False
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxy",
                                        daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    def start(self) -> DelayProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = fut.result(10)
        return self

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096)
        return int(self._server.sockets[0].getsockname()[1])

    def set_delay(self, seconds: float) -> None:
        self.delay = max(0.0, seconds)

    def set_cut(self, cut: bool) -> None:
        """Refuse new connections and reset the open ones (True), or let them be."""
        self.cut = cut
        if cut:
            self._loop.call_soon_threadsafe(self._reset_all)

    def _reset_all(self) -> None:
        for w in list(self._writers):
            w.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.transport.abort()
            return
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
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
