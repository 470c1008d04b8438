"""The client: one request at a time per connection, over the bounded keep-alive pool.

Redirects are never followed (a 3xx is returned like any answer), cookies are
never stored, proxies are never used (no environment is read): the caller
sees exactly the answer of the host it named, and the private-address guard
(when on) cannot be stepped around through a proxy or a redirect.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Iterable

from cronman.callbacks.httpclient.connect import Connector, Resolver, SystemResolver
from cronman.callbacks.httpclient.connection import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    HttpConnection,
    Response,
)
from cronman.callbacks.httpclient.errors import StaleConnection
from cronman.callbacks.httpclient.pool import ConnectionPool
from cronman.callbacks.httpclient.request import Origin, PreparedRequest

DEFAULT_POOL_LIMIT = 512
DEFAULT_KEEPALIVE = 30.0
DEFAULT_BODY_LIMIT = 1024


class HttpClient:
    """A keep-alive HTTP/1.1 client bound to the event loop it is created on.

    ``guard`` turns on the private-address guard (see
    :mod:`cronman.callbacks.httpclient.connect`); ``body_limit`` is how much
    of an answer's body is read (the rest is not, and that connection is not
    reused); ``max_headers`` and ``max_header_bytes`` bound an answer's head
    (over either, the request fails with ``ResponseTooLarge``);
    ``connect_timeout`` bounds opening a connection, within each request's
    own ``timeout``, which bounds the rest (the first byte included).
    """

    def __init__(
        self,
        *,
        guard: bool = True,
        pool_limit: int = DEFAULT_POOL_LIMIT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE,
        connect_timeout: float | None = None,
        body_limit: int = DEFAULT_BODY_LIMIT,
        max_headers: int = MAX_HEADERS,
        max_header_bytes: int = MAX_HEADER_BYTES,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.loop = loop or asyncio.get_running_loop()
        self.pool = ConnectionPool(self.loop, limit=pool_limit, keepalive_timeout=keepalive_timeout)
        self._connector = Connector(
            resolver=resolver or SystemResolver(),
            guard=guard,
            ssl_context=ssl_context,
            connect_timeout=connect_timeout,
        )
        self._body_limit = body_limit
        self._max_headers = max_headers
        self._max_header_bytes = max_header_bytes

    async def request(
        self,
        request: PreparedRequest,
        headers: Iterable[tuple[str, str]] = (),
        *,
        timeout: float,
        lines: bytes = b"",
    ) -> Response:
        """Send ``request`` with ``headers`` added (and ``lines``, header lines
        encoded by the caller: ``PreparedRequest.render``); the answer, or an
        ``HttpClientError``.

        ``timeout`` covers everything: waiting for a pooled connection,
        connecting, sending and reading the answer. A pooled connection found
        closed before anything was written is replaced by a fresh one, once.
        """
        data = request.render(headers, lines)
        loop = self.loop
        deadline = loop.time() + timeout
        pool = self.pool
        origin = request.origin
        conn = pool.take_idle(origin)
        if conn is None:
            conn = await self._connection(origin, deadline)
        try:
            waiter = self._send(conn, data, deadline, request.head)
        except StaleConnection:
            # Nothing was written on it: once more, on a fresh connection.
            conn = await self._connection(origin, deadline, fresh=True)
            waiter = self._send(conn, data, deadline, request.head)
        try:
            return await waiter
        except BaseException:
            conn.abort()  # cancelled, or failed: the connection's state is unknown
            raise
        finally:
            pool.release(conn)

    def start(
        self,
        request: PreparedRequest,
        headers: Iterable[tuple[str, str]] = (),
        *,
        timeout: float,
        lines: bytes = b"",
    ) -> asyncio.Future[Response] | None:
        """``request`` written at once on an idle pooled connection: the future
        of its answer (or of an ``HttpClientError``, as from :meth:`request`);
        None when no idle connection can take it now (nothing was written:
        use :meth:`request`, which connects).

        Sending from the caller's own callback spares the request a turn of a
        busy event loop (a task's first step waits behind every callback
        already queued). The connection goes back to the pool when the
        answer is in; cancelling the future closes it, as cancelling
        :meth:`request` does.
        """
        data = request.render(headers, lines)  # first: if it raises, no connection is held
        conn = self.pool.take_idle(request.origin)
        if conn is None:
            return None
        try:
            waiter = self._send(conn, data, self.loop.time() + timeout, request.head)
        except StaleConnection:
            return None
        waiter.add_done_callback(functools.partial(self._settle, conn))
        return waiter

    def _settle(self, conn: HttpConnection, waiter: asyncio.Future[Response]) -> None:
        if waiter.cancelled() or waiter.exception() is not None:
            conn.abort()  # the connection's state is unknown
        self.pool.release(conn)

    def _send(
        self, conn: HttpConnection, data: bytes, deadline: float, head: bool
    ) -> asyncio.Future[Response]:
        """``conn.send``; on any error the connection goes back to the pool, closed."""
        try:
            return conn.send(data, deadline, head=head)
        except BaseException:
            conn.abort()
            self.pool.release(conn)
            raise

    async def close(self) -> None:
        """Close every idle connection and refuse new requests."""
        await self.pool.close()
        await asyncio.sleep(0)  # let the closed transports finish (their connection_lost)

    async def _connection(
        self, origin: Origin, deadline: float, *, fresh: bool = False
    ) -> HttpConnection:
        """An idle connection to ``origin`` (unless ``fresh``) or a newly opened one."""
        pool = self.pool
        conn = await pool.acquire(origin, deadline, reuse=not fresh)
        if conn is not None:
            return conn
        factory = functools.partial(
            HttpConnection, origin, self.loop, self._body_limit, pool.connection_lost,
            self._max_headers, self._max_header_bytes,
        )
        try:
            return await self._connector.open(origin, factory, deadline)
        except BaseException:
            pool.unreserve()
            raise
