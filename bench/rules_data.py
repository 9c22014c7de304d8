"""A large working copy for the scale benchmark, written with ``bulk_create``.

Not through the audited services: 120,000 audited calls would measure the audit
log, not publishing. The shape (``RuleSet``) is what an operator with many
customers has: a few tiers, hundreds of routes, a default and tier policies per
route, and tenant policies (permanent ones, and temporary support overrides
whose expiries are spread over the next days).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from limits.choices import Dimension, FailureMode, Period, ScopeKind
from limits.models import Limit, Policy, Route, Tenant, Tier

BATCH = 5000
TIERS = ("free", "pro", "business", "enterprise")
MODES = (FailureMode.OPEN, FailureMode.CLOSED, FailureMode.LOCAL)


@dataclass(frozen=True)
class RuleSet:
    """How many of each rule object to create."""

    tenants: int = 100_000
    overrides: int = 20_000  #: tenant policies; a quarter of them temporary
    routes: int = 200
    tier_routes: int = 50  #: routes with their own policy in every tier


def load_rules(shape: RuleSet) -> dict[str, int]:
    """Replace the working copy's tiers, tenants and routes with ``shape``; return counts.

    The default all-routes policy (created by the migrations) is kept.
    """
    with transaction.atomic():
        Policy.objects.exclude(scope=ScopeKind.DEFAULT, route=None).delete()
        Tenant.objects.all().delete()
        Route.objects.all().delete()
        Tier.objects.all().delete()
        tiers = _tiers()
        routes = _routes(shape.routes)
        tenants = _tenants(shape.tenants, tiers)
        policies = _tier_policies(tiers, routes, shape.tier_routes)
        policies += _default_policies(routes)
        policies += _tenant_policies(tenants, routes, shape.overrides)
        Policy.objects.bulk_create(policies, batch_size=BATCH)
        Limit.objects.bulk_create(_limits(policies), batch_size=BATCH)
    return {
        "tiers": len(tiers),
        "routes": len(routes),
        "tenants": len(tenants),
        "policies": Policy.objects.count(),
        "limits": Limit.objects.count(),
    }


def _tiers() -> list[Tier]:
    rows = [
        Tier(slug=slug, name=slug.title(), position=index)
        for index, slug in enumerate(TIERS)
    ]
    return Tier.objects.bulk_create(rows)


def _routes(count: int) -> list[Route]:
    rows = [
        Route(
            slug=f"r{index:03d}.read",
            methods=["GET"],
            path_pattern=f"/v1/r{index:03d}/{{id}}",
            cost=1 + index % 3,
            failure_mode=MODES[index % len(MODES)],
        )
        for index in range(count)
    ]
    return Route.objects.bulk_create(rows, batch_size=BATCH)


def _tenants(count: int, tiers: list[Tier]) -> list[Tenant]:
    rows = [
        Tenant(slug=f"t{index:06d}", name=f"Tenant {index}", tier=tiers[index % 4])
        for index in range(count)
    ]
    return Tenant.objects.bulk_create(rows, batch_size=BATCH)


def _tier_policies(tiers, routes, per_tier: int) -> list[Policy]:
    policies = []
    for tier in tiers:
        policies.append(Policy(scope=ScopeKind.TIER, tier=tier, route=None))
        policies += [
            Policy(scope=ScopeKind.TIER, tier=tier, route=route)
            for route in routes[:per_tier]
        ]
    return policies


def _default_policies(routes) -> list[Policy]:
    return [
        Policy(scope=ScopeKind.DEFAULT, route=route, reason="per-route default")
        for route in routes[::10]
    ]


def _tenant_policies(tenants, routes, count: int) -> list[Policy]:
    now = timezone.now()
    policies = []
    for index, tenant in enumerate(tenants[:count]):
        temporary = index % 4 == 3
        policies.append(
            Policy(
                scope=ScopeKind.TENANT,
                tenant=tenant,
                route=None if index % 5 == 0 else routes[index % len(routes)],
                reason="support ticket" if temporary else "contract",
                expires_at=now + timedelta(days=1, minutes=index)
                if temporary
                else None,
            )
        )
    return policies


def _limits(policies: list[Policy]) -> list[Limit]:
    """One per-tenant limit per policy, and a per-user one on every other policy."""
    rows = []
    for index, policy in enumerate(policies):
        rate = 10 + index % 500
        rows.append(
            Limit(
                policy=policy,
                dimension=Dimension.TENANT,
                rate=rate,
                period=Period.SECOND,
                burst=rate * 2,
            )
        )
        if index % 2:
            rows.append(
                Limit(
                    policy=policy,
                    dimension=Dimension.USER,
                    rate=rate * 60,
                    period=Period.HOUR,
                    burst=rate * 10,
                )
            )
    return rows
