"""Why a request failed: the exceptions of :mod:`cronman.callbacks.httpclient`.

Every failure of a request is an :class:`HttpClientError`; the phase it
failed in is in the class (opening a connection, waiting for a pooled one,
waiting for the answer), and the underlying error, when there is one, in
``cause``. Callers turn these into their own messages.
"""

from __future__ import annotations


class HttpClientError(Exception):
    """Base of every error the client raises for a failed request."""


class InvalidURL(HttpClientError, ValueError):
    """The URL cannot be requested (scheme, host, port)."""


class InvalidRequest(HttpClientError, ValueError):
    """A header name or value that would break the request's framing."""


class ConnectError(HttpClientError):
    """No connection could be opened to ``where`` (``host:port``); ``cause`` says why.

    ``cause`` is the last error met: a ``socket.gaierror`` (lookup failed), a
    :class:`~cronman.callbacks.ssrf.PrivateAddressError` (the guard refused
    every address), an ``ssl.SSLError``, a ``TimeoutError`` or another
    ``OSError``.
    """

    def __init__(self, where: str, cause: BaseException) -> None:
        super().__init__(f"cannot connect to {where}: {cause}")
        self.where = where
        self.cause = cause


class ConnectTimeout(ConnectError):
    """The connect phase (lookup, TCP, TLS handshake) ran out of time."""


class PoolTimeout(HttpClientError, TimeoutError):
    """The request's time ran out while waiting for a free connection of the pool."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"no free connection within the time limit (pool limit {limit})")
        self.limit = limit


class RequestTimeout(HttpClientError, TimeoutError):
    """The request's time ran out before the answer was complete."""


class ServerDisconnected(HttpClientError):
    """The server closed the connection before answering."""


class InvalidResponse(HttpClientError):
    """The server's answer is not valid HTTP/1.x."""


class ResponseTooLarge(HttpClientError):
    """The answer's head went over a bound (header count or bytes); nothing more was read.

    The message says which bound, e.g. ``answer headers over 64 KiB``.
    """


class ClientClosed(HttpClientError):
    """The client was closed."""


class StaleConnection(HttpClientError):
    """A pooled connection was found closed before the request was written (nothing sent)."""


def byte_size(n: int) -> str:
    """A bound in bytes as its messages name it: ``64 KiB``, ``1 MiB``, ``100 bytes``."""
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} bytes"
