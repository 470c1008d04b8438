"""The bounded keep-alive pool: idle connections by origin, at most ``limit`` in all.

``limit`` counts every connection the pool answers for: idle ones, ones
carrying a request, and ones being opened. A request that finds no idle
connection to its origin gets a slot for a new one; when the pool is full,
the oldest idle connection (of any origin) is closed to make room, and only
when none is idle does the request wait, within its own deadline, for a
connection to come back or a slot to free up.

Idle connections are reused last-in first-out (the warmest first). One is
closed instead of reused when it has been idle longer than the keep-alive
timeout (or than the server's own ``Keep-Alive: timeout``, less a margin),
or when the server has closed its end; a sweep closes the ones nobody
came back for.
"""

from __future__ import annotations

import asyncio
from collections import deque

from cronman.callbacks.httpclient.connection import HttpConnection
from cronman.callbacks.httpclient.errors import ClientClosed, PoolTimeout
from cronman.callbacks.httpclient.request import Origin


class ConnectionPool:
    """Idle connections by origin and the count of all connections, bounded by ``limit``."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, limit: int, keepalive_timeout: float
    ) -> None:
        if limit < 1:
            raise ValueError("the pool limit must be at least 1")
        self.limit = limit
        self.keepalive_timeout = keepalive_timeout
        self._loop = loop
        self._idle: dict[Origin, list[HttpConnection]] = {}
        self._size = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def size(self) -> int:
        """Connections the pool answers for (idle, busy and being opened)."""
        return self._size

    @property
    def idle_count(self) -> int:
        return sum(len(conns) for conns in self._idle.values())

    def take_idle(self, origin: Origin) -> HttpConnection | None:
        """The most recently used idle connection to ``origin`` that is still good, or None.

        Connections found closed or too old on the way are dropped: nothing was
        sent on them.
        """
        conns = self._idle.get(origin)
        if not conns:
            return None
        now = self._loop.time()
        while conns:
            conn = conns.pop()
            conn.idle = False
            if now < conn.expires_at(self.keepalive_timeout) and conn.alive(now):
                return conn
            self._drop(conn)
        return None

    async def acquire(
        self, origin: Origin, deadline: float, *, reuse: bool = True
    ) -> HttpConnection | None:
        """An idle connection to ``origin`` (if ``reuse``), or None with a slot reserved for a new one.

        Waits (until ``deadline``, then :class:`PoolTimeout`) only while the
        pool is full of busy connections. A reserved slot must be given back
        with :meth:`unreserve` if the connection cannot be opened.
        """
        while True:
            if self._closed:
                raise ClientClosed("the HTTP client is closed")
            conn = self.take_idle(origin) if reuse else None
            if conn is not None:
                return conn
            if self._size < self.limit or self._evict_oldest_idle():
                self._size += 1
                return None
            await self._wait(deadline)

    def unreserve(self) -> None:
        """Give back a slot from :meth:`acquire` whose connection was never opened."""
        self._size -= 1
        self._wake()

    def release(self, conn: HttpConnection) -> None:
        """Take back a connection after its request: keep it idle if reusable, else close it."""
        if conn.reusable and not self._closed:
            conn.idle = True
            conn.idle_since = self._loop.time()
            self._idle.setdefault(conn.origin, []).append(conn)
            if self._sweep_handle is None:
                self._schedule_sweep()
        else:
            conn.close()
            self._size -= 1
        self._wake()

    def connection_lost(self, conn: HttpConnection) -> None:
        """Called by a connection when it is gone; an idle one leaves the pool here."""
        if conn.idle:
            conn.idle = False
            conns = self._idle.get(conn.origin)
            if conns is not None and conn in conns:
                conns.remove(conn)
            self._size -= 1
            self._wake()

    async def close(self) -> None:
        """Close every idle connection; busy ones are closed when released."""
        self._closed = True
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        for conns in list(self._idle.values()):
            for conn in list(conns):
                self._drop_idle(conn)
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # -- internals ------------------------------------------------------------

    def _drop(self, conn: HttpConnection) -> None:
        """Close a connection already out of the idle lists and free its slot."""
        conn.close()
        self._size -= 1
        self._wake()

    def _drop_idle(self, conn: HttpConnection) -> None:
        conns = self._idle.get(conn.origin)
        if conns is not None and conn in conns:
            conns.remove(conn)
        conn.idle = False
        self._drop(conn)

    def _evict_oldest_idle(self) -> bool:
        """Close the idle connection unused the longest (any origin); False if none is idle."""
        oldest: HttpConnection | None = None
        for conns in self._idle.values():
            if conns and (oldest is None or conns[0].idle_since < oldest.idle_since):
                oldest = conns[0]
        if oldest is None:
            return False
        self._idle[oldest.origin].pop(0)
        oldest.idle = False
        oldest.close()
        self._size -= 1
        return True

    async def _wait(self, deadline: float) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        woken = False
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
            woken = True
        except TimeoutError:
            raise PoolTimeout(self.limit) from None
        finally:
            if not woken:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken as we gave up: pass the turn on
                else:
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:
                        pass

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _schedule_sweep(self) -> None:
        self._sweep_handle = self._loop.call_later(
            max(1.0, self.keepalive_timeout / 2), self._sweep
        )

    def _sweep(self) -> None:
        """Close idle connections past their keep-alive; again later while any stay idle."""
        self._sweep_handle = None
        now = self._loop.time()
        for origin, conns in list(self._idle.items()):
            for conn in [c for c in conns if now >= c.expires_at(self.keepalive_timeout)]:
                self._drop_idle(conn)
            if not conns:
                del self._idle[origin]
        if any(self._idle.values()) and not self._closed:
            self._schedule_sweep()
