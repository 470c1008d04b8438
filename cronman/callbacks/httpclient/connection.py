"""One keep-alive HTTP/1.1 connection: an asyncio protocol, answers parsed by llhttp (httptools).

A connection carries one request at a time (no pipelining). :meth:`send`
writes a request and returns a future for its :class:`Response`; the answer
is parsed as it arrives and the future resolves when it is complete, or
earlier when the body has already given ``body_limit`` bytes (the rest is
never read: the connection is then closed, not reused).

An answer's head is bounded too: at most ``max_headers`` header lines and
``max_header_bytes`` bytes of status line and headers (interim 1xx answers
included). Over either bound the request fails with
:class:`ResponseTooLarge` (``answer headers over 64 KiB``), the connection
is aborted and what was gathered is dropped. llhttp keeps no limit of its
own, and httptools gathers a header's value across reads before it calls
``on_header``; so the bytes are counted twice, cheaply: per header in
``on_header``, and per read that ends before the head does in
``data_received`` (what catches one endless header). At most one read of
the socket (256 KiB) past the bound is ever held. Time to the first byte,
like the rest of the answer, is bounded by the request's deadline.

A connection is reused only when the answer was complete and the server
keeps it open (HTTP/1.1 without ``Connection: close``). Anything else closes
it: a timeout, a parse error, a body cut short, data the server sends when
no request is outstanding, a server that closed its end.
"""

from __future__ import annotations

import asyncio
import re
import select
from collections.abc import Callable
from typing import cast

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from cronman.callbacks.httpclient.errors import (
    InvalidResponse,
    RequestTimeout,
    ResponseTooLarge,
    ServerDisconnected,
    StaleConnection,
    byte_size,
)
from cronman.callbacks.httpclient.request import Origin

# An idle connection unused for this long is checked for a FIN from the server
# (a poll of its socket) before it is reused: the loop may not have seen it yet.
PROBE_IDLE_AFTER = 1.0
# A server's ``Keep-Alive: timeout=N`` is trusted minus this margin.
KEEP_ALIVE_MARGIN = 1.0
# Bounds of an answer's head (what browsers and servers allow is of this order:
# nginx reads 4-32 KiB of headers, Node.js 16 KiB, Python's http.client 100 lines).
MAX_HEADERS = 100
MAX_HEADER_BYTES = 64 * 1024

_KEEP_ALIVE_TIMEOUT = re.compile(rb"timeout\s*=\s*(\d+)", re.IGNORECASE)
_PROBE_EVENTS = select.POLLIN | select.POLLPRI | getattr(select, "POLLRDHUP", 0)


class Response:
    """An answer: status, raw headers, and the first ``body_limit`` bytes of the body.

    ``complete`` is False when the body was longer than the limit or the
    server closed the connection in the middle of it.
    """

    __slots__ = ("status", "headers", "body", "complete")

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, complete: bool
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.complete = complete

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), decoded as UTF-8."""
        wanted = name.lower().encode("latin-1")
        for key, value in self.headers:
            if key.lower() == wanted:
                return value.decode("utf-8", errors="replace")
        return None

    def __repr__(self) -> str:
        return f"<Response {self.status} body={len(self.body)}B complete={self.complete}>"


class HttpConnection(asyncio.Protocol):
    """One connection to ``origin``; made by the loop's ``create_connection``."""

    def __init__(
        self,
        origin: Origin,
        loop: asyncio.AbstractEventLoop,
        body_limit: int,
        on_lost: Callable[[HttpConnection], None],
        max_headers: int = MAX_HEADERS,
        max_header_bytes: int = MAX_HEADER_BYTES,
    ) -> None:
        self.origin = origin
        self._loop = loop
        self._body_limit = body_limit
        self._max_headers = max_headers
        self._max_header_bytes = max_header_bytes
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._parser = HttpResponseParser(self)
        self._waiter: asyncio.Future[Response] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head = False
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._body_size = 0
        # The head's size: headers counted in on_header, and reads that ended mid-head.
        self._header_count = 0
        self._header_bytes = 0
        self._head_read = 0
        self._too_large: ResponseTooLarge | None = None
        self._headers_done = False
        self._message_done = False
        self._keep_alive = False
        self._reusable = True
        self.closed = False
        # Pool bookkeeping.
        self.idle = False
        self.idle_since = 0.0
        self.server_keepalive: float | None = None

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the methods, not the class.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Nothing was asked: a server that talks out of turn gets no next request.
            self._reusable = False
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except HttpParserUpgrade:
            self._fail(InvalidResponse("the server switched protocols"))
            return
        except HttpParserError as exc:
            too_large, self._too_large = self._too_large, None
            if too_large is not None:  # raised by on_header, wrapped by httptools
                self._fail(too_large)
            elif self._message_done:  # junk after a complete answer: keep the answer, drop the link
                self._reusable = False
                self._finish(complete=True)
            else:
                self._fail(InvalidResponse(str(exc) or type(exc).__name__))
            return
        if self._message_done:
            self._finish(complete=True)
        elif self._headers_done:
            if self._body_size >= self._body_limit:
                self._reusable = False
                self._finish(complete=False)
        else:
            # This whole read was head (a header llhttp is still gathering, or many).
            self._head_read += len(data)
            if self._head_read > self._max_header_bytes:
                self._fail(self._head_over())

    def eof_received(self) -> bool | None:
        return None  # close our end too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._reusable = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if self._headers_done and self._status >= 200:
                # A body delimited by the close, or cut short: the status is what counts.
                self._finish(complete=False)
            else:
                self._fail(ServerDisconnected(self._why_lost(exc)))
        self._cancel_timer()
        self._on_lost(self)

    # -- llhttp callbacks ---------------------------------------------------

    def on_message_begin(self) -> None:
        if self._message_done:
            raise InvalidResponse("a second answer to one request")

    def on_header(self, name: bytes, value: bytes) -> None:
        count = self._header_count = self._header_count + 1
        size = self._header_bytes = self._header_bytes + len(name) + len(value) + 4
        if count > self._max_headers or size > self._max_header_bytes:
            self._too_large = (self._head_over() if size > self._max_header_bytes else
                               ResponseTooLarge(f"answer has over {self._max_headers} headers"))
            raise self._too_large
        self._headers.append((name, value))
        if len(name) == 10 and name.lower() == b"keep-alive":
            match = _KEEP_ALIVE_TIMEOUT.search(value)
            if match:
                self.server_keepalive = float(match.group(1))

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._headers_done = True
        if self._head and self._status >= 200:
            # llhttp would wait for the body a HEAD answer announces but never has.
            self._message_done = True

    def on_body(self, body: bytes) -> None:
        size = self._body_size
        if size < self._body_limit:
            self._body.append(body[: self._body_limit - size])
        self._body_size = size + len(body)

    def on_message_complete(self) -> None:
        if self._status < 200:  # an interim answer (100, 103): the real one follows
            self._start_message()
            return
        self._message_done = True
        # Asked now: llhttp forgets the answer's flags once it is complete.
        self._keep_alive = self._parser.should_keep_alive()

    # -- used by the client and the pool ------------------------------------

    def send(self, data: bytes, deadline: float, *, head: bool) -> asyncio.Future[Response]:
        """Write one request; the future resolves with the answer or fails by ``deadline``.

        Raises :class:`StaleConnection` (nothing written) when the connection
        is already closed or closing.
        """
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            raise StaleConnection(f"connection to {self.origin.where} closed while idle")
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        self._head = head
        self._start_message()
        self._header_count = self._header_bytes = self._head_read = 0
        self._too_large = None
        self._timer = loop.call_at(deadline, self._expire)
        transport.write(data)
        return waiter

    @property
    def reusable(self) -> bool:
        """Whether the last answer left the connection ready for another request."""
        return self._reusable and not self.closed and self._waiter is None

    def alive(self, now: float) -> bool:
        """Whether an idle connection may still be used (no close seen or pending)."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return False
        if now - self.idle_since < PROBE_IDLE_AFTER:
            return True
        return not self._peer_spoke()

    def expires_at(self, keepalive_timeout: float) -> float:
        """When this idle connection is too old to use: ours or the server's keep-alive."""
        limit = keepalive_timeout
        if self.server_keepalive is not None:
            limit = min(limit, max(0.0, self.server_keepalive - KEEP_ALIVE_MARGIN))
        return self.idle_since + limit

    def close(self) -> None:
        """Close gracefully (buffered data is still written)."""
        self._reusable = False
        if self._transport is not None and not self.closed:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping anything buffered."""
        self._reusable = False
        if self._transport is not None and not self.closed:
            self._transport.abort()

    # -- internals ------------------------------------------------------------

    def _start_message(self) -> None:
        self._status = 0
        self._headers = []
        self._body = []
        self._body_size = 0
        self._headers_done = False
        self._message_done = False
        self._keep_alive = False

    def _finish(self, *, complete: bool) -> None:
        waiter = self._waiter
        self._waiter = None
        self._cancel_timer()
        if not complete:
            self._reusable = False
        elif self._reusable:
            if self._head:
                self._reusable = _head_keeps_alive(self._headers, self._parser.get_http_version())
                self._parser = HttpResponseParser(self)  # a fresh one for the next answer
            else:
                self._reusable = self._keep_alive
        if not self._reusable:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(self._status, self._headers, b"".join(self._body), complete))

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        self._waiter = None
        self._cancel_timer()
        self.abort()
        self._headers = []
        self._body = []
        self._parser = HttpResponseParser(self)  # drop what it was gathering
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _expire(self) -> None:
        self._timer = None
        self._fail(RequestTimeout(f"no complete answer from {self.origin.where} in time"))

    def _head_over(self) -> ResponseTooLarge:
        return ResponseTooLarge(f"answer headers over {byte_size(self._max_header_bytes)}")

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _peer_spoke(self) -> bool:
        """Whether the socket of an idle connection is readable (a FIN, a reset, stray data)."""
        assert self._transport is not None
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            poller = select.poll()
            poller.register(sock.fileno(), _PROBE_EVENTS)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def _why_lost(self, exc: Exception | None) -> str:
        if exc is None:
            return f"server {self.origin.where} closed the connection"
        return f"connection to {self.origin.where} lost: {exc}"


def _head_keeps_alive(headers: list[tuple[bytes, bytes]], version: str) -> bool:
    for name, value in headers:
        if name.lower() == b"connection":
            tokens = {t.strip().lower() for t in value.split(b",")}
            if b"close" in tokens:
                return False
            if b"keep-alive" in tokens:
                return True
    return version == "1.1"
