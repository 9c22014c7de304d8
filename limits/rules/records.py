"""Write documents into the rule tables: what publishing a change request does to
the working copy, so the tables keep holding everything that was published.

Like the restore a rollback runs (``limits.rules.restore``), rows are written
directly rather than one validated object at a time: the whole rule set was
validated by the publish in the same transaction. Parents are created before
children and removed after them.

Objects that did not exist are created with bulk statements, a few thousand rows
at a time, and get no audit entry of their own: the change request's entry
(``limits.changes.services``: its edits' digest, and the edits it stores) says
what each one was created with. An object that existed goes through the one
audited write, so its entry holds what it was before and what it is now.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

from django.core.exceptions import ValidationError
from django.db import models as db
from django.db import transaction
from django.utils import timezone

from limits import models
from limits.core.audit import Actor, audited_delete, audited_save, serialize_for_audit
from limits.core.bulk import rows_copy
from limits.rules.claims import route_claims_checked
from limits.rules.compiling import limit_rows_from_snapshot
from limits.rules.documents import (
    Edit,
    parse_time,
    policy_reasons,
    policy_row,
    policy_value,
    tenant_calendar,
)
from sluice import model as sluice_model

__all__ = ["documents_write"]

_MODELS = {"tier": models.Tier, "tenant": models.Tenant, "route": models.Route}


def documents_write(*, edits: Sequence[Edit], actor: Actor, reason: str) -> None:
    """Make the rule tables hold each edit's ``after`` (or lose the object); audited.

    A removal that the tables still need elsewhere (a tenant one of their policies
    names) raises ValidationError naming what uses it.
    """
    order = {"tier": 0, "route": 1, "tenant": 2, "policy": 3}
    saves = sorted((e for e in edits if not e.removes), key=lambda e: order[e.subject])
    removals = sorted((e for e in edits if e.removes), key=lambda e: -order[e.subject])
    with route_claims_checked():  # routes written meanwhile: RouteClaimed, a 409
        for subject, group in itertools.groupby(saves, key=lambda e: e.subject):
            new: list[Edit] = []
            changed: list[Edit] = []
            for edit in group:
                (changed if edit.before is not None else new).append(edit)
            held = _held(
                subject, [e.key for e in new]
            )  # unpublished rows of the tables
            _create(subject, [e for e in new if e.key not in held])
            for edit in changed + [e for e in new if e.key in held]:
                _save(edit, actor, reason)
        for edit in removals:
            _remove(edit, actor, reason)


#: Rows written per bulk statement.
BATCH = 5000


def _create(subject: str, edits: list[Edit]) -> None:
    """Insert the rows of objects the tables do not hold yet, in batches."""
    edits_ = iter(edits)
    while batch := list(itertools.islice(edits_, BATCH)):
        if subject == "policy":
            _create_policies(batch)
            continue
        if subject == "tenant":
            _copy_tenants(batch)
            continue
        model = _MODELS[subject]
        model.objects.bulk_create(
            _row(model(slug=edit.key), edit.after or {}) for edit in batch
        )


def _held(subject: str, keys: list[str]) -> set[str]:
    """Which of ``keys`` the tables hold already."""
    if not keys:
        return set()
    if subject != "policy":
        return set(_ids(_MODELS[subject], keys))
    return policy_reasons().keys() & set(keys)


def _ids(model, slugs: Iterable[str]) -> dict[str, int]:
    wanted = set(slugs)
    if not wanted:
        return {}
    rows = model.objects.filter(slug__in=wanted).values_list("slug", "pk")
    return dict(rows)


def _copy_tenants(batch: list[Edit]) -> None:
    """Tenants are most of a large rule set: COPY, not a model instance per row."""
    tiers = _ids(models.Tier, (e.after["tier"] for e in batch if e.after))
    now = timezone.now()
    rows_copy(
        models.Tenant,
        (
            "slug",
            "name",
            "tier",
            "contact_emails",
            "time_zone",
            "billing_day",
            "created_at",
            "updated_at",
            "revision",
        ),
        (
            (
                e.key,
                doc["name"],
                tiers[doc["tier"]],
                list(doc.get("contacts", [])),
                (calendar := tenant_calendar(doc)).zone,
                calendar.billing_day,
                now,
                now,
                1,
            )
            for e in batch
            if (doc := e.after)
        ),
    )


def _row(row, doc: dict):
    """``row`` (a tier or a route) with the members of ``doc``."""
    if isinstance(row, models.Tier):
        row.name, row.description = doc["name"], doc.get("description", "")
        row.position = doc.get("position", 0)
    else:
        row.description = doc.get("description", "")
        row.methods, row.path_pattern = sorted(doc["methods"]), doc["path"]
        row.cost, row.failure_mode = doc["cost"], doc["failure_mode"]
        row.max_cost = doc.get("max_cost")
    return row


def _create_policies(batch: list[Edit]) -> None:
    scopes = [e.after["scope"].partition(":") for e in batch if e.after]
    tiers = _ids(models.Tier, (s for kind, _, s in scopes if kind == "tier"))
    tenants = _ids(models.Tenant, (s for kind, _, s in scopes if kind == "tenant"))
    routes = _ids(models.Route, (e.after["route"] for e in batch if e.after))
    rows, values = [], []
    for edit in batch:
        doc = edit.after or {}
        kind, _, subject = doc["scope"].partition(":")
        expires = doc.get("expires_at")
        rows.append(
            models.Policy(
                scope=kind,
                tier_id=tiers[subject] if kind == "tier" else None,
                tenant_id=tenants[subject] if kind == "tenant" else None,
                route_id=routes.get(doc["route"]),  # None: all routes
                reason=doc.get("reason", ""),
                expires_at=parse_time(expires) if expires else None,
            )
        )
        values.append(policy_value(doc))
    models.Policy.objects.bulk_create(rows)  # Postgres returns the new ids
    models.Limit.objects.bulk_create(_limit_rows(rows, values))


def _limit_rows(rows, values) -> Iterator[models.Limit]:
    for row, value in zip(rows, values, strict=True):
        yield from limit_rows_from_snapshot(row, value)


def _save(edit: Edit, actor: Actor, reason: str) -> None:
    doc = edit.after or {}
    if edit.subject == "policy":
        row = policy_row(edit.key) or _new_policy(doc)
    else:
        model = _MODELS[edit.subject]
        row = model.objects.filter(slug=edit.key).first() or model(slug=edit.key)
    before = serialize_for_audit(row) if row.pk else None
    if edit.subject == "tier":
        row.name, row.description = doc["name"], doc.get("description", "")
        row.position = doc.get("position", 0)
    elif edit.subject == "tenant":
        row.name, row.tier = doc["name"], models.Tier.objects.get(slug=doc["tier"])
        row.contact_emails = list(doc.get("contacts", []))
        calendar = tenant_calendar(doc)
        row.time_zone, row.billing_day = calendar.zone, calendar.billing_day
    elif edit.subject == "route":
        row.description = doc.get("description", "")
        row.methods, row.path_pattern = sorted(doc["methods"]), doc["path"]
        row.cost, row.failure_mode = doc["cost"], doc["failure_mode"]
        row.max_cost = doc.get("max_cost")
    else:
        row.reason = doc.get("reason", "")
        expires = doc.get("expires_at")
        row.expires_at = parse_time(expires) if expires else None
        return _save_policy(row, policy_value(doc), before, actor, reason)
    audited_save(row, actor=actor, before=before, reason=reason)


def _new_policy(doc: dict) -> models.Policy:
    kind, _, subject = doc["scope"].partition(":")
    route = doc["route"]
    return models.Policy(
        scope=kind,
        tier=models.Tier.objects.get(slug=subject) if kind == "tier" else None,
        tenant=models.Tenant.objects.get(slug=subject) if kind == "tenant" else None,
        route=None
        if route == sluice_model.ALL_ROUTES
        else models.Route.objects.get(slug=route),
    )


def _save_policy(row, value: sluice_model.Policy, before, actor, reason) -> None:
    def write() -> None:
        row.save()
        row.limits.all().delete()
        models.Limit.objects.bulk_create(limit_rows_from_snapshot(row, value))

    audited_save(row, actor=actor, before=before, reason=reason, write=write)


def _remove(edit: Edit, actor: Actor, reason: str) -> None:
    if edit.subject == "policy":
        row = policy_row(edit.key)
    else:
        row = _MODELS[edit.subject].objects.filter(slug=edit.key).first()
    if row is None:  # the working copy had lost it already
        return
    shown = str(row)
    try:
        with transaction.atomic():
            audited_delete(
                row, actor=actor, before=serialize_for_audit(row), reason=reason
            )
    except db.ProtectedError as exc:
        users = ", ".join(sorted(str(o) for o in list(exc.protected_objects)[:5]))
        raise ValidationError(
            f"{shown} cannot be removed from the rule tables: still used by {users}."
        ) from None
