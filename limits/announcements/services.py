"""Announcements: what is said about each version, to whom, and when.

* :func:`announcement_create` runs inside every publish and rollback
  (``limits.publishing.snapshot_store``): it stores the note, the emergency
  reason and the public changes, and queues the notifications on commit.
* :func:`announcement_notify` creates one delivery per affected tenant and
  endpoint (and one email per tenant with contacts), then queues them.
* :func:`reminders_send_due` sends reminders before a lowering takes effect,
  ``settings.SLUICE_REMINDERS`` ahead (7 and 1 days by default).
* :func:`announcements_dispatch_due` is what beat runs: reminders, and the
  notifications whose task was lost (broker down at commit, worker killed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone

from limits.announcements.changelog import public_changes, tenant_changes, tiers_of
from limits.announcements.deliveries import EVENT_TYPES, deliveries_enqueue
from limits.announcements.estimates import tenant_estimate
from limits.announcements.tenant_links import tenant_link_url
from limits.choices import AuditAction, DeliveryChannel, DeliveryKind, DeliveryState
from limits.core.audit import Actor, audit_record
from limits.core.chain import chain_lock
from limits.core.jobs import enqueue_on_commit
from limits.core.roles import require_publisher
from limits.diff.diffing import RulesDiff
from limits.models import Announcement, Delivery, Snapshot, Tenant, WebhookEndpoint
from limits.traffic.impacts import scheduled_impact

logger = logging.getLogger(__name__)

__all__ = [
    "announcement_cancel",
    "announcement_create",
    "announcement_note_update",
    "announcement_notify",
    "announcements_dispatch_due",
    "reminders_send_due",
]

#: The task that runs :func:`announcement_notify` (``limits.announcements.tasks``).
NOTIFY_TASK = "limits.announcement_notify"
#: Pending deliveries older than this are queued again (their task was lost).
STALE_PENDING = timedelta(minutes=10)
_CHUNK = 500


def announcement_create(
    *,
    snapshot: Snapshot,
    diff: RulesDiff,
    note: str,
    emergency_reason: str,
    notice_days: int,
    continues: Announcement | None = None,
    tell_again: bool = False,
) -> Announcement:
    """Store what is said about ``snapshot`` (whose ``diff`` against its parent is
    given typed, as it was just built); notify the tenants once it commits.

    ``continues`` is the announcement of the scheduled version ``snapshot``
    re-issues (a change carried into it, or moved to another time): the new one
    carries on its first announcement (``Announcement.carries``), one changelog
    entry. When that was sent and ``diff`` lowers nothing it did not, tenants
    were told already, so no one is notified again and its reminders carry on
    from where they were (unless ``tell_again``: the time changed).
    """
    told = continues is not None and continues.notified_at is not None
    told = told and not tell_again
    if told:
        announced = set(RulesDiff.from_json(continues.snapshot.diff).lowered())
        told = set(diff.lowered()) <= announced
    announcement = Announcement.objects.create(
        snapshot=snapshot,
        note=note.strip(),
        emergency_reason=emergency_reason.strip(),
        lowers=diff.lowers,
        notice_days=notice_days,
        public_changes=public_changes(diff),
        carries=(continues.carries or continues) if continues else None,
        notified_at=continues.notified_at if told else None,
        reminded=list(continues.reminded) if told else [],
    )
    if not told:
        enqueue_on_commit(NOTIFY_TASK, announcement.pk)
    return announcement


@transaction.atomic
def announcement_note_update(
    *, announcement: Announcement, note: str, actor: Actor
) -> Announcement:
    """Change the public note of a version that has not taken effect yet; audited."""
    require_publisher(actor)
    chain_lock()  # before the announcement's row lock (limits.core.chain: lock order)
    row = Announcement.objects.select_for_update(of=("self",)).select_related(
        "snapshot"
    )
    row = row.defer("snapshot__content", "snapshot__content_gzip").get(
        pk=announcement.pk
    )
    snapshot = row.snapshot
    if snapshot.activated_at or snapshot.superseded_at:
        raise ValidationError(
            {
                "note": "The version has taken effect or was cancelled: its note is final."
            }
        )
    before, row.note = {"note": row.note}, note.strip()
    row.revision += 1
    row.save(update_fields=["note", "revision", "updated_at"])
    audit_record(
        actor=actor,
        action=AuditAction.UPDATE,
        obj=row,
        before=before,
        after={"note": row.note},
    )
    return row


def announcement_cancel(*, announcement: Announcement, note: str) -> int:
    """Record that ``announcement``'s version was cancelled, with a public ``note``;
    tell the tenants that were told of it. Return how many deliveries. Call in the
    cancelling transaction."""
    row = _locked(announcement.pk)
    row.cancellation_note = note.strip()
    row.save(update_fields=["cancellation_note", "updated_at"])
    if row.notified_at is None:  # nobody was told: nobody to tell
        return 0
    ids = _fan_out(row, DeliveryKind.CANCELLATION, 0)
    deliveries_enqueue(ids)
    return len(ids)


def _locked(announcement_id: int) -> Announcement:
    return (
        Announcement.objects.select_for_update(of=("self",))
        .select_related("snapshot")
        .defer("snapshot__content_gzip")
        .get(pk=announcement_id)
    )


@transaction.atomic
def announcement_notify(*, announcement_id: int) -> int:
    """Create and queue the notifications of a version, once; return how many.

    Running it again (a retried or duplicated task) finds ``notified_at`` set
    under the row lock and does nothing. A cancelled version notifies no one,
    nor does the first version (there were no limits to change, only to set).
    """
    try:
        announcement = _locked(announcement_id)
    except (
        Announcement.DoesNotExist
    ):  # a task queued for another database, or a restore
        logger.warning("announcement_notify.gone: no announcement %s", announcement_id)
        return 0
    if announcement.notified_at is not None:
        return 0
    ids, snapshot = [], announcement.snapshot
    if snapshot.superseded_at is None and snapshot.parent_version is not None:
        ids = _fan_out(announcement, DeliveryKind.ANNOUNCEMENT, 0)
    announcement.notified_at = timezone.now()
    announcement.save(update_fields=["notified_at", "updated_at"])
    deliveries_enqueue(ids)
    return len(ids)


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _fan_out(announcement: Announcement, kind: DeliveryKind, lead: int) -> list[int]:
    """One delivery per affected tenant's active endpoint, one email per tenant
    with contacts; rows that exist already are kept. Return the sendable ones."""
    diff = RulesDiff.from_json(announcement.snapshot.diff)
    old, new = tiers_of(announcement.snapshot)
    endpoints = Prefetch(
        "webhook_endpoints", queryset=WebhookEndpoint.objects.filter(is_active=True)
    )
    # a reminder carries the tenant's own figures: one estimate for every tenant
    impact = (
        scheduled_impact(announcement.snapshot)
        if kind == DeliveryKind.REMINDER
        else None
    )
    for slugs in _chunks(list(diff.affected_tenants)):
        rows = []
        for tenant in Tenant.objects.filter(slug__in=slugs).prefetch_related(endpoints):
            tiers = {t for t in (old.get(tenant.slug), new.get(tenant.slug)) if t}
            changes = tenant_changes(diff, tenant=tenant.slug, tiers=tiers)
            if changes:
                payload = _payload(announcement, tenant.slug, changes, kind, lead)
                if impact is not None:
                    payload["impact"] = tenant_estimate(impact, tenant.slug)
                    payload["tenant_url"] = tenant_link_url(tenant=tenant)
                rows += _rows(announcement, tenant, payload, kind, lead)
        Delivery.objects.bulk_create(rows, ignore_conflicts=True)
    return list(
        announcement.deliveries.filter(
            kind=kind, lead=lead, state=DeliveryState.PENDING
        ).values_list("pk", flat=True)
    )


def _rows(announcement, tenant, payload, kind, lead) -> list[Delivery]:
    common = {"announcement": announcement, "tenant": tenant, "kind": kind}
    rows = [
        Delivery(
            **common,
            endpoint=endpoint,
            channel=DeliveryChannel.WEBHOOK,
            lead=lead,
            target=endpoint.url,
            payload=payload,
        )
        for endpoint in tenant.webhook_endpoints.all()
    ]
    if tenant.contact_emails:
        target = ", ".join(tenant.contact_emails)
        rows.append(
            Delivery(
                **common,
                channel=DeliveryChannel.EMAIL,
                lead=lead,
                target=target,
                payload=payload,
            )
        )
    return rows


def _payload(announcement, tenant: str, changes: list[dict], kind, lead) -> dict:
    """The event a tenant receives (documented in ``docs/announcements.md``)."""
    snapshot = announcement.snapshot
    payload = {
        "type": EVENT_TYPES[kind],
        "tenant": tenant,
        "version": snapshot.version,
        "published_at": snapshot.published_at.isoformat(),
        "effective_at": snapshot.effective_at.isoformat(),
        "emergency": announcement.is_emergency,
        "note": announcement.note,
        "lowers": any(change["lowers"] for change in changes),
        "changes": changes,
        "reminder": {"seconds_before": lead} if kind == DeliveryKind.REMINDER else None,
        "changelog_url": f"{settings.SLUICE_PUBLIC_URL.rstrip('/')}/changelog/",
    }
    if kind == DeliveryKind.CANCELLATION:
        payload["cancellation_note"] = announcement.cancellation_note
    return payload


def _due_lead(announcement: Announcement, now: datetime) -> int | None:
    """The reminder to send now, if any: the shortest lead whose time has come, when
    the version was published before that time and no reminder this close went out."""
    snapshot = announcement.snapshot
    due = [
        lead
        for lead in settings.SLUICE_REMINDERS
        if snapshot.published_at
        <= snapshot.effective_at - timedelta(seconds=lead)
        <= now
    ]
    lead = min(due, default=None)
    if lead is None or any(sent <= lead for sent in announcement.reminded):
        return None
    return lead


def _upcoming_lowerings(now: datetime):
    return Announcement.objects.filter(
        lowers=True,
        notified_at__isnull=False,
        snapshot__activated_at__isnull=True,
        snapshot__superseded_at__isnull=True,
        snapshot__effective_at__gt=now,
    ).values_list("pk", flat=True)


def reminders_send_due(*, now: datetime | None = None) -> int:
    """Queue the reminders whose time has come; return how many deliveries."""
    now = now or timezone.now()
    return sum(_remind(pk, now) for pk in _upcoming_lowerings(now))


@transaction.atomic
def _remind(announcement_id: int, now: datetime) -> int:
    announcement = _locked(announcement_id)
    lead = _due_lead(announcement, now)
    if lead is None:
        return 0
    ids = _fan_out(announcement, DeliveryKind.REMINDER, lead)
    announcement.reminded = [*announcement.reminded, lead]
    announcement.save(update_fields=["reminded", "updated_at"])
    deliveries_enqueue(ids)
    return len(ids)


def announcements_dispatch_due(*, now: datetime | None = None) -> dict[str, int]:
    """Beat's work: lost fan-outs, due reminders, lost deliveries. Safe to run anytime."""
    now = now or timezone.now()
    lost = Announcement.objects.filter(notified_at__isnull=True)
    notified = sum(
        announcement_notify(announcement_id=pk)
        for pk in lost.values_list("pk", flat=True)
    )
    reminded = reminders_send_due(now=now)
    stale = Delivery.objects.filter(
        state=DeliveryState.PENDING, updated_at__lt=now - STALE_PENDING
    ).values_list("pk", flat=True)[:1000]
    with transaction.atomic():
        deliveries_enqueue(list(stale))
    return {"notified": notified, "reminded": reminded, "requeued": len(stale)}
