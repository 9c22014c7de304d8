"""Calendar quotas in the impact estimate: recorded local days counted, months projected.

A quota's count runs from a boundary in the tenant's time zone (its calendar in
the new rules, :func:`sluice.calendar.period_bounds`), so it is not a bucket the
replay (``limits.traffic.replay``) could step; it is counted here, after the
replay, from the same recorded rows: hours, and the minutes of an hour a
period's boundary cuts (zones a half or quarter hour off UTC).

* **Per day.** The window holds whole local days: each day's requests are
  charged in time order, a request the policy's buckets reject charging nothing
  (``Replayed.lost``, per minute), and those past the limit are over. Exact at the
  recorded granularity (an hour; a minute where a day starts mid-hour), up to the
  order of requests inside an hour the buckets reject some of (taken as the
  buckets' rejections coming last). The window's first day starts at the window's
  start: what the tenant sent earlier that day is not recorded, so its count starts
  at zero (that day's figure may be low); the last day is counted up to now.
* **Per month** (calendar or billing). The window holds no month: the period's
  used count now (the Redis hash gateways charge, ``limits.quotas.usage``) plus
  the window's daily rate (requests the buckets admit) until the period's end: a
  projection, not a replay. Without a count in Redis for the period (a new quota,
  a quota per user or key, or Redis not answering, which is said), the used count
  is estimated from the record too: the requests recorded since the period
  started, and the window's rate over the part of the period before the window.

Both are per route, as every row of the estimate: a quota a policy for every
route holds counts all of them in one key, and each route's row sees only its
own requests (low for the daily count and the rate; the month's used count from
Redis is the whole key's). After a day's quota is reached, the replay's buckets
are charged by requests the quota rejects, so the next day's first minutes may
show more bucket rejections than there would be.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import redis

from limits.quotas.usage import quota_key, quotas_used
from sluice.calendar import parse_zone_rule, utc_offset
from sluice.model import CALENDAR_QUOTA, CalendarQuota, Dimension, period_bounds

__all__ = [
    "DayCount",
    "Projection",
    "SeriesQuotas",
    "Step",
    "boundaries",
    "count_days",
    "project_month",
    "quotas_count",
]

log = logging.getLogger(__name__)

#: Recorded requests of a span: (first minute since the epoch, minutes, requests,
#: of them rejected by the new buckets)
Step = tuple[int, int, int, int]


def boundaries(
    quotas: Iterable[CalendarQuota], zone: tuple[str, int], since: int, until: int
) -> list[int]:
    """The period starts (epoch seconds) of ``quotas`` in the window, in order."""
    found = set()
    for quota in quotas:
        start = period_bounds(since, quota.per, quota.cycle, *zone)[1]
        while start < until:
            found.add(start)
            start = period_bounds(start, quota.per, quota.cycle, *zone)[1]
    return sorted(found)


@dataclass(frozen=True)
class DayCount:
    """The daily quotas of a series over the recorded local days."""

    names: str  #: the quotas in words ("daily quota of 1,000 requests")
    days: int  #: local days the window touches, the partial first and last included
    days_over: int  #: of them, days some requests were over
    over: int  #: requests over the quota the buckets did not reject already
    worst_day: date | None  #: the local day most were over on
    worst_day_over: int

    def to_json(self) -> dict[str, Any]:
        return {
            "quota": self.names,
            "per": "day",
            "method": "recorded",
            "days": self.days,
            "days_over": self.days_over,
            "over": self.over,
            "worst_day": self.worst_day.isoformat() if self.worst_day else None,
            "worst_day_over": self.worst_day_over,
        }


def count_days(
    steps: Sequence[Step],
    quotas: Sequence[CalendarQuota],
    *,
    cost: int,
    zone: tuple[str, int],
    since: int,
    until: int,
) -> DayCount:
    """Charge ``steps`` (in time order, none across a day's start) to the daily
    ``quotas`` at once: a request fits when it fits every one (all or nothing)."""
    costs = [quota.cost or cost for quota in quotas]
    over_on: dict[int, int] = {}
    day, used = None, [0] * len(quotas)
    for at, _, count, lost in steps:
        start = period_bounds(at * 60, "day", "calendar", *zone)[0]
        if start != day:
            day, used = start, [0] * len(quotas)
        admitted = count - lost
        room = min(
            (quota.limit - spent) // each
            for quota, spent, each in zip(quotas, used, costs, strict=True)
        )
        taken = min(admitted, max(0, room))
        used = [spent + taken * each for spent, each in zip(used, costs, strict=True)]
        if admitted > taken:
            over_on[start] = over_on.get(start, 0) + admitted - taken
    worst = max(over_on, key=lambda start: (over_on[start], -start), default=None)
    return DayCount(
        names=" and ".join(CALENDAR_QUOTA.terse(quota) for quota in quotas),
        days=1 + len(boundaries(quotas[:1], zone, since, until)),
        days_over=len(over_on),
        over=sum(over_on.values()),
        worst_day=None if worst is None else _local_date(worst, zone),
        worst_day_over=over_on[worst] if worst is not None else 0,
    )


def _local_date(instant: int, zone: tuple[str, int]) -> date:
    """The local date of a local midnight (its UTC instant), read at noon: clear of
    any DST change, which none makes 12 hours long."""
    noon = instant + 12 * 3600
    offset = utc_offset(parse_zone_rule(zone[0]), noon)
    return datetime.fromtimestamp(noon + offset, UTC).date()


@dataclass(frozen=True)
class Projection:
    """A monthly quota of a series, projected to the end of the period holding now."""

    name: str  #: the quota in words ("monthly quota of 10,000 requests")
    limit: int
    used: int  #: requests' worth used this period by now
    #: ``redis`` (the count gateways charge), ``record`` (no count in Redis for the
    #: period, or one per user or key: estimated from the traffic recorded), or
    #: ``redis_unavailable`` (Redis did not answer: estimated from the record)
    used_from: str
    period_end: datetime
    reaches: datetime | None  #: when the quota would be reached; None: it is not
    over: int  #: requests over the quota by the period's end

    def to_json(self) -> dict[str, Any]:
        return {
            "quota": self.name,
            "per": "month",
            "method": "projection",
            "limit": self.limit,
            "used": self.used,
            "used_from": self.used_from,
            "period_end": self.period_end.isoformat(),
            "reaches_at": self.reaches.isoformat() if self.reaches else None,
            "over": self.over,
        }


def project_month(
    steps: Sequence[Step],
    quota: CalendarQuota,
    *,
    cost: int,
    zone: tuple[str, int],
    since: int,
    now: int,
    used: int | None,
    used_from: str,
) -> Projection:
    """Project ``quota`` from ``used`` (Redis's count this period; None: estimate it
    from ``steps``) at the rate ``steps`` show over the window [since, now)."""
    each = quota.cost or cost
    start, end, _ = period_bounds(now, quota.per, quota.cycle, *zone)
    rate = sum((n - lost) * each for _, _, n, lost in steps) / max(1, now - since)
    if used is None:  # the requests recorded this period, and the rate before them
        recorded = sum(
            (n - lost) * each for at, _, n, lost in steps if at * 60 >= start
        )
        used = recorded + round(rate * max(0, since - start))
    left = quota.limit - used
    projected = rate * (end - now)
    reaches = None
    over = 0
    if rate and projected > left:  # without traffic, nothing more comes
        reaches = datetime.fromtimestamp(now + max(0, left) / rate, UTC)
        over = int((projected - max(0, left)) // each)
    return Projection(
        name=CALENDAR_QUOTA.terse(quota),
        limit=quota.limit,
        used=used,
        used_from=used_from,
        period_end=datetime.fromtimestamp(end, UTC),
        reaches=reaches,
        over=over,
    )


@dataclass(frozen=True)
class SeriesQuotas:
    """A series' calendar quotas in the new rules, and what counting them needs."""

    limits: tuple[CalendarQuota, ...]
    cost: int  #: the route's request cost
    route: str  #: the policy's route (``*``: one key for every route)
    zone: tuple[str, int]  #: the tenant's zone rule and billing day

    @property
    def per_user(self) -> bool:
        """A quota counts per user, key or IP: counted as one client, a ceiling."""
        return any(limit.dimension is not Dimension.TENANT for limit in self.limits)


def quotas_count(
    steps: dict[tuple[str, str], list[Step]],
    quotas: dict[tuple[str, str], SeriesQuotas],
    since: datetime,
    until: datetime,
) -> dict[tuple[str, str], tuple[DayCount | Projection, ...]]:
    """Each series' daily quotas counted and monthly ones projected, from its
    ``steps`` (its recorded hours, with the buckets' rejections), after one read of
    the monthly ones' counts in Redis."""
    start, now = int(since.timestamp()), int(until.timestamp())
    used, unavailable = _used_now(quotas, now)
    counted: dict[tuple[str, str], tuple[DayCount | Projection, ...]] = {}
    for key, q in quotas.items():
        found: list[DayCount | Projection] = []
        series = steps.get(key, [])
        daily = [limit for limit in q.limits if limit.per == "day"]
        if daily:
            found.append(
                count_days(
                    series, daily, cost=q.cost, zone=q.zone, since=start, until=now
                )
            )
        for limit in q.limits:
            if limit.per != "month":
                continue
            count = used.get((key, limit))
            found.append(
                project_month(
                    series,
                    limit,
                    cost=q.cost,
                    zone=q.zone,
                    since=start,
                    now=now,
                    used=count,
                    used_from="redis"
                    if count is not None
                    else "redis_unavailable"
                    if unavailable
                    else "record",
                )
            )
        counted[key] = tuple(found)
    return counted


def _used_now(
    quotas: dict[tuple[str, str], SeriesQuotas], now: int
) -> tuple[dict[tuple[tuple[str, str], CalendarQuota], int], bool]:
    """The count in Redis, this period, of each per-tenant monthly quota that has one,
    and whether Redis did not answer (then none has)."""
    wanted = [
        ((tenant, route), limit)
        for (tenant, route), q in quotas.items()
        for limit in q.limits
        if limit.per == "month" and limit.dimension is Dimension.TENANT and tenant
    ]
    if not wanted:
        return {}, False
    periods = []
    for key, limit in wanted:
        q = quotas[key]
        start = period_bounds(now, limit.per, limit.cycle, *q.zone)[0]
        periods.append((quota_key(q.route, limit, key[0]), start))
    try:
        counts = quotas_used(periods)
    except redis.RedisError as exc:
        log.warning("impact.quota_usage_unavailable", extra={"error": str(exc)})
        return {}, True
    found = {
        one: count
        for one, count in zip(wanted, counts, strict=True)
        if count is not None
    }
    return found, False
