"""Parse snapshot JSON into the value types of :mod:`.rules`, checking every member.

A gateway must never switch to a document it cannot fully understand, so the
parser is strict: unknown members, wrong types and dangling references are
errors that name their path in the document.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .calendar import DEFAULT_ZONE, Calendar, parse_zone_rule
from .canonical import canonical_json
from .errors import SnapshotError
from .kinds import CALENDAR_QUOTA, GCRA, SLIDING_WINDOW, named, registered
from .reading import PUBLIC as _PUBLIC
from .reading import array as _list
from .reading import boolean as _boolean
from .reading import choice as _enum
from .reading import integer as _integer
from .reading import mapping as _mapping
from .reading import members as _object
from .reading import moment as _time
from .reading import public as _public
from .reading import string as _string
from .routing import HTTP_METHODS, PatternError, RouteTable
from .rules import (
    CalendarQuota,
    ConcurrencyLimit,
    Dimension,
    FailureMode,
    Policy,
    RateLimit,
    Route,
    Rules,
    ScopeKind,
    SlidingWindow,
)
from .validation import validate_rules

__all__ = [
    "parse_calendar_quota",
    "parse_concurrency",
    "parse_limit",
    "parse_policy",
    "parse_route",
    "parse_rules",
    "parse_sliding_window",
    "parse_snapshot_fields",
]

_SNAPSHOT_KEYS = {
    "format",
    "version",
    "parent",
    "published_at",
    "effective_at",
    "rules",
    "hash",
}
_RULES_KEYS = {"tiers", "tenants", "routes", "policies"}
_RULES_OPTIONAL = {"documentation", "calendars", "zones"}
_ROUTE_KEYS = {"methods", "path", "cost", "failure_mode"}
_ROUTE_OPTIONAL = {"max_cost"}
_POLICY_KEYS = {"scope", "route", "expires_at", "limits"}
_POLICY_OPTIONAL = {"concurrency"}
_CALENDAR_KEYS = {"zone", "billing_day"}
_CONCURRENCY_KEYS = {"dimension", "max_inflight", "timeout", "shadow"}


def parse_snapshot_fields(
    data: Any, *, format_version: int, hashed: bytes | None = None
) -> dict[str, Any]:
    """The members of the snapshot document in ``data``, after checking its shape,
    format, rules and hash: the keyword arguments of ``Snapshot``.

    ``hashed``: the canonical bytes the hash is of, when the caller has them (the
    document's own bytes with the hash taken out); its rules are then known to be
    the ones that were validated when the document was made, and are parsed
    without being validated again."""
    obj = _object(data, "$", _SNAPSHOT_KEYS)
    if obj["format"] != format_version:
        raise SnapshotError(
            "format", f"unsupported format {obj['format']!r}, expected {format_version}"
        )
    claimed = _string(obj["hash"], "hash")
    trusted = hashed is not None
    if hashed is None:
        hashed = canonical_json({key: obj[key] for key in obj if key != "hash"})
    actual = hashlib.sha256(hashed).hexdigest()
    if actual != claimed:
        raise SnapshotError("hash", "does not match the document (corrupt or altered)")
    parent = obj["parent"]
    return {
        "version": _integer(obj["version"], "version", minimum=0),
        "parent": None if parent is None else _integer(parent, "parent", minimum=0),
        "published_at": _time(obj["published_at"], "published_at"),
        "effective_at": _time(obj["effective_at"], "effective_at"),
        "rules": parse_rules(obj["rules"], validate=not trusted),
        "hash": claimed,
    }


def parse_rules(data: Any, path: str = "rules", *, validate: bool = True) -> Rules:
    """Return the rules in ``data``; raise SnapshotError for the first problem found.

    Without ``validate``, only their shape is checked, not the rules' own checks
    (``validate_rules``): for rules known to have passed them (a hashed document)."""
    obj = _object(data, path, _RULES_KEYS, _RULES_OPTIONAL)
    tiers = {
        _string(slug, f"{path}.tiers"): _string(
            _object(value, f"{path}.tiers.{slug}", {"name"})["name"],
            f"{path}.tiers.{slug}.name",
        )
        for slug, value in _mapping(obj["tiers"], f"{path}.tiers").items()
    }
    tenants = _tenants(_mapping(obj["tenants"], f"{path}.tenants"), path)
    routes = {
        slug: parse_route(slug, value, f"{path}.routes.{slug}")
        for slug, value in _mapping(obj["routes"], f"{path}.routes").items()
    }
    policies = tuple(
        parse_policy(value, f"{path}.policies[{index}]")
        for index, value in enumerate(_list(obj["policies"], f"{path}.policies"))
    )
    documentation = ""  # checked by validate_rules, as the control plane checks it
    if "documentation" in obj:
        documentation = _string(obj["documentation"], f"{path}.documentation")
    rules = Rules(
        tiers=tiers,
        tenants=tenants,
        routes=routes,
        policies=policies,
        documentation=documentation,
        calendars=_calendars(obj.get("calendars", {}), f"{path}.calendars"),
        zones=_zones(obj.get("zones", {}), f"{path}.zones"),
    )
    problems = validate_rules(rules) if validate else []
    if problems:
        raise SnapshotError(f"{path}.{problems[0].path}", problems[0].message)
    return rules


def _tenants(data: dict[str, Any], path: str) -> dict[str, str]:
    """Tenant -> tier; the path of a bad entry is built only when one is found
    (a document may carry 100,000 tenants)."""
    for slug, tier in data.items():
        if not isinstance(tier, str) or not tier:
            _string(tier, f"{path}.tenants.{slug}")
    return dict(data)


def _calendars(data: Any, path: str) -> dict[str, Calendar]:
    """Tenant -> calendar (the tenants and zones they name: ``validate_rules``)."""
    calendars = {}
    for slug, value in _mapping(data, path).items():
        at = f"{path}.{slug}"
        obj = _object(value, at, set(), _CALENDAR_KEYS)
        billing_day = _integer(
            obj.get("billing_day", 1), f"{at}.billing_day", minimum=1
        )
        if billing_day > 31:
            raise SnapshotError(f"{at}.billing_day", "must be at most 31")
        zone = _string(obj.get("zone", DEFAULT_ZONE), f"{at}.zone")
        calendars[slug] = Calendar(zone, billing_day)
    return calendars


def _zones(data: Any, path: str) -> dict[str, str]:
    """IANA zone name -> POSIX TZ rule, each rule checked to be one."""
    zones = {}
    for name, rule in _mapping(data, path).items():
        zones[name] = _string(rule, f"{path}.{name}")
        try:
            parse_zone_rule(rule)
        except ValueError as exc:
            raise SnapshotError(
                f"{path}.{name}", f"not a POSIX TZ rule: {exc}"
            ) from None
    return zones


def parse_route(slug: str, data: Any, path: str = "route") -> Route:
    """One route (``Route.to_json``); SnapshotError names the bad member."""
    obj = _object(data, path, _ROUTE_KEYS, _ROUTE_OPTIONAL)
    methods = tuple(
        _string(m, f"{path}.methods") for m in _list(obj["methods"], f"{path}.methods")
    )
    for method in methods:
        if method not in HTTP_METHODS:
            raise SnapshotError(f"{path}.methods", f"unknown HTTP method {method!r}")
    route = Route(
        slug=slug,
        methods=tuple(sorted(methods)),
        path=_string(obj["path"], f"{path}.path"),
        cost=_integer(obj["cost"], f"{path}.cost", minimum=1),
        failure_mode=_enum(FailureMode, obj["failure_mode"], f"{path}.failure_mode"),
        max_cost=(
            _integer(obj["max_cost"], f"{path}.max_cost", minimum=1)
            if "max_cost" in obj
            else None
        ),
    )
    try:
        RouteTable([route])
    except PatternError as exc:
        raise SnapshotError(f"{path}.path", str(exc)) from None
    return route


def parse_policy(data: Any, path: str = "policy") -> Policy:
    """One policy (``Policy.to_json``); SnapshotError names the bad member."""
    obj = _object(data, path, _POLICY_KEYS, _POLICY_OPTIONAL)
    scope = _string(obj["scope"], f"{path}.scope")
    _enum(ScopeKind, scope.partition(":")[0], f"{path}.scope")
    expires = obj["expires_at"]
    caps = _list(obj.get("concurrency", []), f"{path}.concurrency")
    return Policy(
        scope=scope,
        route=_string(obj["route"], f"{path}.route"),
        limits=tuple(
            parse_limit(value, f"{path}.limits[{index}]")
            for index, value in enumerate(_list(obj["limits"], f"{path}.limits"))
        ),
        expires_at=None if expires is None else _time(expires, f"{path}.expires_at"),
        concurrency=tuple(
            parse_concurrency(value, f"{path}.concurrency[{index}]")
            for index, value in enumerate(caps)
        ),
    )


def parse_limit(data: Any, path: str = "limit") -> RateLimit:
    """One rate limit of a policy, read by the kind its ``kind`` member names
    (absent: ``gcra``, every snapshot before kinds); SnapshotError names the bad
    member."""
    name = data.get("kind", GCRA.name) if isinstance(data, dict) else GCRA.name
    kind = named(name)
    if kind is None:
        known = ", ".join(kind.name for kind in registered())
        raise SnapshotError(f"{path}.kind", f"{name!r} is not one of: {known}")
    limit: RateLimit = kind.parse(data, path)
    return limit


def parse_sliding_window(data: Any, path: str = "limit") -> SlidingWindow:
    """One sliding window (``SlidingWindow.to_json``): the kind's own parser."""
    return SLIDING_WINDOW.parse(data, path)


def parse_calendar_quota(data: Any, path: str = "limit") -> CalendarQuota:
    """One calendar quota (``CalendarQuota.to_json``): the kind's own parser."""
    return CALENDAR_QUOTA.parse(data, path)


def parse_concurrency(data: Any, path: str = "concurrency") -> ConcurrencyLimit:
    """One concurrency cap (``ConcurrencyLimit.to_json``); SnapshotError names the bad member."""
    obj = _object(data, path, _CONCURRENCY_KEYS, _PUBLIC)
    return ConcurrencyLimit(
        dimension=_enum(Dimension, obj["dimension"], f"{path}.dimension"),
        max_inflight=_integer(obj["max_inflight"], f"{path}.max_inflight", minimum=1),
        timeout=_integer(obj["timeout"], f"{path}.timeout", minimum=1),
        shadow=_boolean(obj["shadow"], f"{path}.shadow"),
        **_public(obj, path),
    )
