"""Rollback: publish an earlier version's content again, as a new version.

History is never rewritten: rolling back to version 7 publishes version N+1
whose rules are version 7's. The working copy (the rule tables) is restored to
those rules in the same transaction, every row it changes audited with the
rollback as reason, so that the next publish starts from what gateways enforce
and does not quietly undo the rollback. Unpublished edits in the working copy
are replaced; the admin's confirmation page lists them first.

The restore itself is ``limits.rules.restore``.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction

from limits import models
from limits.core.audit import Actor
from limits.publishing.services import (
    publishing_lock,
    require_publisher,
    snapshot_store,
)
from limits.rules.compiling import rules_compile
from limits.rules.restore import working_copy_restore
from limits.versions.selectors import snapshot_rules

__all__ = ["snapshot_rollback"]


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
