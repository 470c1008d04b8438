"""Opening connections: name lookup, the private-address guard, TCP and TLS.

The guard runs here, at connect time, on the addresses the connection will
actually use: a host name is resolved, every refused address is dropped
(:func:`cronman.callbacks.ssrf.allowed_addresses`), and the socket connects
only to an address that survived, by number (the loop does no lookup of its
own). A name that pointed at a public address when the job was accepted and
points at ``10.0.0.1`` now (DNS rebinding) is refused when it matters, and a
cached lookup is screened again for every new connection. An IP-literal URL
is judged without any lookup; nothing is sent to a refused address.

TLS verifies the certificate chain and the host name (``ssl`` defaults) and
sends the host name as SNI.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from cronman.callbacks.httpclient.connection import HttpConnection
from cronman.callbacks.httpclient.errors import ConnectError, ConnectTimeout
from cronman.callbacks.httpclient.request import Origin
from cronman.callbacks.ssrf import PrivateAddressError, allowed_addresses

DNS_CACHE_TTL = 10.0
DNS_CACHE_SIZE = 4096

# (family, sockaddr) as socket.getaddrinfo gives them.
Address = tuple[int, tuple[Any, ...]]


class Resolver(Protocol):
    """Turns a host name into the addresses to try, in order of preference."""

    async def resolve(self, host: str, port: int) -> list[Address]:
        """The addresses of ``host``; raises ``OSError`` (``socket.gaierror``) when there are none."""
        ...


class SystemResolver:
    """The system's resolver (``getaddrinfo`` on the loop), with a short cache.

    Concurrent lookups of one name share one ``getaddrinfo`` call. Answers are
    cached for ``ttl`` seconds as they came (the guard screens them at every
    connect, not here).
    """

    def __init__(self, ttl: float = DNS_CACHE_TTL) -> None:
        self._ttl = ttl
        self._cache: dict[tuple[str, int], tuple[float, list[Address]]] = {}
        self._pending: dict[tuple[str, int], asyncio.Task[list[Address]]] = {}

    async def resolve(self, host: str, port: int) -> list[Address]:
        loop = asyncio.get_running_loop()
        key = (host, port)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > loop.time():
            return cached[1]
        lookup = self._pending.get(key)
        if lookup is None:
            # A task of its own, so that one caller giving up does not fail the others.
            lookup = self._pending[key] = loop.create_task(self._lookup(key))
            lookup.add_done_callback(lambda task: self._lookup_done(key, task))
        return await asyncio.shield(lookup)

    async def _lookup(self, key: tuple[str, int]) -> list[Address]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            key[0], key[1], type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        addresses: list[Address] = [(int(info[0]), info[4]) for info in infos]
        if len(self._cache) >= DNS_CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = (loop.time() + self._ttl, addresses)
        return addresses

    def _lookup_done(self, key: tuple[str, int], task: asyncio.Task[list[Address]]) -> None:
        self._pending.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here: every caller may have given up


class Connector:
    """Opens :class:`HttpConnection`\\ s: lookup, guard, TCP, TLS, all within a deadline."""

    def __init__(
        self,
        *,
        resolver: Resolver,
        guard: bool,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self._resolver = resolver
        self._guard = guard
        self._ssl_context = ssl_context
        self._connect_timeout = connect_timeout

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    async def open(
        self,
        origin: Origin,
        factory: Callable[[], HttpConnection],
        deadline: float,
    ) -> HttpConnection:
        """A connected :class:`HttpConnection` to ``origin``; :class:`ConnectError` if none.

        The whole phase (lookup, TCP, TLS handshake) ends by ``deadline`` and,
        with a connect timeout, by that long from now (:class:`ConnectTimeout`).
        """
        loop = asyncio.get_running_loop()
        if self._connect_timeout is not None:
            deadline = min(deadline, loop.time() + self._connect_timeout)
        try:
            async with asyncio.timeout_at(deadline):
                addresses = await self._addresses(origin)
                return await self._connect_first(origin, addresses, factory)
        except TimeoutError as exc:
            raise ConnectTimeout(origin.where, exc) from None
        except OSError as exc:  # gaierror, refusals, ssl.SSLError, PrivateAddressError
            raise ConnectError(origin.where, exc) from None

    async def _addresses(self, origin: Origin) -> list[Address]:
        host = origin.host
        if origin.is_ip_literal:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            addresses: list[Address] = [(family, (host, origin.port))]
        else:
            addresses = await self._resolver.resolve(host, origin.port)
            if not addresses:
                raise socket.gaierror(socket.EAI_NONAME, "no address found")
        if self._guard:
            allowed = set(allowed_addresses(host, [str(a[1][0]) for a in addresses]))
            addresses = [a for a in addresses if str(a[1][0]) in allowed]
        return addresses

    async def _connect_first(
        self,
        origin: Origin,
        addresses: list[Address],
        factory: Callable[[], HttpConnection],
    ) -> HttpConnection:
        """Try each address in turn; the last error is raised if none connects."""
        loop = asyncio.get_running_loop()
        tls = self._tls() if origin.tls else None
        last: OSError | None = None
        for _family, sockaddr in addresses:
            try:
                _transport, conn = await loop.create_connection(
                    factory,
                    host=sockaddr[0],
                    port=sockaddr[1],
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                )
                return conn
            except ssl.SSLError:
                raise  # the address answered; its certificate is what failed
            except PrivateAddressError:
                raise
            except OSError as exc:
                last = exc
        assert last is not None
        raise last
