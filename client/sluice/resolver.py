"""Which policy applies to a request, and why: the one resolver of Sluice.

Gateways enforce with it and the control plane explains with it, so what an
operator reads in Explain is what a gateway does. Precedence, most specific
first; the first level with a live policy wins as a whole:

1. (tenant, route)   2. (tenant, all routes)
3. (tier, route)     4. (tier, all routes)
5. (default, route)  6. (default, all routes)

Within one level, a live temporary override beats the permanent policy. The
default policy for all routes always exists (see :mod:`.validation`), so every
request resolves to a policy: nothing is ever unlimited.

Resolution costs at most six dictionary look-ups, whatever the size of the rules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from .routing import RouteTable
from .rules import ALL_ROUTES, DEFAULT_SCOPE, Policy, Route, Rules, ScopeKind, scope_key
from .snapshot import Snapshot

__all__ = ["Level", "Resolution", "Resolver", "resolve"]


class Level(StrEnum):
    """The precedence levels, from the most specific to the most general."""

    TENANT_ROUTE = "tenant · route"
    TENANT_ALL = "tenant · all routes"
    TIER_ROUTE = "tier · route"
    TIER_ALL = "tier · all routes"
    DEFAULT_ROUTE = "default · route"
    DEFAULT_ALL = "default · all routes"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A policy that matched a request at one precedence level."""

    level: Level
    policy: Policy


@dataclass(frozen=True, slots=True)
class Resolution:
    """The policy that applies to a request and the ones it beat."""

    policy: Policy  #: the winning policy; every one of its limits must admit
    level: Level  #: the precedence level it won at
    tenant: str | None  #: the tenant as given, None for anonymous traffic
    tier: str | None  #: the tenant's tier, None when the tenant is unknown
    route: Route | None  #: the matched route, None when only all-route policies apply
    beaten: tuple[Candidate, ...]  #: live, more general policies that also matched
    expired: tuple[Candidate, ...]  #: overrides that matched but have expired

    @property
    def cost(self) -> int:
        """Tokens a request of this route takes unless a limit says otherwise."""
        return self.route.cost if self.route else 1

    def why(self) -> str:
        """One sentence for people: which policy won, at which level, over what."""
        text = (
            f"{self.policy.describe()} applies: the most specific match ({self.level})"
        )
        if self.beaten:
            others = "; ".join(c.policy.describe() for c in self.beaten)
            text += f", over {others}"
        if self.expired:
            gone = "; ".join(c.policy.describe() for c in self.expired)
            text += f"; expired and ignored: {gone}"
        return text + "."


class Resolver:
    """An index over one rule set; build it once per snapshot and share it."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.routes = RouteTable(rules.routes.values())
        # (scope, route) -> (override or None, permanent or None)
        self._index: dict[tuple[str, str], tuple[Policy | None, Policy | None]] = {}
        for policy in rules.policies:
            override, permanent = self._index.get(
                (policy.scope, policy.route), (None, None)
            )
            if policy.is_override:
                override = policy
            else:
                permanent = policy
            self._index[(policy.scope, policy.route)] = (override, permanent)

    def match_route(self, method: str | None, path: str) -> Route | None:
        """Return the route a request's method and path belong to, or None
        (without a method: the one route of the path, see :meth:`.RouteTable.match`)."""
        return self.routes.match(method, path)

    def resolve(
        self, *, tenant: str | None, route: str | None, now: float | None = None
    ) -> Resolution:
        """Return the most specific live policy for (tenant, route) at ``now`` (epoch s)."""
        now = time.time() if now is None else now
        tier = self.rules.tenants.get(tenant) if tenant else None
        matched_route = self.rules.routes.get(route) if route else None
        live: list[Candidate] = []
        expired: list[Candidate] = []
        for level, key in self._levels(tenant, tier, matched_route):
            override, permanent = self._index.get(key, (None, None))
            if override is not None:
                target = live if override.is_live(now) else expired
                target.append(Candidate(level, override))
            if permanent is not None:
                live.append(Candidate(level, permanent))
        if not live:  # validation guarantees the default policy; a bug must not admit
            raise LookupError("no policy matched: the rules lack the default policy")
        winner, *beaten = live
        return Resolution(
            policy=winner.policy,
            level=winner.level,
            tenant=tenant,
            tier=tier,
            route=matched_route,
            beaten=tuple(beaten),
            expired=tuple(c for c in expired if _more_specific(c, winner)),
        )

    @staticmethod
    def _levels(
        tenant: str | None, tier: str | None, route: Route | None
    ) -> list[tuple[Level, tuple[str, str]]]:
        levels: list[tuple[Level, tuple[str, str]]] = []
        scopes = (
            (
                scope_key(ScopeKind.TENANT, tenant) if tenant else None,
                Level.TENANT_ROUTE,
                Level.TENANT_ALL,
            ),
            (
                scope_key(ScopeKind.TIER, tier) if tier else None,
                Level.TIER_ROUTE,
                Level.TIER_ALL,
            ),
            (DEFAULT_SCOPE, Level.DEFAULT_ROUTE, Level.DEFAULT_ALL),
        )
        for scope, route_level, all_level in scopes:
            if scope is None:
                continue
            if route is not None:
                levels.append((route_level, (scope, route.slug)))
            levels.append((all_level, (scope, ALL_ROUTES)))
        return levels


_ORDER = {level: rank for rank, level in enumerate(Level)}


def _more_specific(candidate: Candidate, winner: Candidate) -> bool:
    return _ORDER[candidate.level] <= _ORDER[winner.level]


def resolve(
    rules: Rules | Snapshot,
    *,
    tenant: str | None,
    route: str | None,
    now: float | None = None,
) -> Resolution:
    """Resolve once against ``rules``; gateways keep a :class:`Resolver` instead."""
    if isinstance(rules, Snapshot):
        rules = rules.rules
    return Resolver(rules).resolve(tenant=tenant, route=route, now=now)
