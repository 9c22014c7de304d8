"""Whom a change of the rules would limit, estimated from the traffic recorded.

:func:`impact_estimate` takes two rule sets and the diff between them (its
reach: the tenants whose limits may change, ``limits.diff.impact``), reads the
last ``SLUICE_IMPACT_DAYS`` of recorded decisions of those tenants, and for
every tenant and route whose policy the change alters reports the requests
seen, those rejected today (the recorded outcomes) and those the new policy's
buckets and daily quotas would reject (``limits.traffic.replay``,
``limits.traffic.quotas``), with the worst minute; a monthly quota is projected
to its period's end beside them.

Three statements do the reading whatever the reach (``limits.traffic.recorded``):
one aggregate over the hourly rows gives each series its totals and its busiest
second, minute, hour and day, which rules most series out; the hours of the
series that remain, and of those under a calendar quota, rule most of their hours
out; the minutes (with their seconds) of the hours left, and of the hours a
quota's period starts in, are read and replayed. A monthly quota's used count is
one more pipelined read of Redis.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from limits.diff.diffing import RulesDiff
from limits.traffic.quotas import (
    DayCount,
    Projection,
    SeriesQuotas,
    Step,
    boundaries,
    quotas_count,
)
from limits.traffic.recorded import hours_of, minutes_of, series_of
from limits.traffic.replay import (
    Bucket,
    Minute,
    Quiet,
    Replayed,
    buckets_of,
    could_reject,
    quotas_of,
    replay,
)
from sluice.calendar import UTC_RULE
from sluice.model import Resolver, Rules

__all__ = ["CAVEATS", "Impact", "ImpactRow", "impact_estimate"]

#: How an estimate can err, as shown with every estimate (``docs/stats.md``).
CAVEATS = (
    "Events carry whole seconds: bursts shorter than a second are smoothed, so with per-second limits the estimate tends to be low.",
    "Rejected requests are replayed as if sent anyway; clients that back off after a 429 send fewer.",
    "Limits per user, API key or IP are replayed as if the tenant were one client: an upper bound.",
    "Concurrency caps, hot-key leases and shards, and gateways' local or fail-open modes are not replayed.",
    "Daily quotas are counted over the recorded local days, the window's first day from the window's start only; monthly quotas are a projection (the used count now plus the recorded rate), shown beside the estimate, not in it.",
    "A quota a policy holds for every route is counted route by route: each row sees its own route's requests only.",
    "Only traffic the gateways reported counts: dropped events and anonymous traffic of unknown tenants are missing.",
)


@dataclass(frozen=True)
class ImpactRow:
    """One tenant on one route: its traffic, and what the new rules would do to it."""

    tenant: str  #: "" for anonymous traffic
    route: str  #: "" for requests that matched no route
    seen: int  #: requests recorded in the window, every outcome
    rejected_now: int  #: of them, rejected under the rules in force when they came
    rejected_new: int  #: of them, rejected by the new rules' buckets (estimate)
    worst_minute: datetime | None  #: the minute the new rules would reject most in
    worst_minute_rejected: int
    upper_bound: bool  #: a limit counts per user, key or IP: the estimate is a ceiling
    #: the new policy's calendar quotas: daily ones counted (their ``over`` is in
    #: ``rejected_new``), monthly ones projected (not in it)
    quotas: tuple[DayCount | Projection, ...] = ()

    @property
    def quotas_left_out(self) -> bool:
        """A monthly quota is projected: what it would reject is not in ``rejected_new``
        (the API's field of that name, from when no quota was estimated)."""
        return any(isinstance(quota, Projection) for quota in self.quotas)

    @property
    def projected_over(self) -> int:
        """Requests the monthly quotas would reject by their periods' end (projected)."""
        return max(
            (q.over for q in self.quotas if isinstance(q, Projection)), default=0
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "route": self.route,
            "requests": self.seen,
            "rejected_now": self.rejected_now,
            "rejected_new": self.rejected_new,
            "worst_minute": self.worst_minute.isoformat()
            if self.worst_minute
            else None,
            "worst_minute_rejected": self.worst_minute_rejected,
            "upper_bound": self.upper_bound,
            "quotas_left_out": self.quotas_left_out,
            "quotas": [quota.to_json() for quota in self.quotas],
        }


@dataclass(frozen=True)
class Impact:
    """An estimate: every reached series with traffic whose policy changes, hardest hit first."""

    since: datetime
    until: datetime
    rows: tuple[ImpactRow, ...]
    tenants_reached: int  #: tenants the change reaches by scope (with traffic or not)
    replayed: int  #: series replayed (the others could not be rejected at all)

    @property
    def days(self) -> float:
        return (self.until - self.since) / timedelta(days=1)

    @property
    def hit(self) -> tuple[ImpactRow, ...]:
        """Rows the new rules would reject requests of, or a monthly quota would by
        its period's end."""
        return tuple(row for row in self.rows if row.rejected_new or row.projected_over)

    def for_tenant(self, tenant: str) -> tuple[ImpactRow, ...]:
        return tuple(row for row in self.rows if row.tenant == tenant)

    def by_tenant(self) -> list[tuple[str, int, int, int]]:
        """(tenant, requests, rejected now, rejected new) per tenant hit, hardest first."""
        totals: dict[str, list[int]] = {}
        for row in self.hit:
            sums = totals.setdefault(row.tenant, [0, 0, 0])
            sums[0] += row.seen
            sums[1] += row.rejected_now
            sums[2] += row.rejected_new
        ranked = sorted(totals.items(), key=lambda item: (-item[1][2], item[0]))
        return [(tenant, *sums) for tenant, sums in ranked]  # type: ignore[misc]

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "tenants_reached": self.tenants_reached,
            "series_replayed": self.replayed,
            "requests": sum(row.seen for row in self.rows),
            "rejected_now": sum(row.rejected_now for row in self.rows),
            "rejected_new": sum(row.rejected_new for row in self.rows),
            "rows": [row.to_json() for row in self.rows],
            "caveats": list(CAVEATS),
        }


def impact_estimate(
    *,
    old: Rules | None,
    new: Rules,
    diff: RulesDiff,
    at: datetime | None = None,
    tenants: Iterable[str] | None = None,
    now: datetime | None = None,
) -> Impact:
    """Estimate what ``new`` (in force from ``at``, default now) would have rejected of
    the traffic of the last ``SLUICE_IMPACT_DAYS`` that ``diff`` reaches; ``tenants``
    narrows it to those (a reminder's one tenant)."""
    until = now or timezone.now()
    since = until - timedelta(days=settings.SLUICE_IMPACT_DAYS)
    reached = set(diff.affected_tenants)
    if diff.anonymous:
        reached.add("")
    if tenants is not None:
        reached &= set(tenants)
    moment = (at or until).timestamp()
    before = Resolver(old) if old is not None and old.policies else None
    after = Resolver(new)
    buckets: dict[tuple[int, int], tuple[Bucket, ...]] = {}
    changed: dict[tuple[str, str], tuple[Bucket, ...]] = {}
    quotas: dict[
        tuple[str, str], SeriesQuotas
    ] = {}  #: series whose new policy has some
    every = series_of(sorted(reached), since, until)
    for series in every:
        route = series.route if series.route in new.routes else None
        policy = after.resolve(
            tenant=series.tenant or None, route=route, now=moment
        ).policy
        if before is not None:
            was = before.resolve(tenant=series.tenant or None, route=route, now=moment)
            if was.policy.limits == policy.limits:
                continue  # the change leaves this series' limits as they were
        cost = new.routes[route].cost if route else 1
        shape = (id(policy), cost)
        if shape not in buckets:
            buckets[shape] = buckets_of(policy, route_cost=cost)
        changed[(series.tenant, series.route)] = buckets[shape]
        if held := quotas_of(policy):
            calendar = new.calendar(series.tenant)
            zone = (new.zones.get(calendar.zone, UTC_RULE), calendar.billing_day)
            quotas[(series.tenant, series.route)] = SeriesQuotas(
                held, cost, policy.route, zone
            )
    risky = [
        s
        for s in every
        if (s.tenant, s.route) in changed
        and could_reject(changed[(s.tenant, s.route)], s.busiest)
    ]
    keys = {(s.tenant, s.route) for s in risky} | quotas.keys()
    read = [s for s in every if (s.tenant, s.route) in keys]
    hours = hours_of(read, since, until)
    replays, steps = _replay_all(hours, changed, quotas, since, until)
    counted = quotas_count(steps, quotas, since, until)
    rows = []
    for series in every:
        key = (series.tenant, series.route)
        if key not in changed:
            continue
        result = replays.get(key)
        worst = result.worst_minute if result else None
        found = counted.get(key, ())
        days = sum(q.over for q in found if isinstance(q, DayCount))
        rows.append(
            ImpactRow(
                tenant=series.tenant,
                route=series.route,
                seen=series.seen,
                rejected_now=series.limited,
                rejected_new=(result.rejected if result else 0) + days,
                worst_minute=None
                if worst is None
                else datetime.fromtimestamp(worst * 60, UTC),
                worst_minute_rejected=result.worst_rejected if result else 0,
                upper_bound=not all(b.per_tenant for b in changed[key])
                or (key in quotas and quotas[key].per_user),
                quotas=found,
            )
        )
    rows.sort(
        key=lambda r: (-r.rejected_new, -r.projected_over, -r.seen, r.tenant, r.route)
    )
    return Impact(since, until, tuple(rows), len(reached), len(risky))


def _replay_all(
    hours: dict[tuple[str, str], list[tuple[int, int, int, int]]],
    buckets: dict[tuple[str, str], tuple[Bucket, ...]],
    quotas: dict[tuple[str, str], SeriesQuotas],
    since: datetime,
    until: datetime,
) -> tuple[dict[tuple[str, str], Replayed], dict[tuple[str, str], list[Step]]]:
    """Replay the series that could be rejected: the hours the new buckets admit whole
    are stepped whole, the minutes of the others read in one more statement, with
    those of the hours a quota's period starts in. Also each quota series' steps
    (:data:`Step`): its hours, and the minutes of an hour a period starts in."""
    cut = {
        key: set(
            boundaries(q.limits, q.zone, int(since.timestamp()), int(until.timestamp()))
        )
        for key, q in quotas.items()
    }
    busy = set()
    for (tenant, route), rows in hours.items():
        for at, n, minute_n, second_n in rows:
            key = (tenant, route)
            if (
                key in buckets
                and could_reject(buckets[key], (second_n, minute_n, n, n))
            ) or any(at * 60 < b < (at + 60) * 60 for b in cut.get(key, ())):
                busy.add((tenant, route, at))
    minutes = minutes_of(sorted(busy), since, until)
    results, steps = {}, {}
    for key, rows in hours.items():
        spans: list[Minute | Quiet] = []
        for at, n, _, _ in rows:
            found = minutes.get((*key, at))
            spans += found if found is not None else [Quiet(at, 60, n)]
        result = replay(spans, buckets[key])
        results[key] = result
        if key in quotas:
            steps[key] = [_step(span, result.lost) for span in spans]
    return results, steps


def _step(span: Minute | Quiet, lost: dict[int, int]) -> Step:
    """A replayed minute or quiet stretch with what the buckets rejected of it (none
    of a quiet one: the replay admits it whole)."""
    if isinstance(span, Quiet):
        return (span.at, span.minutes, span.count, 0)
    return (span.at, 1, span.count, lost.get(span.at, 0))
