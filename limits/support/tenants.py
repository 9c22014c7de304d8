"""A tenant's limits as gateways enforce them now, the scheduled ones beside them,
its overrides, and how much of its buckets and sliding windows is left (read from
Redis without charging)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime

from limits.core.store import redis_client
from limits.models import Rejection, Tenant
from limits.traffic.dashboards import tenant_rejections
from limits.versions.explain import BucketKey, ExplainSource, explain
from limits.versions.selectors import (
    snapshot_get_active,
    snapshot_rules,
    snapshot_scheduled,
)
from sluice.bucket import STORE_ERRORS, peek, peek_windows
from sluice.model import (
    PERIOD_WORDS,
    SLIDING_WINDOW,
    CalendarQuota,
    ConcurrencyLimit,
    Dimension,
    Limit,
    Policy,
    Resolution,
    Resolver,
    SlidingWindow,
    geometry,
    limit_in_words,
)

__all__ = ["BucketUsage", "RouteLimits", "TenantLimits", "tenant_limits"]

log = logging.getLogger(__name__)

#: Seconds support's usage read waits for Redis: the page renders without it.
USAGE_TIMEOUT = 0.5
OTHER_ROUTES = "other routes"


@dataclass(frozen=True)
class BucketUsage:
    """One per-tenant bucket or sliding window of the tenant, read now without charging it."""

    words: str  #: the limit in words
    key: str
    remaining: int  #: whole tokens left now (a request takes the route's cost)
    capacity: int  #: the bucket's burst; the window's limit
    #: seconds until the bucket is full again; None for a sliding window, whose
    #: count slides off with its window rather than refilling at a rate
    full_in: float | None
    window: str = (
        ""  #: a sliding window's length in words ("minute"); empty for a bucket
    )


@dataclass(frozen=True)
class Scheduled:
    """What a scheduled version will apply to one route, when it differs from now."""

    version: int
    effective_at: datetime
    words: list[str]
    policy: str


@dataclass(frozen=True)
class RouteLimits:
    """The limits one route of the tenant gets from the active version."""

    route: str  #: a route slug, or "other routes"
    resolution: Resolution
    words: list[str]  #: every limit of the winning policy in words
    scheduled: list[Scheduled] = field(default_factory=list)
    usage: list[BucketUsage] = field(default_factory=list)


@dataclass(frozen=True)
class TenantLimits:
    """Everything the tenant page shows, and which version it comes from."""

    version: int | None  #: the active version; None before the first publish
    known: bool  #: whether the active version has the tenant at all
    routes: list[RouteLimits]
    overrides: list[Policy]  #: the tenant's temporary overrides, live or expired
    rejections: list[Rejection]
    usage_error: str | None = None  #: why usage could not be read


def words_of(policy: Policy) -> list[str]:
    """Every limit of ``policy`` as customers read it (shadow limits marked)."""
    return [
        limit_in_words(limit)
        + (" (shadow: reported, never enforced)" if limit.shadow else "")
        for limit in (*policy.limits, *policy.concurrency)
    ]


def tenant_limits(*, tenant: Tenant, now: float | None = None) -> TenantLimits:
    """The tenant's limits in the active version, route by route, with usage now."""
    now = time.time() if now is None else now
    active = snapshot_get_active(light=True)
    rejections = list(tenant_rejections(tenant=tenant.slug, limit=10))
    if active is None:
        return TenantLimits(None, False, [], [], rejections)
    rules = snapshot_rules(active)
    resolver = Resolver(rules)
    slugs: list[str | None] = [*sorted(rules.routes), None]
    routes = [
        RouteLimits(
            slug or OTHER_ROUTES,
            resolution := resolver.resolve(tenant=tenant.slug, route=slug, now=now),
            words_of(resolution.policy),
        )
        for slug in slugs
    ]
    _add_scheduled(routes, slugs, tenant.slug, now)
    usage_error = _add_usage(routes, slugs, tenant.slug, now)
    overrides = [
        p
        for p in rules.policies
        if p.scope == f"tenant:{tenant.slug}" and p.expires_at is not None
    ]
    return TenantLimits(
        active.version,
        tenant.slug in rules.tenants,
        routes,
        sorted(overrides, key=lambda p: (p.expires_at, p.route)),
        rejections,
        usage_error,
    )


def _add_scheduled(
    routes: list[RouteLimits], slugs: list[str | None], tenant: str, now: float
) -> None:
    """Beside each route, what each scheduled version will change for it, with its date."""
    for row in snapshot_scheduled().defer("content_gzip", "diff"):
        resolver = Resolver(snapshot_rules(row))
        moment = max(now, row.effective_at.timestamp())
        for shown, slug in zip(routes, slugs, strict=True):
            policy = resolver.resolve(tenant=tenant, route=slug, now=moment).policy
            words = words_of(policy)
            if words != shown.words:
                shown.scheduled.append(
                    Scheduled(row.version, row.effective_at, words, policy.describe())
                )


def _add_usage(
    routes: list[RouteLimits], slugs: list[str | None], tenant: str, now: float
) -> str | None:
    """Fill each route's per-tenant buckets and sliding windows from Redis; return
    why not, if it failed.

    Keys come from the gateways' own engine (through explain), so they are the
    keys gateways charge. Per-user, per-key and per-IP limits are one per caller:
    explain shows those for a given caller.
    """
    buckets: list[tuple[RouteLimits, BucketKey]] = []
    windows: list[tuple[RouteLimits, BucketKey]] = []
    for shown, slug in zip(routes, slugs, strict=True):
        explained = explain(
            tenant=tenant, route=slug, source=ExplainSource.ACTIVE, now=now
        )
        for bucket in explained.keys:
            limit = bucket.limit
            # A calendar quota's count is its day's or month's (limits.quotas shows
            # it), not a debt that peek reads.
            if (
                isinstance(limit, ConcurrencyLimit | CalendarQuota)
                or limit.dimension != Dimension.TENANT
                or limit.shadow
            ):
                continue
            # Kinds read here: GCRA buckets (unsharded) and sliding windows; any
            # other kind is left out rather than read with their arithmetic.
            if isinstance(limit, SlidingWindow):
                windows.append((shown, bucket))
            elif isinstance(limit, Limit) and limit.shards == 1:
                buckets.append((shown, bucket))
    try:
        _read_buckets(buckets)
        _read_windows(windows)
    except STORE_ERRORS as exc:
        log.warning("support.usage_unavailable", extra={"error": str(exc)})
        return f"Redis did not answer ({exc.__class__.__name__}): usage unknown."
    return None


def _read_buckets(wanted: list[tuple[RouteLimits, BucketKey]]) -> None:
    if not wanted:
        return
    client = redis_client(timeout=USAGE_TIMEOUT)
    debts, _ = peek(client, [bucket.key for _, bucket in wanted])
    for (shown, bucket), debt in zip(wanted, debts, strict=True):
        limit = bucket.limit
        shape = geometry(limit, cost=bucket.cost)
        shown.usage.append(
            BucketUsage(
                limit_in_words(limit),
                bucket.key,
                shape.remaining(debt),
                limit.burst,
                debt / 1e6,
            )
        )


def _read_windows(wanted: list[tuple[RouteLimits, BucketKey]]) -> None:
    if not wanted:
        return
    shapes = [SLIDING_WINDOW.shape(b.limit, cost=b.cost) for _, b in wanted]
    client = redis_client(timeout=USAGE_TIMEOUT)
    counts = peek_windows(client, [bucket.key for _, bucket in wanted], shapes)
    for (shown, bucket), count in zip(wanted, counts, strict=True):
        limit = bucket.limit
        shown.usage.append(
            BucketUsage(
                limit_in_words(limit),
                bucket.key,
                max(0, math.floor(limit.limit - count)),
                limit.limit,
                None,
                PERIOD_WORDS[limit.window],
            )
        )
