"""Where the bot may fetch a result from: the network policy for URLs the service names.

The generation service is untrusted: a result URL may name a local file, the loopback interface,
a private network or the cloud's metadata address. This module decides, without any I/O of its
own, which destinations are acceptable:

* only ``http`` and ``https`` (:func:`refusal_before_connecting`);
* an IP-literal host must be a public address, unless the operator listed it;
* a host name is resolved **where the connection is made** (:class:`GuardedResolver`, plugged into
  the ``aiohttp.TCPConnector`` used for foreign downloads), and only its public addresses are ever
  connected to, so a DNS answer that changes between a check and the connection (rebinding)
  cannot reach an internal address;
* hosts in ``GEN_RESULT_HOSTS`` (exact names, or ``*.example.com`` for any subdomain) are trusted
  whatever they resolve to: operators whose service uses a private CDN list it there.

The service's own origin is decided by the client (it is always allowed); this module only sees
the other hosts.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable

import yarl
from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = [
    "REASON_BAD_URL",
    "REASON_INTERNAL",
    "REASON_NOT_HTTP",
    "REASON_TOO_MANY_REDIRECTS",
    "GuardedResolver",
    "RefusedAddress",
    "host_allowed",
    "is_public_address",
    "normalize_host",
    "refusal_before_connecting",
]

log = logging.getLogger(__name__)

# Why a result URL was refused; shown in errors and logs instead of the URL itself.
REASON_NOT_HTTP = "the result link is not an http(s) URL"
REASON_BAD_URL = "the result link is not a valid URL"
REASON_INTERNAL = "the result link resolves to an internal address"
REASON_TOO_MANY_REDIRECTS = "the result link redirects too many times"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: NAT64's well-known prefix (RFC 6052): the last 32 bits are an IPv4 address a gateway reaches.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class RefusedAddress(OSError):
    """A host name resolved to no address the bot may connect to.

    An ``OSError``, so that aiohttp reports it like any failed lookup (wrapped in
    ``aiohttp.ClientConnectorError``, whose ``os_error`` is this exception). Carries no host name.
    """

    def __init__(self) -> None:
        super().__init__(REASON_INTERNAL)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public_address(address: str | IPAddress) -> bool:
    """Whether `address` is a globally routable unicast address (the only kind fetched from).

    Refused: loopback, private ranges, link-local (``169.254.0.0/16``: cloud metadata),
    carrier-grade NAT, multicast, reserved, unspecified and site-local addresses. An IPv6 address
    that carries an IPv4 one (IPv4-mapped, 6to4, NAT64) is judged by the IPv4 address. A string
    that is not an IP address is not public.
    """
    if isinstance(address, str):
        try:
            ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
        except ValueError:
            return False
    else:
        ip = address
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            return is_public_address(inner)
        if ip.is_site_local:
            return False
    return bool(
        ip.is_global
        and not (
            ip.is_multicast
            or ip.is_reserved
            or ip.is_loopback
            or ip.is_link_local
            or ip.is_private
            or ip.is_unspecified
        )
    )


def normalize_host(host: str) -> str:
    """A host as compared with the allow-list: lower case, without a trailing dot or brackets."""
    return host.strip().strip("[]").rstrip(".").lower()


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """Whether `host` is in the operator's allow-list ``GEN_RESULT_HOSTS``.

    A pattern is an exact host (``cdn.example.com``) or ``*.example.com``, which matches every
    subdomain at any depth but not ``example.com`` itself.
    """
    name = normalize_host(host)
    if not name:
        return False
    for pattern in patterns:
        pattern = normalize_host(pattern)
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and len(name) > len(pattern) - 1:
                return True
        elif name == pattern:
            return True
    return False


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(normalize_host(host).split("%", 1)[0])
    except ValueError:
        return None


def refusal_before_connecting(url: yarl.URL, allowed_hosts: Iterable[str]) -> str | None:
    """Why `url` (not on the service's origin) must not be fetched, or ``None`` to try it.

    Checks what can be checked without the network: the scheme, that there is a host, and, for an
    IP-literal host (which never goes through a resolver), that the address is public or listed.
    Host names are judged later, by :class:`GuardedResolver`, where the connection is made.
    """
    if url.scheme not in ("http", "https"):
        return REASON_NOT_HTTP
    host = url.raw_host
    if not url.is_absolute() or not host:
        return REASON_BAD_URL
    literal = _ip_literal(host)
    if literal is None and not _resolvable_name(host):
        return REASON_BAD_URL
    if literal is not None and not is_public_address(literal) and not host_allowed(host, allowed_hosts):
        return REASON_INTERNAL
    return None


def _resolvable_name(host: str) -> bool:
    """Whether the system resolver can be asked about `host` at all.

    ``getaddrinfo`` encodes a name with the ``idna`` codec first, which raises a ``UnicodeError``
    (not an ``OSError``, so not a failed lookup to aiohttp) for an empty or over-long label
    (``a..b``, 64 characters between dots): such a URL is simply not valid.
    """
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True


class GuardedResolver(AbstractResolver):
    """A resolver that only ever hands public addresses to the connector it serves.

    Hosts in `allowed_hosts` are resolved as they are (the operator trusts them). Any other host
    is resolved with `base` (default: aiohttp's ``ThreadedResolver``, the system's resolver) and
    its non-public answers are dropped; when none is left, :class:`RefusedAddress` is raised and
    no connection is attempted. The connector connects to exactly the addresses returned here,
    so the check holds for every connection, redirects included.
    """

    def __init__(self, allowed_hosts: Iterable[str] = (), base: AbstractResolver | None = None) -> None:
        self._allowed = tuple(allowed_hosts)
        self._base = base
        self._owns_base = base is None

    def _resolver(self) -> AbstractResolver:
        if self._base is None:
            from aiohttp import ThreadedResolver  # created lazily: it wants a running loop

            self._base = ThreadedResolver()
        return self._base

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The addresses of `host` the bot may connect to (all of them for a listed host)."""
        try:
            answers = await self._resolver().resolve(host, port, family)
        except ValueError as exc:
            # A name getaddrinfo cannot even encode (UnicodeError): a failed lookup, not a crash.
            raise OSError(f"not a valid host name ({type(exc).__name__})") from None
        if host_allowed(host, self._allowed):
            return answers
        public = [answer for answer in answers if is_public_address(answer["host"])]
        if not public:
            raise RefusedAddress()
        if len(public) < len(answers):
            log.info(
                "dropped %d internal address(es) from a result host's DNS answer", len(answers) - len(public)
            )
        return public

    async def close(self) -> None:
        """Close the base resolver if this resolver created it."""
        if self._owns_base and self._base is not None:
            await self._base.close()
