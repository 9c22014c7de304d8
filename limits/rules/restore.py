"""Make the rule tables hold exactly a given rule set (a rollback restores an old version).

Rows are written directly rather than through ``limits.rules.services`` because
the intermediate states of a restore need not be valid one object at a time (a
route's cost may only fit once its policies are restored); the whole rule set is
validated once, by the publish that follows, inside the same transaction. Every
row it changes goes through the one audited write.
"""

from __future__ import annotations

from limits import models
from limits.core.audit import (
    Actor,
    audited_delete,
    audited_save,
    serialize_for_audit,
)
from limits.rules.claims import route_claims_checked
from limits.rules.compiling import (
    limit_rows_from_snapshot,
    policy_to_snapshot,
    route_to_snapshot,
)
from sluice import model as sluice_model

__all__ = ["working_copy_restore"]


def working_copy_restore(
    *, rules: sluice_model.Rules, actor: Actor, reason: str
) -> None:
    """Make the rule tables hold exactly ``rules``; audit every row changed.

    Creates and updates parents before children, deletes children before
    parents. Fields a snapshot does not carry (names of tenants, descriptions,
    reasons) are kept on existing rows. A route written meanwhile that claims a
    restored route's method and path: RouteClaimed, nothing restored.
    """
    with route_claims_checked():  # checked once the old routes are gone
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
            row.max_cost = route.max_cost
            row.failure_mode = route.failure_mode.value
            _save(row, before, actor, reason)
            rows[slug] = row
    return rows


def _restore_tenants(rules, tiers, actor, reason) -> dict[str, models.Tenant]:
    rows = {t.slug: t for t in models.Tenant.objects.select_related("tier")}
    for slug, tier in rules.tenants.items():
        row = rows.get(slug) or models.Tenant(slug=slug, name=slug)
        calendar = rules.calendar(slug)
        if (
            row.pk is None
            or row.tier.slug != tier
            or (row.time_zone, row.billing_day) != (calendar.zone, calendar.billing_day)
        ):
            before = _before(row)
            row.tier = tiers[tier]
            row.time_zone, row.billing_day = calendar.zone, calendar.billing_day
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
        tier=tiers[subject]
        if wanted.scope_kind == sluice_model.ScopeKind.TIER
        else None,
        tenant=tenants[subject]
        if wanted.scope_kind == sluice_model.ScopeKind.TENANT
        else None,
        route=None if wanted.route == sluice_model.ALL_ROUTES else routes[wanted.route],
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
