"""A tenant's calendar quotas this period: limit, used, remaining, period bounds.

One read for every caller (the support page, the tenant's private page, the API,
the reminders), so every one of them says the same numbers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from limits.core.store import redis_client
from limits.models import Snapshot
from limits.versions.explain import snapshot_resolver
from limits.versions.selectors import snapshot_get_active, snapshot_rules
from sluice.calendar import UTC_RULE
from sluice.keys import key_template, owner_tag, subject_value
from sluice.model import (
    CALENDAR_QUOTA,
    CalendarQuota,
    Dimension,
    Rules,
    limit_in_words,
    period_bounds,
)
from sluice.quota import public_name

__all__ = ["QuotaUsage", "TenantQuotas", "quota_key", "quotas_used", "tenant_quotas"]

log = logging.getLogger(__name__)

#: Seconds the read waits for Redis: pages render without it, saying so.
USAGE_TIMEOUT = 0.5


@dataclass(frozen=True)
class QuotaUsage:
    """One per-tenant calendar quota, and how much of it is used this period."""

    name: str  #: the quota's public name
    words: str  #: the quota in words ("10,000 requests per month per account")
    key: str  #: the Redis hash gateways charge
    limit: int  #: requests' worth per period
    used: int | None  #: requests' worth used this period; None: Redis did not answer
    period_start: datetime  #: aware, UTC
    period_end: datetime  #: aware, UTC; the quota resets then
    routes: tuple[str, ...]  #: the routes it applies to ("other routes" included)
    shadow: bool = False  #: reported, never enforced: past its limit, requests pass

    @property
    def remaining(self) -> int | None:
        return None if self.used is None else max(0, self.limit - self.used)

    @property
    def percent(self) -> float | None:
        """Used, in percent of the limit (past 100 when a shadow quota overflows)."""
        return None if self.used is None else round(100 * self.used / self.limit, 1)

    def to_json(self) -> dict:
        """The API's and the private page's shape of one quota."""
        return {
            "name": self.name,
            "words": self.words,
            "limit": self.limit,
            "used": self.used,
            "remaining": self.remaining,
            "percent": self.percent,
            "period_start": self.period_start.isoformat(),
            "period_end": self.period_end.isoformat(),
            "routes": list(self.routes),
            "shadow": self.shadow,
        }


@dataclass(frozen=True)
class TenantQuotas:
    """Every calendar quota of a tenant in the active version, with its usage."""

    version: int | None  #: the active version; None before the first publish
    quotas: list[QuotaUsage]
    unavailable: str | None = None  #: why usage could not be read (Redis down)


@dataclass
class _Quota:
    limit: CalendarQuota
    key: str
    routes: list[str]


def tenant_quotas(*, tenant: str, now: float | None = None) -> TenantQuotas:
    """The calendar quotas that count per tenant for ``tenant`` on any route of the
    active version, each with what it used in the period holding ``now`` (epoch
    seconds; default: Redis server time, which is what gateways decide by).

    One round trip to Redis: ``TIME`` and an ``HMGET p n`` per quota, pipelined.
    A hash whose ``p`` is not this period's start was charged in an earlier
    period: nothing is used in this one. When Redis does not answer, the quotas
    are listed with ``used=None`` and ``unavailable`` says why: never a 0.
    """
    active = snapshot_get_active(light=True)
    if active is None:
        return TenantQuotas(None, [])
    rules = snapshot_rules(active)
    found = _quotas_of(active, rules, tenant)
    if not found:
        return TenantQuotas(active.version, [])
    try:
        clock, hashes = _read(found, now)
    except redis.RedisError as exc:
        log.warning("quotas.usage_unavailable", extra={"error": str(exc)})
        why = f"Redis did not answer ({exc.__class__.__name__}): usage unknown."
        clock = datetime.now(UTC).timestamp() if now is None else now
        usage = [_usage(rules, tenant, quota, clock, None) for quota in found]
        return TenantQuotas(active.version, usage, why)
    usage = [
        _usage(rules, tenant, quota, clock, fields)
        for quota, fields in zip(found, hashes, strict=True)
    ]
    return TenantQuotas(active.version, usage)


def _quotas_of(active: Snapshot, rules: Rules, tenant: str) -> list[_Quota]:
    """Per-tenant calendar quotas of the policies that win on each route, once per
    key (a policy for every route holds one quota, whichever route charges it)."""
    resolver = snapshot_resolver(active)  # built once per version: beat asks per tenant
    found: dict[str, _Quota] = {}
    for route in [*sorted(rules.routes), None]:
        policy = resolver.resolve(tenant=tenant, route=route).policy
        for limit in policy.limits:
            if not isinstance(limit, CalendarQuota):
                continue
            if limit.dimension is not Dimension.TENANT:
                continue  # one count per user or key: no single figure for a tenant
            key = quota_key(policy.route, limit, tenant)
            found.setdefault(key, _Quota(limit, key, [])).routes.append(
                route or "other routes"
            )
    return list(found.values())


def quota_key(route: str, limit: CalendarQuota, tenant: str) -> str:
    """The Redis hash gateways charge for ``tenant``'s per-tenant ``limit`` of a policy
    for ``route`` (``*`` for every route: one count whichever route charges it)."""
    template = key_template(route, limit.dimension, limit.period, CALENDAR_QUOTA.name)
    return template % (
        owner_tag(tenant, None, True),
        subject_value(Dimension.TENANT, tenant, None, None, None),
    )


def quotas_used(periods: list[tuple[str, int]]) -> list[int | None]:
    """For each (key, period start): the requests' worth the hash holds for that
    period, None when it holds none (no hash, or an earlier period's: a quota not
    charged yet, or new). One pipelined round trip; redis.RedisError when Redis
    does not answer within :data:`USAGE_TIMEOUT`."""
    pipe = redis_client(timeout=USAGE_TIMEOUT).pipeline(transaction=False)
    for key, _ in periods:
        pipe.hmget(key, ["p", "n"])
    return [
        int(count or 0) if period is not None and int(period) == start else None
        for (_, start), (period, count) in zip(periods, pipe.execute(), strict=True)
    ]


def _read(
    found: list[_Quota], now: float | None
) -> tuple[float, list[list[bytes | None]]]:
    """Redis's time (or ``now``) and each quota's ``[p, n]``, in one round trip."""
    pipe = redis_client(timeout=USAGE_TIMEOUT).pipeline(transaction=False)
    pipe.time()
    for quota in found:
        pipe.hmget(quota.key, ["p", "n"])
    (seconds, micros), *hashes = pipe.execute()
    return (seconds + micros / 1e6 if now is None else now), hashes


def _usage(
    rules: Rules,
    tenant: str,
    quota: _Quota,
    now: float,
    fields: list[bytes | None] | None,
) -> QuotaUsage:
    limit = quota.limit
    start, end, _ = period_bounds(
        int(now), limit.per, limit.cycle, *_calendar(rules, tenant)
    )
    used = None
    if fields is not None:
        period, count = fields
        used = int(count or 0) if period is not None and int(period) == start else 0
    return QuotaUsage(
        name=public_name(limit),
        words=limit_in_words(limit),
        key=quota.key,
        limit=limit.limit,
        used=used,
        period_start=datetime.fromtimestamp(start, UTC),
        period_end=datetime.fromtimestamp(end, UTC),
        routes=tuple(quota.routes),
        shadow=limit.shadow,
    )


def _calendar(rules: Rules, tenant: str) -> tuple[str, int]:
    """The tenant's zone rule (POSIX, as the snapshot carries it) and billing day."""
    calendar = rules.calendar(tenant)
    return rules.zones.get(calendar.zone, UTC_RULE), calendar.billing_day
