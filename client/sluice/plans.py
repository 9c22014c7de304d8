"""Policies compiled for the hot path: key templates and script arguments, built once.

An :class:`~.engine.Engine` compiles each (policy, request cost) it meets into a
:class:`PolicyPlan` and keeps it for the snapshot's life, so a request pays for
look-ups and string formatting only. Plans also say which of the slower paths a
policy needs: sharded keys (same script, other keys), or leases and concurrency
slots (the ``hot.lua`` script, :mod:`.hot`).

A policy with calendar quotas is compiled per tenant calendar too, with the bounds
of the period it is in (:func:`.calendar.period_bounds`, at the caller's clock);
the plan is good until the first of those periods ends (``valid_until``), when
the engine compiles it again: no boundary is computed per request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from .calendar import UTC_RULE, Calendar, period_bounds
from .keys import inflight_template, key_template
from .kinds import CALENDAR_QUOTA, LimitKind, Shape, kind_of
from .kinds.gcra import Geometry
from .quota import CalendarQuota, ConcurrencyLimit, Dimension, RateLimit
from .rules import Policy

__all__ = ["LimitPlan", "PolicyPlan", "SlotPlan", "calendared", "compile_policy"]


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """One limit of a policy, ready to key and to run."""

    limit: RateLimit
    dimension: Dimension  #: the limit's, kept at hand for the hot path
    name: str  #: the policy name in RateLimit headers (GCRA: ``user-s``)
    template: str  #: the bucket key template, see :func:`.keys.key_template`
    shape: Shape  #: the limit in script units, from its kind
    quota: int  #: IETF ``q``, from its kind
    window: int  #: IETF ``w``, from its kind
    kind: LimitKind
    lease: int = 0  #: requests' worth taken per lease (0: no lease)
    lease_us: int = 0  #: how long leased tokens may be spent, µs

    @property
    def geometry(self) -> Geometry:
        """The shape of a GCRA limit: what its hot-key options (leases, shards) and
        the backlog's charges work with; those exist for GCRA only."""
        return cast(Geometry, self.shape)


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """One concurrency limit of a policy: its key template and script arguments."""

    limit: ConcurrencyLimit
    dimension: Dimension
    name: str  #: ``<dimension>-concurrent``
    template: str  #: see :func:`.keys.inflight_template`
    args: tuple[bytes, bytes, bytes]  #: max in flight, timeout (ms), shadow


@dataclass(frozen=True, slots=True)
class PolicyPlan:
    """A policy compiled for one request cost: key templates and script arguments."""

    policy: Policy
    limits: tuple[LimitPlan, ...]
    args: tuple[bytes, ...]  #: ARGV of the token-bucket script, already encoded
    counts_tenant: bool  #: whether a limit counts per tenant (it picks the owner)
    sharded: tuple[tuple[int, int], ...] = ()  #: (limit index, shards) to suffix
    slots: tuple[SlotPlan, ...] = ()  #: concurrency limits
    hot: bool = False  #: leases or slots: decided by the hot script (:mod:`.hot`)
    #: the tenant calendar its quotas were compiled for (None: it has none)
    calendar: Calendar | None = None
    #: epoch seconds at which a quota's period ends: compile it again from then
    valid_until: float = float("inf")


def calendared(policy: Policy) -> bool:
    """Whether ``policy`` holds calendar quotas (its plans depend on the calendar)."""
    return any(type(limit) is CalendarQuota for limit in policy.limits)


def compile_policy(
    policy: Policy,
    *,
    cost: int,
    share: int = 1,
    calendar: Calendar | None = None,
    zone_rule: str = UTC_RULE,
    now: float | None = None,
) -> PolicyPlan:
    """Compile ``policy`` for requests of ``cost`` (``share``: see :meth:`.LimitKind.shape`).

    Each limit's kind gives its shape, its script arguments and its headers. A
    calendar quota counts in the period holding ``now`` (epoch seconds, the
    caller's clock; None: this machine's) of ``calendar`` (None: UTC, billing
    day 1), whose zone has the POSIX rule ``zone_rule``.
    """
    if now is None:
        now = time.time()
    plans: list[LimitPlan] = []
    args: list[bytes] = []
    valid_until = float("inf")
    billing_day = calendar.billing_day if calendar is not None else 1
    for limit in policy.limits:
        bounds = None
        if type(limit) is CalendarQuota:
            bounds = period_bounds(
                int(now), limit.per, limit.cycle, zone_rule, billing_day
            )
            valid_until = min(valid_until, bounds[1])
        plan = _limit_plan(
            policy, limit, cost=limit.cost or cost, share=share, bounds=bounds
        )
        plans.append(plan)
        args += plan.kind.arguments(plan.shape, flag=b"1" if limit.shadow else b"0")
    slots = tuple(_slot_plan(policy, cap) for cap in policy.concurrency)
    return PolicyPlan(
        policy,
        tuple(plans),
        tuple(args),
        counts_tenant=any(p.dimension is Dimension.TENANT for p in plans)
        or any(s.dimension is Dimension.TENANT for s in slots),
        sharded=tuple(
            (index, p.limit.shards)
            for index, p in enumerate(plans)
            if p.limit.shards > 1
        ),
        slots=slots,
        hot=bool(slots) or any(p.lease for p in plans),
        calendar=calendar,
        valid_until=valid_until,
    )


def _limit_plan(
    policy: Policy,
    limit: RateLimit,
    *,
    cost: int,
    share: int,
    bounds: tuple[int, int, int] | None,
) -> LimitPlan:
    kind = kind_of(limit)
    if bounds is not None:  # a calendar quota, in the caller's period
        shape: Shape = CALENDAR_QUOTA.shape(
            cast(CalendarQuota, limit), cost=cost, share=share, bounds=bounds
        )
    else:
        shape = kind.shape(limit, cost=cost, share=share)
    name, quota, window = kind.advertised(limit, shape)
    return LimitPlan(
        limit,
        limit.dimension,
        name,
        key_template(policy.route, limit.dimension, limit.period, kind.name),
        shape,
        quota,
        window,
        kind,
        lease=max(1, limit.lease // cost) if limit.lease else 0,
        lease_us=limit.lease_ms * 1000 if limit.lease else 0,
    )


def _slot_plan(policy: Policy, cap: ConcurrencyLimit) -> SlotPlan:
    return SlotPlan(
        cap,
        cap.dimension,
        f"{cap.dimension.value}-concurrent",
        inflight_template(policy.route, cap.dimension),
        (b"%d" % cap.max_inflight, b"%d" % (cap.timeout * 1000), b"%d" % cap.shadow),
    )
