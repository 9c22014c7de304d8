"""Scheduled versions: cancel one, or move it to another time, before it takes effect.

Both run under the publishing lock and are audited. A version is never rewritten
(``limits.models.Snapshot``): cancelling sets its ``superseded_at`` with no
``superseded_by`` (the changelog says "cancelled", once); moving it re-issues
the same rules as the next version at the new time, which carries on its
announcement (``Announcement.carries``: one changelog entry) and tells the
tenants it reaches the new date.

A version another scheduled version was built on (its ``parent_version``) can
be neither cancelled nor moved: the later one holds its changes too.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from limits import models
from limits.announcements.services import announcement_cancel
from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.publishing.services import (
    publish_times,
    publishing_lock,
    require_publisher,
    snapshot_store,
)
from limits.rules.documents import documents_of_rules, documents_of_tables, rules_value
from limits.rules.records import documents_write
from limits.versions.selectors import snapshot_rules

__all__ = ["snapshot_cancel", "snapshot_reschedule"]


def _scheduled(version: int) -> models.Snapshot:
    """The scheduled version ``version``, locked; refused when it cannot change."""
    row = models.Snapshot.objects.select_for_update().filter(version=version).first()
    if row is None:
        raise ValidationError({"version": f"There is no version {version}."})
    if row.activated_at or row.superseded_at:
        raise ValidationError(
            {"version": f"Version {version} took effect or was cancelled already."}
        )
    built_on = models.Snapshot.objects.filter(
        parent_version=version, activated_at__isnull=True, superseded_at__isnull=True
    ).values_list("version", flat=True)
    if built_on:
        later = ", ".join(str(v) for v in built_on)
        raise ValidationError(
            {
                "version": f"Scheduled version(s) {later} build on version {version}: "
                "cancel those first."
            }
        )
    return row


def _reason(reason: str) -> str:
    if not reason.strip():
        raise ValidationError({"reason": "Say why, for the audit log."})
    return reason.strip()


@transaction.atomic
def snapshot_cancel(
    *, actor: Actor, version: int, reason: str, note: str = ""
) -> models.Snapshot:
    """Cancel the scheduled version ``version``: it never takes effect.

    ``reason`` goes to the audit log, ``note`` (public) to the changelog and to
    the tenants that were told of the version. The working copy gives back what
    the version changed, where it still holds it, so that the next publish does
    not bring it back. Raises ValidationError, PermissionDenied.
    """
    require_publisher(actor)
    reason = _reason(reason)
    publishing_lock(rules=True)
    row = _scheduled(version)
    now = timezone.now()
    models.Snapshot.objects.filter(pk=row.pk).update(superseded_at=now)
    row.superseded_at = now
    _working_copy_undo(row, actor, f"version {version} cancelled: {reason}")
    announcement_cancel(announcement=row.announcement, note=note)
    audit_record(
        actor=actor,
        action=AuditAction.CANCEL,
        obj=row,
        before={"effective_at": row.effective_at.isoformat()},
        after={"superseded_at": now.isoformat(), "note": note.strip()},
        reason=reason,
    )
    return row


def _working_copy_undo(row: models.Snapshot, actor: Actor, reason: str) -> None:
    """Put back, in the rule tables, each object ``row`` changed and they still hold
    as ``row`` has it (later edits to it are kept)."""
    parent = models.Snapshot.objects.filter(version=row.parent_version).first()
    if parent is None:
        return
    mine = documents_of_rules(snapshot_rules(row))
    tables = documents_of_tables()
    undo = [
        edit
        for edit in mine.edits_to(documents_of_rules(snapshot_rules(parent)))
        if rules_value(edit.subject, tables.of(edit.subject).get(edit.key), edit.key)
        == rules_value(edit.subject, edit.before, edit.key)
    ]
    documents_write(edits=undo, actor=actor, reason=reason)


@transaction.atomic
def snapshot_reschedule(
    *, actor: Actor, version: int, effective_at: datetime, reason: str
) -> models.Snapshot:
    """Move the scheduled version ``version`` to ``effective_at``: the same rules as
    the next version, taking effect then, with the same announcement and note.

    The notice of its lowerings still counts from when they were first
    published. No other scheduled version may lie between the two times (the
    order of versions would change). Returns the new version.
    """
    require_publisher(actor)
    reason = _reason(reason)
    publishing_lock(rules=True)
    row = _scheduled(version)
    _, effective = publish_times(timezone.now(), effective_at)
    low, high = sorted((row.effective_at, effective))
    between = models.Snapshot.objects.filter(
        ~Q(pk=row.pk),
        activated_at__isnull=True,
        superseded_at__isnull=True,
        effective_at__range=(low, high),
    ).values_list("version", flat=True)
    if between:
        raise ValidationError(
            {
                "effective_at": f"Version(s) {', '.join(map(str, between))} take effect "
                "between the two times: move or cancel those first."
            }
        )
    following = (models.Snapshot.objects.aggregate(top=Max("version"))["top"] or 0) + 1
    now = timezone.now()
    models.Snapshot.objects.filter(pk=row.pk).update(
        superseded_at=now, superseded_by=following
    )
    announcement = row.announcement
    moved = snapshot_store(
        actor=actor,
        rules=snapshot_rules(row),
        message=row.message,
        effective_at=effective,
        note=announcement.note,
        emergency_reason=announcement.emergency_reason,
        keep_scheduled=True,
        replaces=row,
        tell_again=True,
    )
    audit_record(
        actor=actor,
        action=AuditAction.RESCHEDULE,
        obj=row,
        before={"effective_at": row.effective_at.isoformat()},
        after={"effective_at": moved.effective_at.isoformat(), "as": moved.version},
        reason=reason,
    )
    return moved
