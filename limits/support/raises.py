"""The one-click temporary raise: a change request for a tenant override that doubles
what the tenant gets on a route now, until an end date."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from limits.changes.services import Proposal, active_base, change_request_open
from limits.core.audit import Actor
from limits.models import ChangeOrigin, ChangeRequest, Tenant
from limits.rules.documents import policy_document
from sluice.model import (
    CalendarQuota,
    Policy,
    RateLimit,
    Resolver,
    SlidingWindow,
    scope_key,
)

__all__ = ["RAISE_DAYS", "RAISE_FACTOR", "override_raise"]

RAISE_FACTOR = 2  #: what a one-click raise multiplies rates and bursts by
RAISE_DAYS = 7  #: how long it lasts unless told otherwise


def override_raise(
    *,
    tenant: Tenant,
    route: str | None,
    reason: str,
    actor: Actor,
    until: datetime | None = None,
) -> ChangeRequest:
    """Open a change request for a temporary override of ``tenant`` on ``route`` (None:
    all routes) with twice the rates and bursts it gets in the active version, ending
    ``until`` (default: in RAISE_DAYS days). The reviewer can change the figures."""
    if not reason.strip():
        raise ValidationError(
            {"reason": "Say why the tenant needs more: reviewers read it."}
        )
    now = timezone.now()
    until = until or now + timedelta(days=RAISE_DAYS)
    if until > now + timedelta(days=settings.SLUICE_OVERRIDE_MAX_DAYS):
        raise ValidationError(
            {
                "until": f"An override lasts at most {settings.SLUICE_OVERRIDE_MAX_DAYS} days."
            }
        )
    _, base = active_base()
    if route is not None and route not in base.routes:
        raise ValidationError({"route": f"The active version has no route {route!r}."})
    current = Resolver(base).resolve(
        tenant=tenant.slug, route=route, now=now.timestamp()
    )
    raised = _raised(current.policy, tenant.slug, route, until)
    where = route or "all routes"
    return change_request_open(
        actor=actor,
        proposals=[Proposal("policy", "", policy_document(raised, reason=reason))],
        title=f"Raise {tenant.slug} on {where} x{RAISE_FACTOR} until {until:%Y-%m-%d %H:%M} UTC",
        reason=reason,
        origin=ChangeOrigin.ADMIN,
    )


def _raised_limit(limit: RateLimit) -> RateLimit:
    # A window or a quota has no burst: its limit is all it holds.
    if isinstance(limit, SlidingWindow | CalendarQuota):
        return replace(limit, limit=limit.limit * RAISE_FACTOR)
    return replace(
        limit, rate=limit.rate * RAISE_FACTOR, burst=limit.burst * RAISE_FACTOR
    )


def _raised(policy: Policy, tenant: str, route: str | None, until: datetime) -> Policy:
    """``policy``'s limits raised RAISE_FACTOR times, as the tenant's override."""
    limits = tuple(_raised_limit(limit) for limit in policy.limits)
    caps = tuple(
        replace(cap, max_inflight=cap.max_inflight * RAISE_FACTOR)
        for cap in policy.concurrency
    )
    return Policy(
        scope=scope_key("tenant", tenant),
        route=route or "*",
        limits=limits,
        expires_at=until,
        concurrency=caps,
    )
