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
link-local, shared (CGNAT), reserved, multicast or unspecified.
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


def address_allowed(address: str) -> bool:
    """Whether a webhook may be sent to IP ``address``."""
    if settings.SLUICE_WEBHOOK_ALLOW_PRIVATE:
        return True
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global


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
