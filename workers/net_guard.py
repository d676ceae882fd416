"""Where Parley may connect on someone else's word: the guard against server-side request forgery.

A model chooses ``fetch_url``'s URL and an organisation's admin chooses its MCP servers' (parley/org_tools.py);
either may aim at the machine's own services (a metadata endpoint, Kafka's admin port, a neighbour in the
VPC). The rule is one: the host is resolved, and every address it resolves to must be globally routable,
unless it lies in the operator's ``fetch.allow_networks`` (parley/tool_registry.py): one private answer refuses
the name, since which address a connection would take is not ours to choose. The connection then goes to the
address that was checked, never to the name again (a second lookup could answer something else: DNS
rebinding); the name still travels as ``Host`` and, for https, as the TLS server name the certificate is
verified against (httpcore's ``sni_hostname`` extension).

``fetch_url`` (workers/tool_fetch.py) applies it hop by hop with httpx; ``GuardedTransport`` applies it to every
request of an httpx2 client, the HTTP library of the ``mcp`` SDK (workers/tool_mcp.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx2

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: (host, port) -> the addresses to connect to; the default asks the system's resolver.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598): someone's private network
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# IETF protocol assignments (RFC 6890): not global, though Python 3.11's ``is_global`` passes most of it.
_PROTOCOL = ipaddress.ip_network("192.0.0.0/24")

#: In order: the first that holds names the refusal.
_RULES: tuple[tuple[Callable[[Any], bool], str], ...] = (
    (lambda a: a.is_unspecified, "the address is unspecified"),
    (lambda a: a.is_loopback, "the address is loopback"),
    (lambda a: a.is_link_local, "the address is link-local"),
    (lambda a: a.is_multicast, "the address is multicast"),
    (lambda a: a in _SHARED, "the address is in the shared address space (100.64.0.0/10)"),
    (lambda a: a.is_reserved, "the address is reserved"),
    (lambda a: a.is_private, "the address is in a private network"),
    (lambda a: getattr(a, "is_site_local", False), "the address is site-local"),
    (lambda a: not a.is_global or a in _PROTOCOL, "the address is not globally routable"),
)


class Refused(Exception):
    """The guard (or, in fetch_url, the page's kind) refused a connection; the message names the rule, never the URL."""


def refusal(address: Address, allow: Sequence[Network] = ()) -> str | None:
    """Why the guard refuses to connect to ``address``, or None when it may.

    An IPv4-mapped address (``::ffff:a.b.c.d``) and a NAT64 one (``64:ff9b::a.b.c.d``) reach the IPv4
    address inside them (through the kernel, through the NAT64 gateway), so they are judged as that. A 6to4
    address (``2002:a.b.c.d::``) is routed to a relay that forwards to its IPv4 address: both must pass."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in _NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in allow):
        return None
    judged: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.sixtofour is not None:
        judged.append(address.sixtofour)
    for candidate in judged:
        for holds, reason in _RULES:
            if holds(candidate):
                return reason
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    # bytes: a str host goes through Python's idna codec, which refuses some names DNS allows.
    infos = await asyncio.get_running_loop().getaddrinfo(host.encode("ascii"), port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def allowed_addresses(host: str, port: int, allow: Sequence[Network], resolve: Resolver = system_resolver) -> list[str]:
    """The addresses ``host`` resolves to, every one of them allowed; else Refused naming the rule."""
    addresses = await resolve(host, port)
    if not addresses:
        raise Refused("the host resolved to no address")
    for address in addresses:
        reason = refusal(ipaddress.ip_address(address), allow)
        if reason:
            raise Refused(reason)
    return list(addresses)


class GuardedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that sends each request only to an address the guard allows, pinned to it.

    No proxies, no environment (``trust_env=False``): a proxy would make the connection on its own lookup."""

    def __init__(self, allow: Sequence[Network] = (), resolve: Resolver = system_resolver) -> None:
        self._allow, self._resolve = tuple(allow), resolve
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise Refused("only http and https URLs are reached")
        if url.userinfo:
            raise Refused("a URL with credentials (user:password@) is refused")
        host = url.raw_host.decode("ascii")
        if not host:
            raise Refused("the URL has no host")
        port = url.port or (443 if url.scheme == "https" else 80)
        failure: httpx2.ConnectError | None = None
        for address in await allowed_addresses(host, port, self._allow, self._resolve):
            pinned = httpx2.Request(
                request.method,
                url.copy_with(host=address),
                headers=request.headers,  # Host: the name, as the request was made
                stream=request.stream,
                extensions={**request.extensions, "sni_hostname": host},
            )
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx2.ConnectError as exc:  # that address is down (nothing was sent): another may not be
                failure = exc
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()
