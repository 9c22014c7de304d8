"""Reminders at 80 % and 100 % of a calendar quota, for tenants that opted in.

Beat scans the opted-in tenants (``Tenant.quota_reminders``); each threshold a
quota has reached this period is notified once, through the announcements'
channels (signed webhooks to the tenant's active endpoints, an email to its
contacts). A :class:`~limits.models.QuotaNotice` row per (tenant, quota, period,
threshold), unique, is written in the transaction that creates the deliveries:
a scan that runs twice never notifies twice, and a new period re-arms both.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone

from limits.announcements.deliveries import EVENT_TYPES, deliveries_enqueue
from limits.announcements.tenant_links import tenant_link_url
from limits.announcements.webhooks import require_manager
from limits.choices import DeliveryChannel, DeliveryKind
from limits.core.audit import Actor, audited_save, row_lock
from limits.core.chain import chain_lock
from limits.models import Delivery, QuotaNotice, Tenant, WebhookEndpoint
from limits.quotas.usage import QuotaUsage, tenant_quotas

__all__ = ["THRESHOLDS", "quota_reminders_send", "tenant_quota_reminders_set"]

log = logging.getLogger(__name__)

#: Percentages of a quota's limit that are worth telling a tenant about.
THRESHOLDS = (80, 100)


@transaction.atomic
def tenant_quota_reminders_set(
    *, tenant: Tenant, enabled: bool, actor: Actor
) -> Tenant:
    """Turn the tenant's quota reminders on or off, now; audited. A preference of
    whom to tell, like its endpoints, not a rule: no change request, no publish."""
    require_manager(actor)
    chain_lock()  # before the row lock (limits.core.chain: lock order)
    before = row_lock(tenant)
    tenant.quota_reminders = enabled
    audited_save(tenant, actor=actor, before=before)
    return tenant


def quota_reminders_send(*, now: float | None = None) -> int:
    """Notify every opted-in tenant of the quota thresholds it reached this period
    and was not told of yet; return how many deliveries were queued.

    A tenant whose usage cannot be read (Redis down) is skipped and tried again by
    the next scan. ``now``: epoch seconds (default: Redis server time).
    """
    endpoints = Prefetch(
        "webhook_endpoints", queryset=WebhookEndpoint.objects.filter(is_active=True)
    )
    queued = 0
    opted_in = Tenant.objects.filter(quota_reminders=True).prefetch_related(endpoints)
    for tenant in opted_in.order_by("pk"):
        report = tenant_quotas(tenant=tenant.slug, now=now)
        if report.unavailable:
            log.warning("quotas.reminders_skipped", extra={"tenant": tenant.slug})
            continue
        for quota in report.quotas:
            queued += _remind(tenant, quota)
    return queued


def _reached(quota: QuotaUsage) -> list[int]:
    """The thresholds ``quota``'s usage has reached, lowest first."""
    used = quota.used or 0
    return [t for t in THRESHOLDS if used * 100 >= t * quota.limit]


@transaction.atomic
def _remind(tenant: Tenant, quota: QuotaUsage) -> int:
    """Record each threshold reached and not yet recorded; notify the highest of
    them (a tenant that went from 70 % to 100 % between two scans gets one
    message, the 100 % one)."""
    new = [
        threshold
        for threshold in _reached(quota)
        if QuotaNotice.objects.get_or_create(
            tenant=tenant,
            quota=quota.key,
            period_start=quota.period_start,
            threshold=threshold,
            defaults={
                "period_end": quota.period_end,
                "used": quota.used,
                "limit": quota.limit,
            },
        )[1]
    ]
    if not new:
        return 0
    rows = _deliveries(tenant, _payload(tenant, quota, max(new)))
    Delivery.objects.bulk_create(rows)
    deliveries_enqueue([row.pk for row in rows])
    return len(rows)


def _payload(tenant: Tenant, quota: QuotaUsage, threshold: int) -> dict:
    """The event (documented in ``docs/announcements.md``): the announcements'
    shape, ``type`` ``quota.threshold``; the delivery adds its ``id``."""
    return {
        "type": EVENT_TYPES[DeliveryKind.QUOTA],
        "tenant": tenant.slug,
        "created_at": timezone.now().isoformat(),
        "threshold": threshold,
        "quota": quota.to_json(),
        "tenant_url": tenant_link_url(tenant=tenant),
    }


def _deliveries(tenant: Tenant, payload: dict) -> list[Delivery]:
    """One webhook per active endpoint of the tenant, one email to its contacts."""
    common = {"tenant": tenant, "kind": DeliveryKind.QUOTA, "payload": payload}
    rows = [
        Delivery(
            **common,
            endpoint=endpoint,
            channel=DeliveryChannel.WEBHOOK,
            target=endpoint.url,
        )
        for endpoint in tenant.webhook_endpoints.all()
    ]
    if tenant.contact_emails:
        rows.append(
            Delivery(
                **common,
                channel=DeliveryChannel.EMAIL,
                target=", ".join(tenant.contact_emails),
            )
        )
    return rows
