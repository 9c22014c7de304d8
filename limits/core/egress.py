"""Where the control plane may send webhooks: public addresses only, by default.

A webhook URL is typed by a support agent and fetched by a Celery worker
inside the operator's network. Without a guard, ``http://169.254.169.254/``
(a cloud metadata service), ``http://localhost:6379/`` or a private admin
service would be one endpoint away. So, unless ``SLUICE_WEBHOOK_ALLOW_PRIVATE``
is on (a development machine, or receivers on the operator's own network):

* an endpoint whose URL names a non-public address (or ``localhost``) is
  refused when it is saved, with the reason on the ``url`` field;
* every connection is checked after it is made, against the address it
  actually reached, so a host name that resolves (or is re-pointed) to a
  private address is refused before anything is sent.

Public means :attr:`ipaddress.IPv4Address.is_global`: not private, loopback,
link-local, shared (CGNAT), reserved, multicast or unspecified. An IPv6 address
that carries an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``)
reaches that IPv4 address through a translator or tunnel, so it is public only
when the IPv4 address is; the local-use NAT64 prefix ``64:ff9b:1::/48`` (RFC
8215) translates to whatever the operator's network holds and is never public.
"""

from __future__ import annotations

import http.client
import ipaddress
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings

__all__ = ["PrivateAddress", "address_allowed", "public_opener", "url_problem"]


class PrivateAddress(OSError):
    """A webhook connection reached an address it may not (reported, never sent to)."""


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052, the well-known prefix
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215, local use
_IPV4_COMPATIBLE = ipaddress.IPv6Network(
    "::/96"
)  # deprecated, still routed by some stacks


def address_allowed(address: str) -> bool:
    """Whether a webhook may be sent to IP ``address``."""
    if settings.SLUICE_WEBHOOK_ALLOW_PRIVATE:
        return True
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(ip, ipaddress.IPv4Address):
        return ip.is_global
    if ip in _NAT64_LOCAL:
        return False
    return ip.is_global and all(v4.is_global for v4 in _embedded_ipv4(ip))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a packet to ``ip`` may end up at, through a translator or tunnel."""
    found = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [v4 for v4 in found if v4 is not None]


def url_problem(url: str) -> str | None:
    """Why ``url`` may not receive webhooks, judged by its host as written; None if it may.

    Host names are judged when connecting (:func:`public_opener`): what they
    resolve to can change after the endpoint is saved.
    """
    host = (urlsplit(url).hostname or "").rstrip(".")
    if settings.SLUICE_WEBHOOK_ALLOW_PRIVATE or not host:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return "This URL points at this machine; webhooks go to public addresses only."
    try:
        allowed = address_allowed(host)
    except ValueError:  # a host name, not an address
        return None
    if not allowed:
        return f"{host} is not a public address; webhooks go to public addresses only."
    return None


def _check_peer(connection: http.client.HTTPConnection) -> None:
    address = connection.sock.getpeername()[0]
    if not address_allowed(address):
        connection.sock.close()
        raise PrivateAddress(
            f"{connection.host} is at {address}, not a public address "
            "(SLUICE_WEBHOOK_ALLOW_PRIVATE is off)"
        )


class _PublicHTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _check_peer(self)


class _PublicHTTPSConnection(http.client.HTTPSConnection, _PublicHTTPConnection):
    """HTTPSConnection.connect opens the socket through _PublicHTTPConnection.connect,
    so the address is checked before the TLS handshake."""


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_PublicHTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_PublicHTTPSConnection, req, context=self._context)


def public_opener(
    *handlers: urllib.request.BaseHandler,
) -> urllib.request.OpenerDirector:
    """A urllib opener whose HTTP and HTTPS connections reach allowed addresses only."""
    return urllib.request.build_opener(_HTTPHandler, _HTTPSHandler, *handlers)
