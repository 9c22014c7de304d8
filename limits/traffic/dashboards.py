"""Selectors of the traffic dashboards: who is limited, where, how often the limiter
failed open, and whom a scheduled lowering would hit hardest.

All read the per-minute rollups and the rejection log that ``limits.traffic.stats``
writes; each is one or two grouped queries whatever the traffic, except
:func:`scheduled_hardest_hit`, which reads the (cached) impact estimate of each
scheduled lowering (``limits.traffic.impacts``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet, Sum

from limits.choices import Outcome
from limits.models import DecisionMinute, Rejection, StatCounter
from limits.traffic.impacts import scheduled_impact
from limits.versions.selectors import snapshot_scheduled

__all__ = [
    "EventsLost",
    "HardHit",
    "Series",
    "Share",
    "TenantRow",
    "events_lost",
    "fail_open_share",
    "gateway_timeout_share",
    "limited_series",
    "minute_floor",
    "most_limited_tenants",
    "rejection_counts",
    "scheduled_hardest_hit",
    "tenant_rejections",
    "tenant_series",
]

ANONYMOUS = "(anonymous)"  #: how requests without a tenant (or route) are shown


@dataclass(frozen=True)
class Series:
    """Counts per minute, one line per name, zeros where nothing was counted."""

    minutes: list[datetime]
    lines: dict[str, list[int]]

    @property
    def empty(self) -> bool:
        return not any(any(values) for values in self.lines.values())


@dataclass(frozen=True)
class TenantRow:
    """A tenant's limited requests against all its decisions over a period."""

    tenant: str
    limited: int
    total: int

    @property
    def share(self) -> float:
        return self.limited / self.total if self.total else 0.0


@dataclass(frozen=True)
class Share:
    """A part of a total, e.g. fail-open decisions of all decisions."""

    part: int
    total: int

    @property
    def percent(self) -> float:
        return 100 * self.part / self.total if self.total else 0.0


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _minutes(since: datetime, until: datetime) -> list[datetime]:
    first, last = minute_floor(since), minute_floor(until)
    count = int((last - first).total_seconds() // 60) + 1
    return [first + timedelta(minutes=i) for i in range(count)]


def _series(rows, minutes: list[datetime]) -> Series:
    index = {minute: i for i, minute in enumerate(minutes)}
    lines: dict[str, list[int]] = defaultdict(lambda: [0] * len(minutes))
    for name, minute, count in rows:
        if minute in index:
            lines[name or ANONYMOUS][index[minute]] += count
    return Series(minutes, dict(lines))


def limited_series(
    *, by: str, since: datetime, until: datetime, top: int = 6
) -> Series:
    """Limited requests per minute for the ``top`` tenants (``by="tenant"``) or routes."""
    if by not in ("tenant", "route"):
        raise ValueError("by is 'tenant' or 'route'")
    limited = DecisionMinute.objects.filter(
        outcome=Outcome.LIMITED, minute__gte=minute_floor(since), minute__lte=until
    )
    leaders = list(
        limited.values_list(by, flat=True)
        .annotate(n=Sum("count"))
        .order_by("-n", by)[:top]
    )
    rows = (
        limited.filter(**{f"{by}__in": leaders})
        .values_list(by, "minute")
        .annotate(n=Sum("count"))
    )
    return _series(rows, _minutes(since, until))


def tenant_series(*, tenant: str, since: datetime, until: datetime) -> Series:
    """One tenant's decisions per minute, one line per outcome."""
    rows = (
        DecisionMinute.objects.filter(
            tenant=tenant, minute__gte=minute_floor(since), minute__lte=until
        )
        .values_list("outcome", "minute")
        .annotate(n=Sum("count"))
    )
    return _series(rows, _minutes(since, until))


def most_limited_tenants(*, since: datetime, top: int = 10) -> list[TenantRow]:
    """The tenants with the most limited requests since ``since``: support's call list."""
    rows = (
        DecisionMinute.objects.filter(minute__gte=minute_floor(since))
        .values("tenant")
        .annotate(
            limited=Sum("count", filter=Q(outcome=Outcome.LIMITED), default=0),
            total=Sum("count"),
        )
        .filter(limited__gt=0)
        .order_by("-limited", "tenant")[:top]
    )
    return [TenantRow(r["tenant"], r["limited"], r["total"]) for r in rows]


def fail_open_share(*, since: datetime) -> Share:
    """Decisions admitted unchecked because Redis failed, against all decisions."""
    return _share(Outcome.FAIL_OPEN, since)


def gateway_timeout_share(*, since: datetime) -> Share:
    """Requests a gateway stopped waiting for (its own failure behaviour answered
    them, not Sluice), against all decisions."""
    return _share(Outcome.GATEWAY_TIMEOUT, since)


def _share(outcome: str, since: datetime) -> Share:
    totals = DecisionMinute.objects.filter(minute__gte=minute_floor(since)).aggregate(
        part=Sum("count", filter=Q(outcome=outcome), default=0),
        total=Sum("count", default=0),
    )
    return Share(totals["part"], totals["total"])


@dataclass(frozen=True)
class EventsLost:
    """Decision events that never reached the statistics, since they began."""

    dropped: int  #: dropped by gateways (buffer full for too long an outage)
    trimmed: int  #: stream entries trimmed before they were aggregated

    @property
    def any(self) -> bool:
        return bool(self.dropped or self.trimmed)


def events_lost() -> EventsLost:
    """What the aggregation counted as lost (``limits.traffic.tally``): one query."""
    counters = dict(
        StatCounter.objects.filter(
            name__in=("events_dropped", "entries_lost")
        ).values_list("name", "value")
    )
    return EventsLost(
        counters.get("events_dropped", 0), counters.get("entries_lost", 0)
    )


def tenant_rejections(*, tenant: str, limit: int = 50) -> QuerySet[Rejection]:
    """The tenant's most recent rejections, newest first."""
    return Rejection.objects.filter(tenant=tenant).order_by("-at", "-id")[:limit]


def rejection_counts(*, tenant: str) -> dict[str, int]:
    """How many logged rejections of ``tenant`` each limit caused."""
    rows = (
        Rejection.objects.filter(tenant=tenant)
        .values("limit")
        .annotate(n=Sum("count"))
        .order_by("-n")
    )
    return {row["limit"]: row["n"] for row in rows}


@dataclass(frozen=True)
class HardHit:
    """A tenant a scheduled version would reject requests of: whom to call first."""

    tenant: str
    version: int
    effective_at: datetime  #: when the version takes effect
    requests: int  #: requests of the estimate's window
    rejected_now: int
    rejected_new: int  #: what the scheduled version would have rejected

    @property
    def share(self) -> float:
        return self.rejected_new / self.requests if self.requests else 0.0


def scheduled_hardest_hit(*, top: int = 10) -> list[HardHit]:
    """The tenants scheduled lowerings would hit hardest, most rejections first."""
    hits = []
    for snapshot in snapshot_scheduled().defer("content_gzip"):
        if not (snapshot.diff or {}).get("lowers"):
            continue
        for tenant, requests, now, new in scheduled_impact(snapshot).by_tenant():
            hits.append(
                HardHit(
                    tenant, snapshot.version, snapshot.effective_at, requests, now, new
                )
            )
    hits.sort(key=lambda hit: (-hit.rejected_new, hit.tenant))
    return hits[:top]
