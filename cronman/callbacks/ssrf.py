"""The private-address guard of HTTP targets (SSRF protection).

Unless ``CRONMAN_ALLOW_PRIVATE_TARGETS`` is true, an HTTP callback may only
connect to a public (globally routable unicast) address. Refused: loopback,
private (RFC 1918, ULA ``fc00::/7``), link-local (``169.254/16``,
``fe80::/10``), CGNAT ``100.64/10``, unspecified, multicast, reserved and
other special-purpose ranges, the cloud metadata addresses
(``169.254.169.254``, ``fd00:ec2::254``), and IPv6 forms that embed one of
those IPv4 addresses (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``, Teredo).

Where the check happens -- at connect time, on the addresses actually used:

- Host names: the HTTP client (:mod:`cronman.callbacks.httpclient.connect`)
  resolves the name, keeps only the addresses :func:`allowed_addresses`
  allows (a lookup left with none fails the connection with
  :class:`PrivateAddressError`) and connects to one of those by number. A name
  that resolves to a public address at validation time and to ``10.0.0.1``
  later (DNS rebinding) is caught when it matters; a cached lookup is screened
  again at every new connection. Pooled keep-alive connections were opened
  to checked addresses.
- IP literals (``http://10.0.0.1/``, ``http://[::1]/``): :func:`literal_refusal`
  checks them before the request is made; nothing is sent.
- Non-canonical numeric hosts (``2130706433``) are refused by validation; any
  other spelling goes through the resolver and is caught there.
- :class:`GuardedResolver` does the same filtering for an aiohttp resolver
  (aiohttp itself is not needed to import this module).

A refusal is a failed attempt with ``retryable=False``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp.abc import AbstractResolver, ResolveResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_ULA = ipaddress.ip_network("fc00::/7")

HINT = "set CRONMAN_ALLOW_PRIVATE_TARGETS=true to allow"


class PrivateAddressError(OSError):
    """A target's host resolved only to addresses the guard refuses."""

    def __init__(self, host: str, address: str, category: str) -> None:
        self.host = host
        self.address = address
        self.category = category
        super().__init__(refusal_message(address, category))


def refusal_message(address: str, category: str) -> str:
    return f"target resolves to {_article(category)} {address}; {HINT}"


def _article(category: str) -> str:
    return ("an " if category[0] in "aeiou" else "a ") + category + " address"


def classify(ip: IPAddress) -> str | None:
    """The category that makes ``ip`` refused (``"private"``, ``"loopback"``...), or None."""
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # the socket connects to the IPv4 address itself
            return classify(ip.ipv4_mapped)
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner = classify(embedded)
            if inner is not None:
                return inner
        if ip in _NAT64_LOCAL:
            return "private"
        if ip in _ULA:
            return "private"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "CGNAT (shared)"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "special-purpose (non-global)"
    return None


def _show(ip: IPAddress) -> str:
    """``::ffff:127.0.0.1`` rather than ``::ffff:7f00:1``."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return f"::ffff:{ip.ipv4_mapped}"
    return str(ip)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    # IPv4-compatible (deprecated) ::a.b.c.d
    if int(ip) >> 32 == 0 and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip))
    return None


def address_refusal(address: str) -> str | None:
    """Why connecting to ``address`` (an IP string) is refused, or None if allowed.

    Anything that does not parse as an IP address is refused (fail closed).
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"target resolves to an unrecognised address {address!r}; {HINT}"
    category = classify(ip)
    return None if category is None else refusal_message(_show(ip), category)


def literal_refusal(host: str) -> str | None:
    """For an IP-literal URL host (``10.0.0.1``, ``::1``): why it is refused, or None.

    Host names return None here; the resolver checks them at connect time.
    """
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    category = classify(ip)
    return None if category is None else refusal_message(_show(ip), category)


def allowed_addresses(host: str, addresses: Iterable[str]) -> list[str]:
    """The addresses (IP strings ``host`` resolved to) that may be connected to, in order.

    Raises :class:`PrivateAddressError` naming the first refused address when
    none is allowed, and ``OSError`` when there were no addresses at all.
    Anything that does not parse as an IP address is refused (fail closed).
    """
    allowed: list[str] = []
    first_refused: tuple[str, str] | None = None
    for address in addresses:
        category = _category_of_text(address)
        if category is None:
            allowed.append(address)
        elif first_refused is None:
            first_refused = (_show_text(address), category)
    if not allowed:
        if first_refused is None:
            raise OSError(f"no address found for {host}")
        raise PrivateAddressError(host, *first_refused)
    return allowed


class GuardedResolver:
    """An aiohttp resolver (``AbstractResolver`` by its methods) that drops refused addresses."""

    def __init__(self, inner: AbstractResolver) -> None:
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed = set(allowed_addresses(host, [result["host"] for result in results]))
        return [result for result in results if result["host"] in allowed]

    async def close(self) -> None:
        await self._inner.close()


def _show_text(address: str) -> str:
    try:
        return _show(ipaddress.ip_address(address))
    except ValueError:
        return address


def _category_of_text(address: str) -> str | None:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "unrecognised"
    return classify(ip)
