"""Which limits apply to whom, told with the resolver that gateways run."""

from __future__ import annotations

import time
from dataclasses import dataclass

from limits.enforcement.resolver import Resolution, Resolver
from limits.enforcement.snapshot import describe_limit
from limits.models import Tenant
from limits.publishing import rules_compile

__all__ = ["EffectiveLimit", "effective_limits"]


@dataclass(frozen=True)
class EffectiveLimit:
    """What applies to one tenant on one route, ready to show."""

    route: str  #: route slug, or "other routes" for requests that match none
    resolution: Resolution

    @property
    def limits(self) -> list[str]:
        return [describe_limit(limit) for limit in self.resolution.policy.limits]


def effective_limits(
    *, tenant: Tenant, now: float | None = None
) -> list[EffectiveLimit]:
    """For every route of the working copy, the policy that applies to ``tenant`` and why."""
    rules = rules_compile(tenant=tenant)
    resolver = Resolver(rules)
    now = time.time() if now is None else now
    rows = [
        EffectiveLimit(slug, resolver.resolve(tenant=tenant.slug, route=slug, now=now))
        for slug in sorted(rules.routes)
    ]
    rows.append(
        EffectiveLimit(
            "other routes", resolver.resolve(tenant=tenant.slug, route=None, now=now)
        )
    )
    return rows
