"""The calendar quota as a :class:`~.base.LimitKind`: N per day or per month, reset
at a calendar boundary in the tenant's time zone, or per billing cycle.

A key holds the period's start and the requests' worth used in it
(``lua/token_bucket.lua``'s quota branch); a request of ``cost`` fits when
``used + cost <= limit``. The caller computes the period's bounds from its clock
and the tenant's calendar (:func:`sluice.calendar.period_bounds`), and the script
moves on to the next period when Redis time has passed the end (a caller whose
clock lags the boundary).

The state a reply carries is a duration, as every kind's, in ``tick = ceil(period
µs / limit)`` per request's worth:

- while a request would fit, ``used x tick``, so ``remaining`` is ``limit - used``;
- once it would not, ``(end - now) + (limit - cost) x tick``, so ``wait`` is the
  time until the period ends: ``Retry-After`` is exact.

Read this way, :class:`Quota` is a GCRA geometry of ``increment = cost x tick``
and ``capacity = limit x tick``, as a sliding window's is: the in-process
simulations (the local failure mode, the rejected-keys cache) run a quota as a
bucket refilling ``limit`` per period, ``limit`` deep; a rejection is cached
until the period's end, for requests at least as costly (a cheaper one may fit
what is left). ``reset`` is the period's end (``now`` from the reply).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sluice import reading
from sluice.calendar import UTC_RULE, period_bounds
from sluice.errors import SnapshotError
from sluice.quota import (
    QUOTA_CYCLES,
    QUOTA_PERIODS,
    CalendarQuota,
    Dimension,
    cost_phrase,
    requests_phrase,
)

from .base import Advertised, Counted, Direction

__all__ = [
    "CALENDAR_QUOTA",
    "CalendarQuotaKind",
    "Quota",
    "quota_name",
    "quota_shape",
    "quota_state",
]

_MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class Quota(Counted):
    """A calendar quota in script units for one request cost and one period."""

    cost: int  #: requests' worth one request adds
    limit: int  #: requests' worth a period admits
    start: int  #: the period's start, epoch seconds
    end: int  #: its end, epoch seconds
    next_end: int  #: the end of the period after it
    tick: int  #: µs per request's worth in the state: ceil((end - start) µs / limit)

    def reset(self, state: int, now: int) -> int:
        """µs from ``now`` (the reply's Redis time) to the end of the period: the
        next period's when the script moved on to it, the start of this one when
        Redis has not reached it (the caller's clock runs ahead)."""
        if now >= self.end * _MICROS:
            end = self.next_end
        elif now < self.start * _MICROS:
            end = self.start
        else:
            end = self.end
        return end * _MICROS - now if end * _MICROS > now else 0


def quota_shape(limit: int, cost: int, bounds: tuple[int, int, int]) -> Quota:
    """The :class:`Quota` of ``limit`` requests' worth over ``bounds`` (start, end,
    next end), for requests of ``cost``."""
    start, end, next_end = bounds
    return Quota(
        cost, limit, start, end, next_end, math.ceil((end - start) * _MICROS / limit)
    )


def quota_state(shape: Quota, used: int, end: int, now: int) -> int:
    """The state (see the module) of a key that has ``used`` requests' worth (after
    the decision) of the period ending at ``end`` (epoch s), at ``now`` (µs):
    ``lua/token_bucket.lua``'s ``quota_state``."""
    if used + shape.cost <= shape.limit:
        return used * shape.tick
    return end * _MICROS - now + (shape.limit - shape.cost) * shape.tick


_KEYS = {"kind", "dimension", "limit", "per", "cost", "shadow"}


def _one_of(data: Any, path: str, allowed: tuple[str, ...]) -> str:
    word = reading.string(data, path)
    if word not in allowed:
        raise SnapshotError(path, f"{word!r} is not one of: {', '.join(allowed)}")
    return word


def quota_name(limit: CalendarQuota) -> str:
    """``daily quota``, ``monthly quota`` or ``monthly quota (billing cycle)``."""
    if limit.per == "day":
        return "daily quota"
    return "monthly quota" + (" (billing cycle)" if limit.cycle == "billing" else "")


class CalendarQuotaKind:
    """The calendar quota (:class:`~sluice.quota.CalendarQuota`)."""

    name = "calendar_quota"
    limit_type = CalendarQuota

    def parse(self, data: Any, path: str) -> CalendarQuota:
        """A quota (``CalendarQuota.to_json``; ``cycle`` absent: calendar)."""
        obj = reading.members(data, path, _KEYS, {"cycle", *reading.PUBLIC})
        per = _one_of(obj["per"], f"{path}.per", tuple(QUOTA_PERIODS))
        return CalendarQuota(
            dimension=reading.choice(Dimension, obj["dimension"], f"{path}.dimension"),
            limit=reading.integer(obj["limit"], f"{path}.limit", minimum=1),
            per=per,
            cycle=_one_of(obj.get("cycle", "calendar"), f"{path}.cycle", QUOTA_CYCLES),
            cost=reading.cost(obj, path),
            shadow=reading.boolean(obj["shadow"], f"{path}.shadow"),
            **reading.public(obj, path),
        )

    def problems(self, limit: CalendarQuota, *, cost: int) -> list[tuple[str, str]]:
        """A known period and cycle, and a limit that holds the request cost."""
        errors = []
        if limit.per not in QUOTA_PERIODS:
            errors.append((".per", f"must be one of: {', '.join(QUOTA_PERIODS)}"))
        if limit.cycle not in QUOTA_CYCLES:
            errors.append((".cycle", f"must be one of: {', '.join(QUOTA_CYCLES)}"))
        elif limit.cycle == "billing" and limit.per != "month":
            errors.append((".cycle", "a billing cycle is monthly: per must be month"))
        if limit.limit < cost:
            errors.append(
                (
                    ".limit",
                    f"limit {limit.limit} is below the request cost {cost}: "
                    "such requests could never pass",
                )
            )
        return errors

    def shape(
        self,
        limit: CalendarQuota,
        *,
        cost: int,
        share: int = 1,
        bounds: tuple[int, int, int] | None = None,
    ) -> Quota:
        """The quota over ``bounds`` (:func:`sluice.calendar.period_bounds`; the
        plans pass the tenant's; without them, the UTC period holding the epoch,
        for callers that only read the limit's numbers); ``share`` divides the
        limit (never below one request)."""
        if bounds is None:
            bounds = period_bounds(0, limit.per, limit.cycle, UTC_RULE)
        return quota_shape(max(cost, limit.limit // share), cost, bounds)

    def arguments(self, shape: Quota, *, flag: bytes) -> tuple[bytes, ...]:
        """cost, limit and the flag followed by ``q`` and ``start:end:next_end``
        (epoch seconds): the quota branch of ``lua/token_bucket.lua``."""
        return (
            b"%d" % shape.cost,
            b"%d" % shape.limit,
            b"%sq%d:%d:%d" % (flag, shape.start, shape.end, shape.next_end),
        )

    def advertised(self, limit: CalendarQuota, shape: Quota) -> Advertised:
        """``<dimension>-<per>-quota``, q = the limit, w = this period's seconds."""
        return Advertised(
            f"{limit.dimension.value}-{limit.per}-quota",
            shape.limit,
            shape.end - shape.start,
        )

    def noun(self, limit: CalendarQuota) -> str:
        """``Daily quota`` or ``Monthly quota``."""
        return "Daily quota" if limit.per == "day" else "Monthly quota"

    def terse(self, limit: CalendarQuota) -> str:
        """``monthly quota (billing cycle) of 10,000 requests``, then its cost."""
        text = f"{quota_name(limit)} of {requests_phrase(limit.limit)}"
        return text + cost_phrase(limit)

    def in_words(self, limit: CalendarQuota, subject: str) -> str:
        """``10,000 requests per billing month per account``."""
        period = "billing month" if limit.cycle == "billing" else limit.per
        return f"{requests_phrase(limit.limit)} per {period} {subject}"

    def direction(
        self, before: CalendarQuota, after: CalendarQuota, *, route_cost: int
    ) -> Direction:
        """Against the client: fewer requests per period, the same limit over a
        longer period, a higher cost, or boundaries that move (a new cycle)."""
        seconds_before = QUOTA_PERIODS[before.per]
        seconds_after = QUOTA_PERIODS[after.per]
        # requests per second, compared without rounding: limit / period
        rate_before = before.limit * seconds_after
        rate_after = after.limit * seconds_before
        cost_before = before.cost or route_cost
        cost_after = after.cost or route_cost
        if after.limit < before.limit or rate_after < rate_before:
            return Direction.LOWERED
        if cost_after > cost_before or after.cycle != before.cycle:
            return Direction.LOWERED
        if after.limit > before.limit or rate_after > rate_before:
            return Direction.RAISED
        if cost_after < cost_before:
            return Direction.RAISED
        return Direction.UNCHANGED


#: The one calendar-quota kind (kinds hold no state).
CALENDAR_QUOTA = CalendarQuotaKind()
