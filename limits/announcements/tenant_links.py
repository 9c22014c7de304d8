"""Private changelog links: a tenant's own limits and the changes coming its way.

A link carries a token signed with Django's signing framework (``Signer``,
salt ``sluice.changelog-link``) over the tenant's id and the nonce of its
:class:`~limits.models.TenantLink`. Forged or altered tokens fail the signature
without a query; rotating draws a new nonce (old links stop working) and
revoking disables the row. Changing SECRET_KEY invalidates every link (list the
old key in SECRET_KEY_FALLBACKS to keep them through a key rotation).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from limits.announcements.changelog import (
    ChangelogEntry,
    entry_of,
    tenant_changes,
    tiers_of,
)
from limits.announcements.estimates import tenant_estimate
from limits.announcements.webhooks import require_manager
from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.core.chain import chain_lock
from limits.diff.diffing import RulesDiff
from limits.models import Announcement, Tenant, TenantLink
from limits.quotas.usage import TenantQuotas, tenant_quotas
from limits.traffic.impacts import scheduled_impact
from limits.versions.explain import EffectiveLimit, effective_limits
from limits.versions.selectors import snapshot_get_active

__all__ = [
    "TenantOverview",
    "tenant_link_issue",
    "tenant_link_path",
    "tenant_link_resolve",
    "tenant_link_revoke",
    "tenant_link_url",
    "tenant_overview",
]

_SALT = "sluice.changelog-link"


def _signer() -> signing.Signer:
    return signing.Signer(salt=_SALT)


def tenant_link_path(link: TenantLink) -> str:
    """The private page's path for ``link`` (signed again: the token is never stored)."""
    token = _signer().sign_object({"t": link.tenant_id, "n": link.nonce})
    return reverse("changelog:tenant", args=[token])


@transaction.atomic
def tenant_link_issue(*, tenant: Tenant, actor: Actor) -> str:
    """Issue the tenant's link, or rotate it (earlier links stop working); audited.
    Return the new path."""
    require_manager(actor)
    chain_lock()  # before the link's row lock (limits.core.chain: lock order)
    link, created = TenantLink.objects.select_for_update().get_or_create(
        tenant=tenant, defaults={"nonce": secrets.token_urlsafe(24)}
    )
    if not created:
        link.nonce, link.issued_at = secrets.token_urlsafe(24), timezone.now()
        link.revoked_at = None
        link.save()
    audit_record(
        actor=actor,
        action=AuditAction.TOKEN_CREATE,
        obj=link,
        after={"tenant": tenant.slug},
        reason="private changelog link " + ("issued" if created else "rotated"),
    )
    return tenant_link_path(link)


@transaction.atomic
def tenant_link_revoke(*, tenant: Tenant, actor: Actor) -> None:
    """Disable the tenant's link; audited. Revoking twice changes nothing."""
    require_manager(actor)
    chain_lock()  # before the link's row lock (limits.core.chain: lock order)
    link = TenantLink.objects.select_for_update().filter(tenant=tenant).first()
    if link is None or not link.is_active:
        return
    link.revoked_at = timezone.now()
    link.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor,
        action=AuditAction.TOKEN_REVOKE,
        obj=link,
        before={"tenant": tenant.slug},
        reason="private changelog link revoked",
    )


def tenant_link_url(*, tenant: Tenant) -> str | None:
    """The full URL of the tenant's private page, for a reminder: its active link, or
    one issued now by the system (audited) when it never had one; None when its link
    was revoked (a manager's decision a reminder does not undo)."""
    link = TenantLink.objects.filter(tenant=tenant).first()
    if link is None:
        link = TenantLink.objects.create(tenant=tenant, nonce=secrets.token_urlsafe(24))
        audit_record(
            actor=Actor.system(),
            action=AuditAction.TOKEN_CREATE,
            obj=link,
            after={"tenant": tenant.slug},
            reason="private changelog link issued for a reminder",
        )
    if not link.is_active:
        return None
    return settings.SLUICE_PUBLIC_URL.rstrip("/") + tenant_link_path(link)


def tenant_link_resolve(token: str) -> Tenant | None:
    """The tenant a token is for, or None: bad signature, rotated or revoked link."""
    try:
        data = _signer().unsign_object(token)
    except (signing.BadSignature, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("t"), int):
        return None
    link = (
        TenantLink.objects.select_related("tenant")
        .filter(tenant_id=data["t"], revoked_at__isnull=True)
        .first()
    )
    if link is None or not hmac.compare_digest(link.nonce, str(data.get("n"))):
        return None
    return link.tenant


@dataclass(frozen=True)
class TenantOverview:
    """What a tenant's private page shows."""

    tenant: Tenant
    version: int | None  #: the version gateways enforce; None before the first publish
    limits: list[EffectiveLimit]  #: per route, resolved on that version
    upcoming: list[ChangelogEntry]  #: scheduled versions that change its limits
    #: version -> what it would have rejected of the tenant's recent traffic (None: nothing)
    estimates: dict[int, dict | None]
    quotas: TenantQuotas  #: its calendar quotas, and how much of each it used


def tenant_overview(*, tenant: Tenant) -> TenantOverview:
    """The tenant's current limits per route (the gateways' resolver on the active
    version) and the upcoming changes that reach it, soonest first, with what each
    lowering would have rejected of its recent traffic."""
    active = snapshot_get_active(light=True)
    version = active.version if active else None
    limits = effective_limits(tenant=tenant, source="active") if active else []
    upcoming, estimates = [], {}
    scheduled = Announcement.objects.select_related("snapshot").filter(
        snapshot__activated_at__isnull=True, snapshot__superseded_at__isnull=True
    )
    for announcement in scheduled.order_by("snapshot__effective_at"):
        snapshot = announcement.snapshot
        diff = RulesDiff.from_json(snapshot.diff)
        if tenant.slug not in diff.affected_tenants:
            continue
        old, new = tiers_of(snapshot)
        tiers = {t for t in (old.get(tenant.slug), new.get(tenant.slug)) if t}
        changes = tenant_changes(diff, tenant=tenant.slug, tiers=tiers)
        upcoming.append(entry_of(announcement, version, changes))
        if announcement.lowers:
            estimates[snapshot.version] = tenant_estimate(
                scheduled_impact(snapshot), tenant.slug
            )
    quotas = tenant_quotas(tenant=tenant.slug)
    return TenantOverview(tenant, version, limits, upcoming, estimates, quotas)
