"""The rule set a snapshot carries: tiers, tenants, routes and policies, as value types.

The control plane compiles its rule tables into a :class:`Rules` value; gateways
get the same value back from a snapshot (:mod:`.snapshot` wraps it in a version,
:mod:`.parsing` reads it from JSON). Rules serialize to canonical bytes, so equal
rules give equal bytes and an equal :meth:`Rules.digest` on every machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from .calendar import Calendar
from .canonical import canonical_json
from .kinds import limit_order
from .quota import (
    PERIODS,
    CalendarQuota,
    ConcurrencyLimit,
    Dimension,
    Limit,
    RateLimit,
    SlidingWindow,
    describe_limit,
)

__all__ = [
    "ALL_ROUTES",
    "DEFAULT_SCOPE",
    "PERIODS",
    "Calendar",
    "CalendarQuota",
    "ConcurrencyLimit",
    "CostRefusal",
    "Dimension",
    "FailureMode",
    "Limit",
    "Policy",
    "RateLimit",
    "Route",
    "Rules",
    "ScopeKind",
    "SlidingWindow",
    "describe_limit",
    "fallback_rules",
    "format_time",
    "request_cost",
    "scope_key",
    "whole_seconds",
]

ALL_ROUTES = "*"
DEFAULT_SCOPE = "default"


class FailureMode(StrEnum):
    """What a gateway does with a route when the limiter's store is unavailable."""

    #: admit through an in-process bucket holding the whole limit, for this gateway:
    #: a Redis outage lets through at most about one limit per gateway, not a flood
    OPEN = "open"
    CLOSED = "closed"  #: reject with 503: the limiter is at fault, not the client
    LOCAL = "local"  #: enforce a conservative in-process bucket (a share of the limit)
    OPEN_UNBOUNDED = "open-unbounded"  #: admit everything, unchecked, while Redis fails


class CostRefusal(StrEnum):
    """Why a request's declared cost was not taken as it was (:meth:`Route.request_cost`)."""

    ABOVE_MAX = "cost_above_max"  #: above the route's ``max_cost``: decided at it
    NOT_TAKEN = "cost_not_taken"  #: the route takes no declared cost: its own cost


class ScopeKind(StrEnum):
    """Who a policy applies to, from the most general to the most specific."""

    DEFAULT = "default"
    TIER = "tier"
    TENANT = "tenant"


def scope_key(kind: ScopeKind | str, subject: str | None = None) -> str:
    """Return the scope string used in snapshots: ``default``, ``tier:pro``, ``tenant:acme``."""
    if kind == ScopeKind.DEFAULT:
        return DEFAULT_SCOPE
    if not subject:
        raise ValueError(f"a {kind} scope needs a subject")
    return f"{kind}:{subject}"


@dataclass(frozen=True, slots=True)
class Policy:
    """The limits that apply to one (scope, route) pair; the most specific policy wins whole."""

    scope: str  #: ``default``, ``tier:<slug>`` or ``tenant:<slug>``
    route: str  #: a route slug, or ``*`` for every route
    limits: tuple[RateLimit, ...]
    expires_at: datetime | None = None  #: set on temporary tenant overrides only
    #: caps on requests in flight (limits of kind "concurrent"); usually empty
    concurrency: tuple[ConcurrencyLimit, ...] = ()
    _expires_ts: float = field(init=False, repr=False, compare=False, default=0.0)

    def __post_init__(self) -> None:
        if self.expires_at is not None:  # the format keeps whole seconds
            object.__setattr__(self, "expires_at", whole_seconds(self.expires_at))
        ts = self.expires_at.timestamp() if self.expires_at else float("inf")
        object.__setattr__(self, "_expires_ts", ts)

    @property
    def scope_kind(self) -> ScopeKind:
        return ScopeKind(self.scope.partition(":")[0])

    @property
    def subject(self) -> str | None:
        """The tier or tenant slug of the scope; None for the default scope."""
        return self.scope.partition(":")[2] or None

    @property
    def is_override(self) -> bool:
        """True for a temporary policy: it beats the permanent one of its (scope, route)."""
        return self.expires_at is not None

    @property
    def key(self) -> tuple[str, str, bool]:
        """Identity of the policy within a rule set (stable across versions)."""
        return (self.scope, self.route, self.is_override)

    def is_live(self, now: float) -> bool:
        """Whether the policy applies at ``now`` (epoch seconds): expired overrides do not."""
        return now < self._expires_ts

    def describe(self) -> str:
        """Say where the policy applies, as people read it: ``tier pro · search``."""
        scope = (
            "default"
            if self.scope == DEFAULT_SCOPE
            else self.scope.replace(":", " ", 1)
        )
        route = "all routes" if self.route == ALL_ROUTES else self.route
        override = " (override)" if self.is_override else ""
        return f"{scope} · {route}{override}"

    def to_json(self) -> dict[str, Any]:
        data = {
            "scope": self.scope,
            "route": self.route,
            "expires_at": format_time(self.expires_at) if self.expires_at else None,
            "limits": [
                limit.to_json() for limit in sorted(self.limits, key=limit_order)
            ],
        }
        if self.concurrency:  # optional member: absent keeps older bytes unchanged
            ordered = sorted(self.concurrency, key=ConcurrencyLimit.sort_key)
            data["concurrency"] = [limit.to_json() for limit in ordered]
        return data


@dataclass(frozen=True, slots=True)
class Route:
    """A named API operation that requests are matched to by method and path."""

    slug: str
    methods: tuple[str, ...]  #: upper-case HTTP methods, sorted
    path: str  #: pattern such as ``/v1/orders/{id}``
    cost: int = 1  #: tokens a request takes unless a limit overrides it
    failure_mode: FailureMode = FailureMode.OPEN
    #: the largest cost a request may declare (a gateway's header, Envoy's
    #: ``hits_addend``); None: a request cannot change the route's cost
    max_cost: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "methods": sorted(self.methods),
            "path": self.path,
            "cost": self.cost,
            "failure_mode": self.failure_mode.value,
        }
        if self.max_cost is not None:  # optional member: absent keeps older bytes
            data["max_cost"] = self.max_cost
        return data

    @property
    def largest_cost(self) -> int:
        """The most a request of this route can cost: what its limits must hold."""
        return max(self.cost, self.max_cost or 0)


@dataclass(frozen=True, slots=True)
class Rules:
    """A complete rule set: what a snapshot carries besides its version metadata."""

    tiers: Mapping[str, str]  #: tier slug -> display name
    tenants: Mapping[str, str]  #: tenant slug -> tier slug
    routes: Mapping[str, Route]  #: route slug -> route
    policies: tuple[Policy, ...]
    #: where customers read about the limits (docs or changelog URL), linked from
    #: every 429; empty: no link. Written only when set (older bytes unchanged).
    documentation: str = ""
    #: tenant slug -> its time zone and billing day (calendar quotas); a tenant
    #: without one: UTC, billing day 1. Written only when set (older bytes unchanged).
    calendars: Mapping[str, Calendar] = field(default_factory=dict)
    #: IANA zone name -> its POSIX TZ rule, for every zone ``calendars`` names
    #: (``UTC`` needs none): every gateway computes the same boundaries
    zones: Mapping[str, str] = field(default_factory=dict)
    #: canonical bytes, computed once (a rule set is immutable; 6 MB with 100k tenants)
    _canonical: bytes | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def to_json(self) -> dict[str, Any]:
        policies = sorted(self.policies, key=lambda p: p.key)
        data: dict[str, Any] = {
            "tiers": {slug: {"name": name} for slug, name in self.tiers.items()},
            "tenants": dict(self.tenants),
            "routes": {slug: route.to_json() for slug, route in self.routes.items()},
            "policies": [policy.to_json() for policy in policies],
        }
        if self.documentation:
            data["documentation"] = self.documentation
        if self.calendars:
            data["calendars"] = {
                slug: calendar.to_json() for slug, calendar in self.calendars.items()
            }
        if self.zones:
            data["zones"] = dict(self.zones)
        return data

    def calendar(self, tenant: str | None) -> Calendar:
        """The calendar of ``tenant`` (UTC, billing day 1 when it has none)."""
        return (
            self.calendars.get(tenant, _DEFAULT_CALENDAR)
            if tenant
            else _DEFAULT_CALENDAR
        )

    def canonical_bytes(self) -> bytes:
        """``canonical_json(self.to_json())``, serialized on the first call only."""
        if self._canonical is None:
            object.__setattr__(self, "_canonical", canonical_json(self.to_json()))
        return self._canonical  # type: ignore[return-value]

    def digest(self) -> str:
        """SHA-256 of the canonical rules: equal for equal rules, whatever their version."""
        return hashlib.sha256(self.canonical_bytes()).hexdigest()


_DEFAULT_CALENDAR = Calendar()


def request_cost(
    route: Route | None, declared: int | None
) -> tuple[int, CostRefusal | None]:
    """The cost a request of ``route`` (None: no route matched) declaring ``declared``
    (None: nothing) is decided at, and why a declared cost was not taken, if it was not.

    The one place a declared cost meets the rules, so the client, the decision
    service and the nginx module's twin (``nginx/rules.lua``) agree. Within
    1..``max_cost`` it is taken; above ``max_cost`` the request is decided at
    ``max_cost``; on a route without ``max_cost`` (or no route) at the route's
    cost (1 without a route). Never an error to the client: a gateway declared
    it, and the refusal says why, for the log and the decision.
    """
    cost = route.cost if route else 1
    if declared is None or declared == cost:
        return cost, None
    if route is None or route.max_cost is None:
        return cost, CostRefusal.NOT_TAKEN
    if declared > route.max_cost:
        return route.max_cost, CostRefusal.ABOVE_MAX
    return declared, None


def whole_seconds(moment: datetime) -> datetime:
    """``moment`` in UTC without its microseconds: the format keeps whole seconds."""
    if moment.tzinfo is None:
        raise ValueError("snapshot times must be timezone-aware")
    return moment.astimezone(UTC).replace(microsecond=0)


def format_time(moment: datetime) -> str:
    """``2026-12-01T08:00:00Z``: how every time of the format is written."""
    return whole_seconds(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def fallback_rules(*, rate: int = 10, burst: int = 20) -> Rules:
    """The built-in rule set of a gateway that has never seen a snapshot: strict, not unlimited."""
    limit = Limit(dimension=Dimension.IP, rate=rate, period=1, burst=burst)
    policy = Policy(scope=DEFAULT_SCOPE, route=ALL_ROUTES, limits=(limit,))
    return Rules(tiers={}, tenants={}, routes={}, policies=(policy,))
