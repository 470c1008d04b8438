"""The private-address guard for botocore's connections (sqs targets and sqs
dead letters), at connect time.

The http target's client checks the addresses it resolves (``callbacks.httpclient.connect``);
boto3 connects through urllib3, so here each new connection resolves the
host itself, drops every address ``ssrf.address_refusal`` refuses, and
connects only to what is left -- the check and the connection use the same
addresses, so DNS rebinding cannot get around it, and nothing at all is sent
to a refused address (not even a TCP handshake). Pooled keep-alive
connections were opened to checked addresses.

With a proxy configured for boto3 (``HTTPS_PROXY``), the connection made is
to the proxy, and that is what is checked.

``guard_client`` installs the guarded connection classes into one boto3
client (through ``bounded_answers.install``: on a botocore where that cannot
be done, it raises rather than leave the client unguarded). The guarded
classes bound their answers as :mod:`.bounded_answers` says.
"""

from __future__ import annotations

import socket
from typing import Any

from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import create_connection

from cronman.callbacks.bounded_answers import (
    BoundedHTTPConnection,
    BoundedHTTPConnectionPool,
    BoundedHTTPSConnection,
    BoundedHTTPSConnectionPool,
    install,
)
from cronman.callbacks.ssrf import address_refusal


class PrivateAddressRefused(Exception):
    """Every address of a host was refused; nothing was sent.

    Not an ``OSError`` on purpose: urllib3 would take it for a broken
    connection and wrap it; this way it reaches the target's error handling.
    """


def allowed_addresses(host: str, port: int) -> list[str]:
    """The addresses of ``host`` the guard allows, in resolver order;
    ``PrivateAddressRefused`` when there are none."""
    infos = socket.getaddrinfo(host.strip("[]"), port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    allowed: list[str] = []
    refusal: str | None = None
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0])
        reason = address_refusal(address)
        if reason is None:
            if address not in allowed:
                allowed.append(address)
        elif refusal is None:
            refusal = reason
    if not allowed:
        raise PrivateAddressRefused(f"{host}:{port}: {refusal or 'no address found'}")
    return allowed


class _GuardedConnect:
    """``_new_conn`` of urllib3's HTTPConnection, to allowed addresses only."""

    host: str
    port: int
    timeout: Any
    source_address: Any
    socket_options: Any

    def _new_conn(self) -> socket.socket:
        try:
            addresses = allowed_addresses(self.host, self.port)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc  # type: ignore[arg-type]
        error: OSError | None = None
        for address in addresses:
            try:
                return create_connection((address, self.port), self.timeout,
                                         source_address=self.source_address,
                                         socket_options=self.socket_options)
            except TimeoutError as exc:
                raise ConnectTimeoutError(
                    self, f"Connection to {self.host} timed out. "
                          f"(connect timeout={self.timeout})") from exc
            except OSError as exc:
                error = exc
        raise NewConnectionError(
            self, f"Failed to establish a new connection: {error}")  # type: ignore[arg-type]


class GuardedHTTPConnection(_GuardedConnect, BoundedHTTPConnection):
    pass


class GuardedHTTPSConnection(_GuardedConnect, BoundedHTTPSConnection):
    pass


class GuardedHTTPConnectionPool(BoundedHTTPConnectionPool):
    ConnectionCls = GuardedHTTPConnection


class GuardedHTTPSConnectionPool(BoundedHTTPSConnectionPool):
    ConnectionCls = GuardedHTTPSConnection


def guard_client(client: Any) -> None:
    """Make every connection of a new boto3 ``client`` go through the guard."""
    install(client, GuardedHTTPConnectionPool, GuardedHTTPSConnectionPool)
