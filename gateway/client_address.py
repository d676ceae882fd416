"""Which address a request comes from: the connection's peer, or what a trusted proxy saw.

The rule, the same for every route (the sign-in limits count by it):

- A peer outside PARLEY_GATEWAY_TRUSTED_PROXIES is the client. Its ``X-Forwarded-For`` and
  ``X-Forwarded-Proto`` are ignored: they are claims, and a claim would let one client count as many.
- From a trusted peer (the edge, or a TLS terminator in front of it) the client is the right-most address
  in ``X-Forwarded-For`` that is not itself a trusted proxy. Each proxy appends the peer it saw, so that is
  the address the outermost trusted proxy saw; whatever stands left of it came from the client. An edge
  that replaces the header with its own view (HAProxy's ``set-header X-Forwarded-For %[src]``) leaves one
  address, which is that one. A trusted peer that sends no header is itself the client.

uvicorn's ``ProxyHeadersMiddleware`` implements exactly this walk (uvicorn >= 0.31). The gateway installs
it with its own setting and turns uvicorn's built-in one off (``gateway/__main__.py``), which otherwise
trusts ``FORWARDED_ALLOW_IPS``: one setting, one place.
"""

from __future__ import annotations

import ipaddress

from starlette.middleware import Middleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from parley.errors import ConfigError

#: IPv6 hosts get a /64 each (RFC 6177 and common practice): one host holds all of it, so it is one address.
IPV6_PREFIX = 64


def trusted_proxies(text: str) -> tuple[str, ...]:
    """PARLEY_GATEWAY_TRUSTED_PROXIES (addresses and CIDR networks, comma-separated) as networks; anything
    else, ``*`` included, is refused by name: a typo must not quietly trust nobody, or everybody."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ConfigError(
                f"PARLEY_GATEWAY_TRUSTED_PROXIES: {item!r} is not an IP address or CIDR network "
                "(list the addresses of the proxies in front of the gateway, e.g. 127.0.0.1,10.0.0.0/8)"
            ) from None
    return tuple(networks)


def middleware(trusted: tuple[str, ...]) -> Middleware:
    """The middleware that sets ``request.client`` (and the scheme) by the rule above."""
    return Middleware(ProxyHeadersMiddleware, trusted_hosts=list(trusted))


def limit_key(host: str) -> str:
    """The address the sign-in limits count: an IPv4 address as it is (also one written IPv4-mapped), an
    IPv6 address as its /64; anything else (a proxy's odd entry) as it came."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)
