"""Why a tenant got a 429 at a given second: the version then in force, the policy and
limit the gateways' resolver picks, the traffic before it, and what would have admitted it.

The traffic is the recorded per-second counts (``DecisionPeak``: every decision of
the tenant on the route, whatever its outcome). A bucket admits at most
``burst + rate x W / period`` requests in any ``W`` seconds, so the counts of the
windows ending at that second tell the smallest burst (at today's rate) and the
smallest rate (at today's burst) that would have admitted them all. A sliding
window admits at most its limit in any window of its length, so the busiest such
window tells the limit that would have admitted it, when the recorded seconds
cover a window (a second or a minute; not an hour or a day). Like the
impact estimate (``limits.traffic.replay``), a limit counted per user, API key or
IP is judged as if the tenant's traffic were one caller: an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar, cast

from django.core.exceptions import ValidationError

from limits.models import DecisionPeak, Snapshot
from limits.versions.selectors import snapshot_in_force_at, snapshot_rules
from sluice.model import (
    PERIOD_WORDS,
    Dimension,
    Limit,
    Resolution,
    Resolver,
    Sliding,
    SlidingWindow,
    limit_in_words,
)
from sluice.plans import LimitPlan, compile_policy

__all__ = ["LimitVerdict", "RejectionExplanation", "WindowVerdict", "rejection_explain"]

WINDOW = 60  #: seconds of traffic looked at before the rejection


@dataclass(frozen=True)
class LimitVerdict:
    """One bucket limit of the policy, against the traffic before the rejection."""

    name: str  #: as in the RateLimit headers and the rejection log: ``user-s``
    words: str
    rejected: (
        bool  #: the limit the rejection names (or, unnamed, one the traffic exceeds)
    )
    busiest: int  #: most requests in any window ending at that second
    busiest_window: int  #: that window's length, seconds
    allowed_then: int  #: what the bucket admits in that window from full
    burst_needed: int  #: the smallest burst that would have admitted it, at this rate
    rate_needed: (
        int | None
    )  #: the smallest rate, at this burst; None when the data is too short
    per_caller: bool  #: counted per user, key or IP: the figures are an upper bound
    period: str  #: the limit's period in words: ``second``

    @property
    def rate_needed_words(self) -> str | None:
        return f"{self.rate_needed:,} per {self.period}" if self.rate_needed else None

    @property
    def exceeded(self) -> bool:
        return self.busiest > self.allowed_then


@dataclass(frozen=True)
class WindowVerdict:
    """One sliding window of the policy, against the traffic before the rejection."""

    name: (
        str  #: as in the RateLimit headers and the rejection log: ``user-min-sliding``
    )
    words: str
    rejected: (
        bool  #: the limit the rejection names (or, unnamed, one the traffic exceeds)
    )
    window: int  #: seconds
    #: requests in the busiest ``window`` seconds up to the rejection; None when the
    #: recorded seconds are fewer than a window (an hour's or a day's): not judged
    busiest: int | None
    admits: int  #: requests the window admits in any window of its length
    limit_needed: int | None  #: the smallest limit that would have admitted them
    per_caller: bool  #: counted per user, key or IP: the figures are an upper bound

    @property
    def exceeded(self) -> bool:
        return self.busiest is not None and self.busiest > self.admits


@dataclass(frozen=True)
class RejectionExplanation:
    """Why ``tenant`` was rejected on ``route`` at ``at``."""

    at: datetime
    tenant: str
    route: str | None
    version: Snapshot  #: the version in force at that second
    tenant_known: bool  #: False: the version has no such tenant; the default applied
    resolution: Resolution
    verdicts: list[LimitVerdict]
    seconds: list[
        int
    ]  #: requests in each of the WINDOW seconds up to ``at``, oldest first
    shared_routes: bool  #: the policy is over all routes: every route's traffic counts
    windows: list[WindowVerdict] = field(default_factory=list)  #: its sliding windows

    @property
    def requests(self) -> int:
        return sum(self.seconds)


def rejection_explain(
    *, tenant: str, route: str | None, at: datetime, limit: str = ""
) -> RejectionExplanation:
    """Explain a rejection of ``tenant`` on ``route`` at ``at`` (``limit``: the name the
    rejection log recorded, when known). ValidationError when no version was in force
    then, or the route was not in it."""
    at = at.replace(microsecond=0)
    row = snapshot_in_force_at(at)
    if row is None:
        raise ValidationError(
            {"at": f"No version was in force at {at:%Y-%m-%d %H:%M:%S} UTC."}
        )
    rules = snapshot_rules(row)
    if route and route not in rules.routes:
        raise ValidationError(
            {"route": f"Version {row.version} has no route {route!r}."}
        )
    resolution = Resolver(rules).resolve(
        tenant=tenant, route=route or None, now=at.timestamp()
    )
    policy = resolution.policy
    shared = policy.route == "*"
    seconds = _seconds_before(tenant, None if shared else route, at)
    plan = compile_policy(policy, cost=resolution.cost)
    enforced = [p for p in plan.limits if not p.limit.shadow]
    # Buckets and windows are judged, each by its rule; other kinds are left out.
    verdicts = [
        _verdict(p, seconds, limit) for p in enforced if isinstance(p.limit, Limit)
    ]
    windows = [
        _window_verdict(p, seconds, limit)
        for p in enforced
        if isinstance(p.limit, SlidingWindow)
    ]
    # Unnamed, or named by another version: flag every limit the traffic exceeds.
    if not any(v.rejected for v in (*verdicts, *windows)):
        verdicts = [_flag(v) for v in verdicts]
        windows = [_flag(v) for v in windows]
    return RejectionExplanation(
        at,
        tenant,
        route or None,
        row,
        tenant in rules.tenants,
        resolution,
        verdicts,
        seconds,
        shared,
        windows,
    )


_Verdict = TypeVar("_Verdict", LimitVerdict, WindowVerdict)


def _flag(verdict: _Verdict) -> _Verdict:
    return replace(verdict, rejected=verdict.exceeded)


def _seconds_before(tenant: str, route: str | None, at: datetime) -> list[int]:
    """Decisions in each second of the WINDOW seconds ending with ``at``'s, oldest first."""
    first = at - timedelta(seconds=WINDOW - 1)
    minutes = DecisionPeak.objects.filter(
        tenant=tenant,
        minute__gte=first.replace(second=0),
        minute__lte=at.replace(second=0),
    )
    if route is not None:
        minutes = minutes.filter(route=route)
    counts: dict[datetime, int] = {}
    for minute, seconds in minutes.values_list("minute", "seconds"):
        for index, count in enumerate(seconds):
            moment = minute + timedelta(seconds=index)
            counts[moment] = counts.get(moment, 0) + count
    return [counts.get(first + timedelta(seconds=i), 0) for i in range(WINDOW)]


def _verdict(plan: LimitPlan, seconds: list[int], rejected_name: str) -> LimitVerdict:
    """The limit against every window ending at the rejection's second: the window
    that came closest to (or went furthest past) what the bucket admits from full.

    Counts are per whole second, so ``W`` counted seconds may be as little as
    ``W - 1`` seconds of refill apart: the bucket admits ``burst + rate x (W - 1)``
    for sure (one second's requests may have come at once: only the burst holds them).
    """
    limit = plan.limit
    cost = plan.geometry.increment // plan.geometry.tick  # tokens a request takes
    per_second = limit.rate / limit.period
    windows = [
        (width, sum(seconds[-width:]) * cost, limit.burst + per_second * (width - 1))
        for width in range(1, len(seconds) + 1)
    ]
    width, tokens, allowed = max(windows, key=lambda w: (w[1] - w[2], -w[0]))
    burst_needed = max(math.ceil(n - per_second * (w - 1)) for w, n, _ in windows)
    rate_needed: int | None = None
    # Seconds of traffic say nothing of an hourly or daily rate, and no rate helps
    # requests that came within one second past the burst.
    if limit.period <= WINDOW and windows[0][1] <= limit.burst:
        rate_needed = max(
            limit.rate,
            *(
                math.ceil((n - limit.burst) * limit.period / (w - 1))
                for w, n, _ in windows[1:]
            ),
        )
    return LimitVerdict(
        name=plan.name,
        words=limit_in_words(limit),
        rejected=plan.name == rejected_name,
        busiest=tokens // cost,
        busiest_window=width,
        allowed_then=math.floor(allowed / cost),
        burst_needed=max(limit.burst, burst_needed),
        rate_needed=rate_needed,
        per_caller=limit.dimension is not Dimension.TENANT,
        period=PERIOD_WORDS[limit.period],
    )


def _window_verdict(
    plan: LimitPlan, seconds: list[int], rejected_name: str
) -> WindowVerdict:
    """The window against the busiest run of its length in the recorded seconds.

    The script's count weighs the previous window's requests by how much of it is
    still inside the sliding window: close to, not exactly, the requests in the
    last ``window`` seconds; the figures are the window's rule read literally.
    """
    limit, shape = plan.limit, cast(Sliding, plan.shape)
    width = limit.window
    busiest = None
    if width <= len(seconds):
        busiest = max(
            sum(seconds[end - width : end]) for end in range(width, len(seconds) + 1)
        )
    return WindowVerdict(
        name=plan.name,
        words=limit_in_words(limit),
        rejected=plan.name == rejected_name,
        window=width,
        busiest=busiest,
        admits=shape.limit // shape.cost,
        limit_needed=None
        if busiest is None
        else max(limit.limit, busiest * shape.cost),
        per_caller=limit.dimension is not Dimension.TENANT,
    )
