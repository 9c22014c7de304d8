"""Rollback: publish an earlier version's content again, as a new version.

History is never rewritten: rolling back to version 7 publishes version N+1
whose rules are version 7's. The working copy (the rule tables) is restored to
those rules in the same transaction, every row it changes audited with the
rollback as reason, so that the next publish starts from what gateways enforce
and does not quietly undo the rollback. Unpublished edits in the working copy
are replaced; the admin's confirmation page lists them first.

Rows are written directly rather than through ``limits.rules`` because the
intermediate states of a restore need not be valid one object at a time (a
route's cost may only fit once its policies are restored); the whole rule set
is validated once, by the publish that follows, inside the same transaction.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction

from limits import models
from limits.compiling import (
    limit_rows_from_snapshot,
    policy_to_snapshot,
    route_to_snapshot,
    rules_compile,
)
from limits.core.audit import (
    Actor,
    audited_delete,
    audited_save,
    serialize_for_audit,
)
from limits.publishing import publishing_lock, require_publisher, snapshot_store
from limits.selectors import snapshot_rules
from sluice import snapshot

__all__ = ["snapshot_rollback", "working_copy_restore"]


@transaction.atomic
def snapshot_rollback(
    *,
    actor: Actor,
    version: int,
    message: str,
    effective_at: datetime | None = None,
    note: str = "",
    emergency_reason: str = "",
) -> models.Snapshot:
    """Publish version ``version``'s rules as the next version; audited.

    Effective now unless ``effective_at`` is given. A rollback is a publish for
    the notice rule: if it lowers anyone's limits it needs an emergency reason,
    or an effective time after the notice period. Raises ValidationError for an
    unknown version, NothingToPublish when the active version already has those
    rules, NoticePeriodTooShort, PermissionDenied for other roles.
    """
    require_publisher(actor)
    publishing_lock(rules=True)
    target = models.Snapshot.objects.filter(version=version).first()
    if target is None:
        raise ValidationError({"version": f"There is no version {version}."})
    rules = snapshot_rules(target)
    working_copy_restore(
        rules=rules, actor=actor, reason=f"rollback to version {version}: {message}"
    )
    compiled = rules_compile()
    if compiled.digest() != rules.digest():  # the restore must be exact
        raise RuntimeError(f"restoring version {version} left a different working copy")
    return snapshot_store(
        actor=actor,
        rules=compiled,
        message=message,
        restored_version=version,
        effective_at=effective_at,
        note=note,
        emergency_reason=emergency_reason,
    )


def working_copy_restore(*, rules: snapshot.Rules, actor: Actor, reason: str) -> None:
    """Make the rule tables hold exactly ``rules``; audit every row changed.

    Creates and updates parents before children, deletes children before
    parents. Fields a snapshot does not carry (names of tenants, descriptions,
    reasons) are kept on existing rows.
    """
    tiers = _restore_tiers(rules, actor, reason)
    routes = _restore_routes(rules, actor, reason)
    tenants = _restore_tenants(rules, tiers, actor, reason)
    _restore_policies(rules, tiers, tenants, routes, actor, reason)
    for model, keep in (
        (models.Tenant, rules.tenants),
        (models.Route, rules.routes),
        (models.Tier, rules.tiers),
    ):
        for row in model.objects.exclude(slug__in=list(keep)):
            _delete(row, actor, reason)


def _restore_tiers(rules, actor, reason) -> dict[str, models.Tier]:
    rows = {tier.slug: tier for tier in models.Tier.objects.all()}
    for slug, name in rules.tiers.items():
        row = rows.get(slug) or models.Tier(slug=slug)
        if row.pk is None or row.name != name:
            before = _before(row)
            row.name = name
            _save(row, before, actor, reason)
            rows[slug] = row
    return rows


def _restore_routes(rules, actor, reason) -> dict[str, models.Route]:
    rows = {route.slug: route for route in models.Route.objects.all()}
    for slug, route in rules.routes.items():
        row = rows.get(slug) or models.Route(slug=slug)
        if row.pk is None or route_to_snapshot(row) != route:
            before = _before(row)
            row.methods = list(route.methods)
            row.path_pattern = route.path
            row.cost = route.cost
            row.failure_mode = route.failure_mode.value
            _save(row, before, actor, reason)
            rows[slug] = row
    return rows


def _restore_tenants(rules, tiers, actor, reason) -> dict[str, models.Tenant]:
    rows = {t.slug: t for t in models.Tenant.objects.select_related("tier")}
    for slug, tier in rules.tenants.items():
        row = rows.get(slug) or models.Tenant(slug=slug, name=slug)
        if row.pk is None or row.tier.slug != tier:
            before = _before(row)
            row.tier = tiers[tier]
            _save(row, before, actor, reason)
            rows[slug] = row
    return rows


def _restore_policies(rules, tiers, tenants, routes, actor, reason) -> None:
    rows = {
        policy_to_snapshot(row).key: row
        for row in models.Policy.objects.select_related(
            "tier", "tenant", "route"
        ).prefetch_related("limits")
    }
    for wanted in rules.policies:
        row = rows.pop(wanted.key, None)
        if row is not None and policy_to_snapshot(row).to_json() == wanted.to_json():
            continue
        row = row or _new_policy(wanted, tiers, tenants, routes, reason)
        before = _before(row)
        row.expires_at = wanted.expires_at
        _save(row, before, actor, reason, limits=wanted)
    for row in rows.values():
        _delete(row, actor, reason)


def _new_policy(wanted, tiers, tenants, routes, reason) -> models.Policy:
    subject = wanted.subject
    return models.Policy(
        scope=wanted.scope_kind.value,
        tier=tiers[subject] if wanted.scope_kind == snapshot.ScopeKind.TIER else None,
        tenant=tenants[subject]
        if wanted.scope_kind == snapshot.ScopeKind.TENANT
        else None,
        route=None if wanted.route == snapshot.ALL_ROUTES else routes[wanted.route],
        reason=f"Restored by {reason}",
    )


def _before(row) -> dict | None:
    return serialize_for_audit(row) if row.pk else None


def _save(row, before, actor, reason, *, limits=None) -> None:
    def write() -> None:
        row.save()
        if limits is not None:
            row.limits.all().delete()
            models.Limit.objects.bulk_create(limit_rows_from_snapshot(row, limits))

    audited_save(row, actor=actor, before=before, reason=reason, write=write)


def _delete(row, actor, reason) -> None:
    audited_delete(row, actor=actor, before=serialize_for_audit(row), reason=reason)
