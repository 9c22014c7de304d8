"""Who is calling: the identity a middleware's ``identify`` function returns, and the client IP.

The client IP is the peer address, unless the peer is one of the configured
trusted proxies: then ``X-Forwarded-For`` is read from the right, skipping
trusted proxies, and the first other address is the client. Addresses a client
wrote itself (further left) are never believed. A hop that is not an IP
address gives None: such requests share the ``ip:~`` bucket.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Identity", "TrustedProxies", "client_ip"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_CACHED = 4096  #: addresses whose parse is kept (a gateway sees the same few)


@dataclass(frozen=True, slots=True)
class Identity:
    """What the gateway knows about the caller besides its IP (all optional)."""

    tenant: str | None = None  #: the tenant slug, as the control plane knows it
    user: str | None = None  #: the end user's id
    api_key: str | None = None  #: the API key (hashed before it reaches Redis)


class TrustedProxies:
    """A set of proxy addresses or networks (``10.0.0.0/8``, ``::1``) whose headers are believed."""

    def __init__(self, proxies: Iterable[str] = ()) -> None:
        self.networks: tuple[_Network, ...] = tuple(
            ipaddress.ip_network(p.strip(), strict=False) for p in proxies if p.strip()
        )

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, address: str | None) -> bool:
        parsed = _parse(address)
        return parsed is not None and any(parsed in net for net in self.networks)


@functools.lru_cache(maxsize=_CACHED)
def _parse(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not address:
        return None
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped:
        return parsed.ipv4_mapped
    return parsed


@functools.lru_cache(maxsize=_CACHED)
def _normalized(address: str | None) -> str | None:
    """``address`` as :func:`client_ip` returns it, or None when it is not an IP address."""
    found = _parse(address)
    return str(found) if found else None


def client_ip(
    peer: str | None, forwarded_for: str | None, trusted: TrustedProxies
) -> str | None:
    """Return the client's address, normalized, or None when it cannot be told."""
    if not trusted or peer not in trusted or not forwarded_for:
        return _normalized(peer)
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if hop not in trusted:
            return _normalized(hop)
    return _normalized(hops[0]) if hops else None  # every hop is a trusted proxy
