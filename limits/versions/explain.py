"""Which limits apply to whom, and why, told with the resolver that gateways run."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import models

from limits.models import Snapshot as SnapshotRow
from limits.models import Tenant
from limits.rules.compiling import rules_compile, rules_require_routable
from limits.versions.selectors import snapshot_document, snapshot_get_active
from sluice.engine import Engine
from sluice.model import (
    ConcurrencyLimit,
    Limit,
    Policy,
    Resolution,
    Resolver,
    Rules,
    Snapshot,
    describe_limit,
)

__all__ = [
    "BucketKey",
    "EffectiveLimit",
    "ExplainSource",
    "Explanation",
    "effective_limits",
    "explain",
    "snapshot_resolver",
]


@dataclass(frozen=True)
class EffectiveLimit:
    """What applies to one tenant on one route, ready to show."""

    route: str  #: route slug, or "other routes" for requests that match none
    resolution: Resolution

    @property
    def limits(self) -> list[str]:
        return _described(self.resolution.policy)


def _described(policy: Policy) -> list[str]:
    """Every limit of ``policy`` in words: buckets, then concurrency caps."""
    return [describe_limit(limit) for limit in (*policy.limits, *policy.concurrency)]


def effective_limits(
    *, tenant: Tenant, now: float | None = None, source: str = "working"
) -> list[EffectiveLimit]:
    """For every route, the policy that applies to ``tenant`` and why: in the working
    copy, or with ``source="active"`` in the version gateways enforce (ValidationError
    if nothing is published yet)."""
    if source == ExplainSource.WORKING_COPY:
        rules = rules_require_routable(rules_compile(tenant=tenant))
        resolver = Resolver(rules)
    else:
        engine = _engine(ExplainSource(source), tenant.slug)
        rules, resolver = engine.snapshot.rules, engine.resolver
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


@dataclass(frozen=True)
class BucketKey:
    """The bucket one limit of a request is charged to, or the set a cap counts it in."""

    limit: Limit | ConcurrencyLimit
    key: str  #: the Redis key as a gateway builds it (``:s0…s3`` for a sharded bucket)
    cost: int  #: tokens this request takes from the bucket (a slot for a cap)


class ExplainSource(models.TextChoices):
    """Which rules to explain with."""

    ACTIVE = "active", "the active version (what gateways enforce)"
    WORKING_COPY = "working", "the working copy (unpublished edits included)"


@dataclass(frozen=True)
class Explanation:
    """Why a request gets the limits it gets, and which buckets it would be charged to."""

    source: ExplainSource
    version: int | None  #: the version explained with; None for the working copy
    tenant: str | None
    tenant_known: bool  #: False: the tenant is not in the rules, so it has no tier
    resolution: Resolution  #: from the gateways' resolver: policy, level, what it beat
    keys: tuple[BucketKey, ...]  #: one per limit of the winning policy

    @property
    def limits(self) -> list[str]:
        return _described(self.resolution.policy)


def explain(
    *,
    tenant: str | None = None,
    route: str | None = None,
    method: str | None = None,
    path: str | None = None,
    user: str | None = None,
    api_key: str | None = None,
    ip: str | None = None,
    source: ExplainSource = ExplainSource.ACTIVE,
    now: float | None = None,
) -> Explanation:
    """Which policy applies to a request and why, with the resolver gateways run.

    Name the route by slug, or give ``method`` and ``path`` to match it as a
    gateway would. Raise ValidationError for an unknown route, both ways of
    naming one, or an active version that does not exist yet.
    """
    if route and (method or path):
        raise ValidationError("Give a route, or a method and a path, not both.")
    engine = _engine(source, tenant)
    rules, version = engine.snapshot.rules, engine.snapshot.version or None
    now = time.time() if now is None else now
    if method or path:
        matched = engine.resolver.match_route((method or "GET").upper(), path or "/")
        route = matched.slug if matched else None
    elif route and route not in rules.routes:
        raise ValidationError({"route": f"There is no route {route!r} in these rules."})
    resolution = engine.resolver.resolve(tenant=tenant or None, route=route, now=now)
    prepared = engine.prepare(
        route=route,
        method=None,
        path=None,
        tenant=tenant or None,
        user=user,
        api_key=api_key,
        ip=ip,
        now=now,
    )
    keys = tuple(
        BucketKey(
            plan.limit, _unsharded(plan.limit, key), plan.limit.cost or prepared.cost
        )
        for plan, key in zip(prepared.plan.limits, prepared.keys, strict=True)
    ) + tuple(
        BucketKey(slot.limit, key, 1)
        for slot, key in zip(prepared.plan.slots, prepared.slots, strict=True)
    )
    return Explanation(
        source=source,
        version=version,
        tenant=tenant or None,
        tenant_known=bool(tenant) and tenant in rules.tenants,
        resolution=resolution,
        keys=keys,
    )


def _unsharded(limit: Limit, key: str) -> str:
    """A gateway picks one shard per request; show which keys it picks from."""
    if limit.shards == 1:
        return key
    return f"{key.rpartition(':s')[0]}:s0…s{limit.shards - 1}"


def _unhashed_snapshot(rules: Rules, version: int | None) -> Snapshot:
    """Rules wrapped for the engine, which reads only the rules and the version."""
    epoch = datetime.fromtimestamp(0, UTC)
    return Snapshot(version or 0, None, epoch, epoch, rules, hash="")


#: Resolvers of published versions, by document hash: building one indexes every
#: policy (~90 ms with 20,000 policies), and a version never changes. Each
#: explain gets a fresh engine around it, so no resolution is cached across
#: calls that ask about different moments.
_RESOLVERS: OrderedDict[str, Resolver] = OrderedDict()
_RESOLVERS_MAX = 4


def _engine(source: ExplainSource, tenant: str | None) -> Engine:
    """The engine gateways run (resolver, route matching, key builder) for ``source``."""
    if source == ExplainSource.WORKING_COPY:
        row = Tenant.objects.filter(slug=tenant).first() if tenant else None
        rules = rules_require_routable(rules_compile(tenant=row))
        return Engine(_unhashed_snapshot(rules, None))
    active = snapshot_get_active(light=True)
    if active is None:
        raise ValidationError(
            "Nothing has been published yet: explain the working copy."
        )
    return Engine(snapshot_document(active), resolver=snapshot_resolver(active))


def snapshot_resolver(row: SnapshotRow) -> Resolver:
    """The gateways' resolver over a stored version, built once per version (cached)."""
    resolver = _RESOLVERS.get(row.hash)
    if resolver is None:
        resolver = _RESOLVERS[row.hash] = Resolver(snapshot_document(row).rules)
        while len(_RESOLVERS) > _RESOLVERS_MAX:
            _RESOLVERS.popitem(last=False)
    return resolver
