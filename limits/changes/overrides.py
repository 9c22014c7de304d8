"""The lifecycle of temporary overrides: a maximum duration, reminders, renewal, pruning.

* An override lasts at most ``SLUICE_OVERRIDE_MAX_DAYS`` (90) from when it is
  set: ``Policy.clean`` and the document checks refuse a longer one.
* ``SLUICE_OVERRIDE_REMINDER`` (3 days) before it expires, its author and the
  support group get an e-mail (once per override and expiry), and the admin's
  home page lists it with a *Renew* button.
* :func:`override_renew` opens a change request extending it by
  ``SLUICE_OVERRIDE_RENEW_DAYS`` (30), never past the maximum.
* :func:`overrides_prune` removes overrides expired for more than
  ``SLUICE_OVERRIDE_GRACE_DAYS`` (7) through a change request the system opens
  and publishes: audited, with no notice period (an expired override applies to
  no one, so removing it lowers nothing) and nobody notified.

Beat runs :func:`overrides_maintain` every ``SLUICE_OVERRIDE_INTERVAL`` seconds.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from limits.changes.publishing import Published, change_request_publish
from limits.changes.services import Proposal, active_base, change_request_open
from limits.choices import Role
from limits.core.audit import Actor
from limits.models import (
    AuditEntry,
    ChangeEdit,
    ChangeOrigin,
    ChangeRequest,
    ChangeRequestState,
    OverrideReminder,
    Policy,
)
from limits.rules.documents import document_in
from limits.rules.services import rule_delete
from sluice.model import format_time, policy_ref

__all__ = [
    "override_author",
    "override_key",
    "override_reminders_send_due",
    "override_renew",
    "overrides_expiring",
    "overrides_maintain",
    "overrides_prune",
]

log = logging.getLogger(__name__)
BEAT = "celery beat"


def override_key(policy: Policy) -> str:
    """The document key of an override row: ``tenant:acme/search~``."""
    return f"{policy.scope_key}/{policy.route_key}~"


def overrides_expiring(*, now: datetime | None = None) -> QuerySet[Policy]:
    """Live overrides that expire within the reminder lead, soonest first."""
    now = now or timezone.now()
    lead = timedelta(seconds=max(settings.SLUICE_OVERRIDE_REMINDER, default=0))
    return (
        Policy.objects.filter(expires_at__gt=now, expires_at__lte=now + lead)
        .select_related("tenant", "route")
        .prefetch_related("limits")
        .order_by("expires_at", "pk")
    )


def override_author(policy: Policy):
    """Who set the override: the author of the last published change request that
    edited it, else the last person the audit log shows changing it (None: the system)."""
    edit = (
        ChangeEdit.objects.filter(
            subject="policy",
            key=override_key(policy),
            change_request__state=ChangeRequestState.PUBLISHED,
            change_request__author__isnull=False,
        )
        .select_related("change_request__author")
        .order_by("-change_request__closed_at")
        .first()
    )
    if edit is not None:
        return edit.change_request.author
    entry = (
        AuditEntry.objects.filter(
            object_type="policy", object_id=str(policy.pk), actor_id__isnull=False
        )
        .order_by("-created_at", "-id")
        .first()
    )
    users = get_user_model().objects
    return users.filter(pk=entry.actor_id).first() if entry else None


def _recipients(policy: Policy) -> list[str]:
    author = override_author(policy)
    support = get_user_model().objects.filter(
        groups__name=Role.SUPPORT.value, is_active=True
    )
    emails = {u.email for u in support if u.email}
    if author is not None and author.email:
        emails.add(author.email)
    return sorted(emails)


def override_reminders_send_due(*, now: datetime | None = None) -> int:
    """E-mail the author and support about each override expiring within the lead,
    once per override and expiry (a renewal gets its own); return how many were sent."""
    sent = 0
    for policy in overrides_expiring(now=now):
        with transaction.atomic():
            recipients = _recipients(policy)
            _, created = OverrideReminder.objects.get_or_create(
                policy=policy,
                expires_at=policy.expires_at,
                defaults={"recipients": recipients},
            )
            if created and recipients:  # a failed send rolls the row back: tried again
                send_mail(
                    f"[Sluice] Override {policy} expires {policy.expires_at:%Y-%m-%d %H:%M} UTC",
                    _reminder_text(policy),
                    settings.DEFAULT_FROM_EMAIL,
                    recipients,
                )
            sent += created
    return sent


def _reminder_text(policy: Policy) -> str:
    limits = "; ".join(limit.describe() for limit in policy.limits.all())
    home = f"{settings.SLUICE_PUBLIC_URL.rstrip('/')}/admin/"
    return (
        f"The temporary override {policy} ({limits}) expires on "
        f"{policy.expires_at:%Y-%m-%d %H:%M} UTC.\n\nReason it was given: "
        f"{policy.reason}\n\nIf the tenant still needs it, renew it from the admin's "
        f"home page ({home}): one click opens a change request extending it by "
        f"{settings.SLUICE_OVERRIDE_RENEW_DAYS} days. Otherwise nothing is needed: it "
        "stops applying at its expiry and is pruned from the rules "
        f"{settings.SLUICE_OVERRIDE_GRACE_DAYS} days later.\n"
    )


def override_renew(*, policy: Policy, actor: Actor) -> ChangeRequest:
    """Open a change request extending the override ``policy`` (as the active version
    has it) by ``SLUICE_OVERRIDE_RENEW_DAYS``, never past the maximum from now."""
    key = override_key(policy) if policy.expires_at else ""
    _, base = active_base()
    doc = document_in(base, "policy", key) if key else None
    if doc is None:
        raise ValidationError(
            "Only a published temporary override can be renewed: this one is not in "
            "the active version."
        )
    now = timezone.now()
    start = max(policy.expires_at, now)
    longest = now + timedelta(days=settings.SLUICE_OVERRIDE_MAX_DAYS)
    until = min(start + timedelta(days=settings.SLUICE_OVERRIDE_RENEW_DAYS), longest)
    new = {**doc, "expires_at": format_time(until)}
    return change_request_open(
        actor=actor,
        proposals=[Proposal("policy", key, new)],
        title=f"Renew {policy} until {until:%Y-%m-%d %H:%M} UTC",
        reason=f"Renewal. It was set because: {policy.reason}",
        origin=ChangeOrigin.RENEWAL,
    )


def overrides_prune(*, now: datetime | None = None) -> Published | None:
    """Remove from the rules the overrides expired for longer than the grace period;
    None when there are none in the active version. Overrides only the rule tables
    still hold (never published) are deleted from them, audited."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.SLUICE_OVERRIDE_GRACE_DAYS)
    actor = Actor.system(BEAT)
    _, base = active_base()
    keys = sorted(
        policy_ref(p)
        for p in base.policies
        if p.expires_at is not None and p.expires_at <= cutoff
    )
    published = _prune_published(keys, actor) if keys else None
    in_force = {policy_ref(p) for p in base.policies}
    for row in Policy.objects.filter(expires_at__lte=cutoff).select_related(
        "tenant", "route"
    ):
        if override_key(row) not in in_force:
            rule_delete(obj=row, actor=actor, reason="expired override pruned")
    return published


@transaction.atomic
def _prune_published(keys: list[str], actor: Actor) -> Published | None:
    proposals = [Proposal("policy", key, None) for key in keys]
    request = change_request_open(
        actor=actor,
        proposals=proposals,
        title=f"Prune {len(keys)} expired override(s)",
        reason=f"Expired more than {settings.SLUICE_OVERRIDE_GRACE_DAYS} days ago: "
        "they apply to no one. No notice is needed.",
        origin=ChangeOrigin.PRUNE,
    )
    try:
        with transaction.atomic():
            return change_request_publish(change_request=request, actor=actor)
    except ValidationError as exc:  # a scheduled version disagrees: try again later
        log.warning("overrides.prune_refused %s", " ".join(exc.messages))
        transaction.set_rollback(True)
        return None


def overrides_maintain(*, now: datetime | None = None) -> dict[str, int]:
    """Beat's work: reminders due, then pruning. Safe to run at any time."""
    reminded = override_reminders_send_due(now=now)
    pruned = overrides_prune(now=now)
    count = len(pruned.change_request.edits.all()) if pruned else 0
    return {"reminded": reminded, "pruned": count}
