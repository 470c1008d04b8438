"""The private-address guard: classification of addresses and the filtering resolver."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from aiohttp.abc import AbstractResolver

from cronman.callbacks.ssrf import (
    GuardedResolver,
    PrivateAddressError,
    address_refusal,
    classify,
    literal_refusal,
)


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.1.2.3", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "CGNAT (shared)"),
        ("100.127.255.254", "CGNAT (shared)"),
        ("240.0.0.1", "private"),
        ("255.255.255.255", "private"),
        ("192.0.2.1", "private"),  # documentation range: not global
        ("198.18.0.1", "private"),  # benchmarking range
        # IPv6 forms that embed a refused IPv4 address
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("64:ff9b::10.0.0.1", "private"),
        ("64:ff9b::7f00:1", "loopback"),
        ("2002:a00:1::", "private"),  # 6to4 of 10.0.0.1
        ("::127.0.0.1", "loopback"),  # IPv4-compatible
        ("2001:db8::1", "private"),  # documentation
    ],
)
def test_refused_addresses(address, category):
    assert classify(ipaddress.ip_address(address)) == category
    message = address_refusal(address)
    assert message is not None
    assert "CRONMAN_ALLOW_PRIVATE_TARGETS=true" in message


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address):
    assert classify(ipaddress.ip_address(address)) is None
    assert address_refusal(address) is None


def test_message_names_address_and_category():
    assert address_refusal("10.1.2.3") == (
        "target resolves to a private address 10.1.2.3; "
        "set CRONMAN_ALLOW_PRIVATE_TARGETS=true to allow"
    )
    assert "an unspecified address" in address_refusal("0.0.0.0")


def test_unparseable_is_refused():
    assert address_refusal("not-an-ip") is not None


def test_literal_refusal_only_judges_ip_literals():
    assert literal_refusal("example.com") is None
    assert literal_refusal("localhost") is None
    assert "loopback" in literal_refusal("127.0.0.1")
    assert "loopback" in literal_refusal("[::1]")
    assert "loopback" in literal_refusal("::ffff:7f00:1")
    assert literal_refusal("8.8.8.8") is None


class _FixedResolver(AbstractResolver):
    """Answers every lookup with fixed addresses (stands in for a DNS server's answers)."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.closed = False

    async def resolve(self, host, port=0, family=socket.AF_INET):
        return [
            {
                "hostname": host,
                "host": a,
                "port": port,
                "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
            for a in self.addresses
        ]

    async def close(self):
        self.closed = True


def test_guarded_resolver_refuses_when_only_private_addresses():
    guarded = GuardedResolver(_FixedResolver(["10.1.2.3", "fd00::1"]))
    with pytest.raises(PrivateAddressError) as info:
        asyncio.run(guarded.resolve("rebind.example", 80))
    assert isinstance(info.value, OSError)
    assert info.value.address == "10.1.2.3"
    assert str(info.value) == (
        "target resolves to a private address 10.1.2.3; "
        "set CRONMAN_ALLOW_PRIVATE_TARGETS=true to allow"
    )


def test_guarded_resolver_drops_private_addresses_from_mixed_answers():
    guarded = GuardedResolver(_FixedResolver(["127.0.0.1", "93.184.216.34", "::1"]))
    results = asyncio.run(guarded.resolve("mixed.example", 443))
    assert [r["host"] for r in results] == ["93.184.216.34"]


def test_guarded_resolver_applies_to_every_lookup():
    inner = _FixedResolver(["93.184.216.34"])
    guarded = GuardedResolver(inner)
    assert asyncio.run(guarded.resolve("flip.example", 80))
    inner.addresses = ["169.254.169.254"]  # the name now points at the metadata service
    with pytest.raises(PrivateAddressError, match="cloud metadata"):
        asyncio.run(guarded.resolve("flip.example", 80))


def test_guarded_resolver_closes_inner():
    inner = _FixedResolver([])
    asyncio.run(GuardedResolver(inner).close())
    assert inner.closed
