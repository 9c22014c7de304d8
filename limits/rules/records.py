"""Write documents into the rule tables: what publishing a change request does to
the working copy, so the tables keep holding everything that was published.

Like the restore a rollback runs (``limits.rules.restore``), rows are written
directly rather than one validated object at a time: the whole rule set was
validated by the publish in the same transaction. Every row goes through the one
audited write. Parents are created before children and removed after them.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.db import models as db
from django.db import transaction

from limits import models
from limits.core.audit import Actor, audited_delete, audited_save, serialize_for_audit
from limits.rules.compiling import limit_rows_from_snapshot
from limits.rules.documents import Edit, parse_time, policy_row, policy_value
from sluice import snapshot

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
    for edit in saves:
        _save(edit, actor, reason)
    for edit in removals:
        _remove(edit, actor, reason)


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
    elif edit.subject == "route":
        row.description = doc.get("description", "")
        row.methods, row.path_pattern = sorted(doc["methods"]), doc["path"]
        row.cost, row.failure_mode = doc["cost"], doc["failure_mode"]
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
        if route == snapshot.ALL_ROUTES
        else models.Route.objects.get(slug=route),
    )


def _save_policy(row, value: snapshot.Policy, before, actor, reason) -> None:
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
