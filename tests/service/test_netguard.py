"""The network policy for result URLs: which addresses are public, the allow-list, the guard.

Pure tests: the guard is given a scripted resolver, and nothing here opens a connection.
"""

from __future__ import annotations

import socket

import pytest
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from hypothesis import given
from hypothesis import strategies as st

from framecast.service.netguard import (
    REASON_BAD_URL,
    REASON_INTERNAL,
    REASON_NOT_HTTP,
    GuardedResolver,
    RefusedAddress,
    host_allowed,
    is_public_address,
    refusal_before_connecting,
)

INTERNAL = [
    "127.0.0.1",
    "127.0.0.2",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "169.254.0.1",
    "100.64.0.1",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.0.1",
    "198.18.0.1",
    "192.0.2.1",
    "::1",
    "::",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "fd12:3456::1",
    "ff02::1",
    "fec0::1",
    "2001:db8::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "64:ff9b::a9fe:a9fe",
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::",
    "::127.0.0.1",
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "2002:808:808::1",
]


@pytest.mark.parametrize("address", INTERNAL)
def test_internal_addresses_are_not_public(address: str) -> None:
    assert not is_public_address(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert is_public_address(address)


@pytest.mark.parametrize(
    "text", ["", "localhost", "example.com", "127.1", "2130706433", "1.2.3.4.5", "[::1]"]
)
def test_what_is_not_an_address_is_not_public(text: str) -> None:
    assert not is_public_address(text)


@given(st.ip_addresses())
def test_is_public_address_agrees_with_the_embedded_ipv4(ip: object) -> None:
    import ipaddress

    assert isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    result = is_public_address(ip)
    assert result == is_public_address(str(ip))
    if isinstance(ip, ipaddress.IPv4Address):
        assert is_public_address(ipaddress.IPv6Address(f"::ffff:{ip}")) == result
    if result:
        assert ip.is_global and not ip.is_private and not ip.is_loopback and not ip.is_link_local


def test_host_allow_list() -> None:
    patterns = ("cdn.example.com", "*.media.example.net", "LocalHost")
    assert host_allowed("cdn.example.com", patterns)
    assert host_allowed("CDN.Example.COM.", patterns)
    assert host_allowed("localhost", patterns)
    assert host_allowed("a.media.example.net", patterns)
    assert host_allowed("a.b.media.example.net", patterns)
    assert not host_allowed("media.example.net", patterns)  # "*." means subdomains only
    assert not host_allowed("evilmedia.example.net", patterns)
    assert not host_allowed("cdn.example.com.evil.org", patterns)
    assert not host_allowed("x.cdn.example.com", patterns)
    assert not host_allowed("", patterns)
    assert not host_allowed("anything", ())


@pytest.mark.parametrize(
    ("url", "allowed", "reason"),
    [
        ("file:///proc/self/environ", (), REASON_NOT_HTTP),
        ("ftp://8.8.8.8/x", (), REASON_NOT_HTTP),
        ("data:text/plain,x", (), REASON_NOT_HTTP),
        ("http:///x", (), REASON_BAD_URL),
        ("http://127.0.0.2:8080/x", (), REASON_INTERNAL),
        ("http://169.254.169.254/latest/", (), REASON_INTERNAL),
        ("https://[::ffff:10.0.0.1]/x", (), REASON_INTERNAL),
        ("http://10.0.0.5/x", ("10.0.0.5",), None),  # the operator listed it
        ("http://8.8.8.8/x", (), None),
        ("https://cdn.example.com/x", (), None),  # a name: judged by the resolver, later
        ("http://localhost/x", (), None),
        ("http://localhost./x", (), None),  # a trailing dot is a valid name (judged by the resolver)
        ("http://a..b/x", (), REASON_BAD_URL),  # an empty label: getaddrinfo would raise UnicodeError
        ("http://" + "a" * 64 + ".example.com/x", (), REASON_BAD_URL),  # a label over 63 characters
    ],
)
def test_refusal_before_connecting(url: str, allowed: tuple[str, ...], reason: str | None) -> None:
    assert refusal_before_connecting(yarl.URL(url), allowed) == reason


class Scripted(AbstractResolver):
    """Answers one list of addresses per lookup (the last repeats), like a rebinding DNS server."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return [
            {"hostname": host, "host": a, "port": port, "family": 0, "proto": 0, "flags": 0}
            for a in addresses
        ]

    async def close(self) -> None:
        self.closed = True


async def test_guard_drops_internal_answers_at_every_lookup() -> None:
    # A rebinding server: public for the first lookup, internal for the next (when a naive client
    # would connect). Every lookup is judged, so the second one is refused.
    base = Scripted(["93.184.216.34"], ["127.0.0.1"], ["8.8.8.8", "10.0.0.1", "::1", "2606:4700::1"])
    guard = GuardedResolver((), base)
    assert [r["host"] for r in await guard.resolve("cdn.example.com", 443)] == ["93.184.216.34"]
    with pytest.raises(RefusedAddress) as info:
        await guard.resolve("cdn.example.com", 443)
    assert isinstance(info.value, OSError) and "cdn.example.com" not in str(info.value)
    mixed = await guard.resolve("cdn.example.com", 443)
    assert [r["host"] for r in mixed] == ["8.8.8.8", "2606:4700::1"]
    await guard.close()
    assert not base.closed  # not the guard's to close


async def test_guard_trusts_listed_hosts() -> None:
    guard = GuardedResolver(("*.corp.example", "localhost"), Scripted(["10.1.2.3", "127.0.0.1"]))
    assert [r["host"] for r in await guard.resolve("media.corp.example", 80)] == ["10.1.2.3", "127.0.0.1"]
    assert len(await guard.resolve("localhost", 80)) == 2
    with pytest.raises(RefusedAddress):
        await guard.resolve("corp.example", 80)


class Unencodable(AbstractResolver):
    """The system resolver's answer for a name it cannot encode (``a..b``): a UnicodeError."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        raise UnicodeError("encoding with 'idna' codec failed (UnicodeError: label empty or too long)")

    async def close(self) -> None:
        pass


async def test_guard_turns_an_unencodable_name_into_a_failed_lookup() -> None:
    # aiohttp reports an OSError from the resolver as a failed connection; anything else escapes.
    with pytest.raises(OSError, match="not a valid host name"):
        await GuardedResolver((), Unencodable()).resolve("a..b", 80)
