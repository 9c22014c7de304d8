"""What a gateway asks the decision service, as the limiter's arguments.

Both protocols end here: Envoy's descriptors (:func:`from_descriptors`) and a
forward-auth request's headers (:func:`from_headers`) become one
:class:`Request`, the keyword arguments of :meth:`.aio.AsyncLimiter.decide`.
Nothing here imports gRPC or an HTTP server, so the mapping is tested alone.

Bad input never raises and never goes unlimited. Unknown descriptor keys are
ignored; a value over :data:`MAX_VALUE` characters, a cost that is not a
whole number from 1 to :data:`MAX_COST`, and everything past
:data:`MAX_DESCRIPTORS` descriptors or :data:`MAX_ENTRIES` entries are
dropped. What is dropped is missing, and a missing identity shares the
``~`` bucket of its limit, a missing route falls to the all-routes policies:
the strict side. Each kind of problem is logged once per process at WARNING
(``service.bad_input``), then at DEBUG, so a misconfigured gateway cannot
flood the log.
"""

from __future__ import annotations

import functools
import logging
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from sluice.identity import TrustedProxies, client_ip

__all__ = [
    "MAX_COST",
    "MAX_DESCRIPTORS",
    "MAX_ENTRIES",
    "MAX_VALUE",
    "DescriptorKeys",
    "HeaderNames",
    "Request",
    "from_descriptors",
    "from_headers",
    "headers_of",
    "parse_mapping",
]

logger = logging.getLogger("sluice.service")

MAX_DESCRIPTORS = 16  #: descriptors read per RLS request; the rest are dropped
MAX_ENTRIES = 64  #: entries read per RLS request, over all its descriptors
MAX_VALUE = 2048  #: characters of one value (a path, a key); longer is dropped
MAX_COST = 1_000_000  #: the largest request cost taken from a gateway

_warned: set[str] = set()


def bad_input(kind: str, detail: str) -> None:
    """Log a problem with a gateway's request: WARNING the first time per kind, then DEBUG."""
    level = logging.DEBUG if kind in _warned else logging.WARNING
    _warned.add(kind)
    logger.log(level, "service.bad_input: %s: %s", kind, detail)


class Request(NamedTuple):
    """One request to decide: the keyword arguments of ``AsyncLimiter.decide``.

    A tuple rather than a frozen dataclass: one is built per call.
    """

    route: str | None = None  #: a route slug, when the gateway names it
    #: else the route is matched by method and path; by path alone when None
    method: str | None = None
    path: str | None = None
    tenant: str | None = None
    user: str | None = None
    api_key: str | None = None
    ip: str | None = None
    cost: int | None = None  #: tokens, replacing the route's cost; None: the route's

    def arguments(self) -> dict[str, str | int | None]:
        """The keyword arguments of ``decide``."""
        return dict(self._asdict())


_FIELDS = ("route", "method", "path", "tenant", "user", "api_key", "ip")


@dataclass(frozen=True, slots=True)
class DescriptorKeys:
    """Which Envoy descriptor entry key carries which part of the request.

    The defaults are the keys of the actions in ``docs/gateways/envoy.yaml``:
    ``remote_address`` is the key Envoy's ``remote_address`` action writes,
    ``method`` and ``path`` come from ``request_headers`` actions on
    ``:method`` and ``:path``, the others from headers or ``generic_key``.
    """

    route: str = "route"
    method: str = "method"
    path: str = "path"
    tenant: str = "tenant"
    user: str = "user"
    api_key: str = "api_key"
    ip: str = "remote_address"

    def by_key(self) -> dict[str, str]:
        """Descriptor key -> request field."""
        return {getattr(self, name): name for name in _FIELDS}


@dataclass(frozen=True, slots=True)
class HeaderNames:
    """Which headers of a forward-auth request carry which part of the request.

    ``method`` and ``path`` are lists: the first header present wins, so one
    service serves Traefik (``X-Forwarded-Method`` / ``X-Forwarded-Uri``) and
    nginx (``X-Original-Method`` / ``X-Original-URI``). The client address
    is the peer, or ``forwarded_for``'s last untrusted hop when the peer is a
    trusted proxy (:func:`~sluice.identity.client_ip`).
    """

    route: str = "Sluice-Route"
    method: tuple[str, ...] = ("X-Forwarded-Method", "X-Original-Method")
    path: tuple[str, ...] = ("X-Forwarded-Uri", "X-Original-URI")
    tenant: str = "X-Tenant"
    user: str = "X-User"
    api_key: str = "X-Api-Key"
    cost: str = "Sluice-Cost"
    forwarded_for: str = "X-Forwarded-For"


def parse_mapping(pairs: Iterable[str], default: DescriptorKeys) -> DescriptorKeys:
    """``DescriptorKeys`` from ``field=key`` strings (``tenant=x-tenant``) over ``default``."""
    changes: dict[str, str] = {}
    for pair in pairs:
        name, sep, key = pair.partition("=")
        if not sep or name.strip() not in _FIELDS or not key.strip():
            raise ValueError(
                f"expected FIELD=KEY with FIELD one of {', '.join(_FIELDS)}: {pair!r}"
            )
        changes[name.strip()] = key.strip()
    return replace(default, **changes)


def _value(kind: str, value: str) -> str | None:
    if not value:
        return None
    if len(value) > MAX_VALUE:
        bad_input("oversized_value", f"{kind}: {len(value)} characters, dropped")
        return None
    return value


def _cost(value: str | int | None) -> int | None:
    if value is None or value == "" or value == 0:
        return None
    try:
        cost = int(value)
    except ValueError:
        bad_input("bad_cost", f"{value!r:.40} is not a whole number; route's cost")
        return None
    if not 1 <= cost <= MAX_COST:
        bad_input("bad_cost", f"{cost} is outside 1..{MAX_COST}; route's cost")
        return None
    return cost


def _path(value: str | None) -> str | None:
    """The path of a request target, without its query, percent-decoded as WSGI's PATH_INFO."""
    if value is None:
        return None
    path = value.split("?", 1)[0].split("#", 1)[0]
    return urllib.parse.unquote(path) or "/"


@functools.lru_cache(maxsize=16)
def _by_key(keys: DescriptorKeys) -> dict[str, str]:
    return keys.by_key()


def from_descriptors(
    descriptors: Sequence[Sequence[tuple[str, str]]],
    *,
    keys: DescriptorKeys,
    hits_addend: int = 0,
    descriptor_hits: Sequence[int] = (),
) -> Request:
    """The request an Envoy RLS call describes: the entries of all its descriptors, merged.

    Each entry whose key ``keys`` names fills that field; the first value of
    a key wins. No method entry leaves the method unset: the path alone then
    names the route, when only one route has that path. ``hits_addend`` (the
    request's, else the largest of the descriptors' own) is the cost; 0 means
    unset, as in Envoy.
    """
    by_key, values, unknown = _by_key(keys), {}, []
    if len(descriptors) > MAX_DESCRIPTORS:
        bad_input("oversized_request", f"{len(descriptors)} descriptors, first read")
    entries = [e for d in descriptors[:MAX_DESCRIPTORS] for e in d]
    if len(entries) > MAX_ENTRIES:
        bad_input("oversized_request", f"{len(entries)} entries, first read")
    for key, value in entries[:MAX_ENTRIES]:
        name = by_key.get(key)
        if name is None:
            unknown.append(key)
        elif name not in values and (kept := _value(name, value)):
            values[name] = kept
    if unknown:
        bad_input("unknown_descriptor_key", ", ".join(sorted(set(unknown)))[:200])
    if "tenant" not in values:
        bad_input("missing_tenant", "decided as anonymous traffic (the ~ tenant)")
    cost = hits_addend or max(descriptor_hits, default=0)
    return Request(
        route=values.get("route"),
        method=values.get("method"),
        path=_path(values.get("path")),
        tenant=values.get("tenant"),
        user=values.get("user"),
        api_key=values.get("api_key"),
        ip=client_ip(values.get("ip"), None, _NO_PROXIES),
        cost=_cost(cost),
    )


_NO_PROXIES = TrustedProxies()


def from_headers(
    get: Callable[[str], str | None],
    *,
    peer: str | None,
    names: HeaderNames,
    trusted: TrustedProxies,
) -> Request:
    """The request a forward-auth call describes: ``get(name)`` reads one header, or None."""
    tenant = _header(get, names.tenant)
    if tenant is None:
        bad_input("missing_tenant", "decided as anonymous traffic (the ~ tenant)")
    return Request(
        route=_header(get, names.route),
        method=(_first(get, names.method) or "GET").upper(),
        path=_path(_first(get, names.path)),
        tenant=tenant,
        user=_header(get, names.user),
        api_key=_header(get, names.api_key),
        ip=client_ip(peer, _header(get, names.forwarded_for), trusted),
        cost=_cost(_header(get, names.cost)),
    )


def _header(get: Callable[[str], str | None], name: str) -> str | None:
    value = get(name)
    return None if value is None else _value(name, value.strip())


def _first(get: Callable[[str], str | None], names: tuple[str, ...]) -> str | None:
    """The value of the first of ``names`` present and not empty."""
    for name in names:
        if value := _header(get, name):
            return value
    return None


def headers_of(pairs: Iterable[tuple[bytes, bytes]]) -> Mapping[str, str]:
    """ASGI header pairs as a dict of lower-case names (the first of repeated names wins)."""
    found: dict[str, str] = {}
    for name, value in pairs:
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found
