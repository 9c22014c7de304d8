"""Publishing: the working copy, validated and compiled, stored as the next version.

Compiling lives in ``limits.rules.compiling`` and refusals in ``limits.publishing.problems``
(both re-exported here). Every version gets its announcement in the same
transaction (``limits.announcements.services``), after the notice rule
(``limits.publishing.notice``) allowed it. Publishing, rolling back and activating are
serialized by one Postgres advisory lock, so versions are consecutive and nothing is lost when two happen at once;
a publish also holds the rule tables in SHARE mode until it commits, so that it
compiles one consistent state of the working copy. See ``docs/publishing.md``
for the activation rules (active, scheduled, superseded).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from limits import models
from limits.announcements.services import announcement_create
from limits.choices import AuditAction, SnapshotKind
from limits.core.audit import Actor, audit_record
from limits.core.chain import chain_lock
from limits.core.collector import collector_paused
from limits.core.roles import require_publisher
from limits.diff.diffing import RulesDiff, rules_diff
from limits.gateways.bundle import snapshot_bundle_refresh
from limits.publishing.approval import require_no_approval
from limits.publishing.notice import notice_check, notice_days
from limits.publishing.problems import InvalidRules, NothingToPublish, problem_text
from limits.rules.compiling import (
    limit_to_snapshot,
    policy_to_snapshot,
    route_to_snapshot,
    rules_compile,
)
from limits.versions.selectors import snapshot_rules
from sluice import model as sluice_model
from sluice.model import validate_rules

__all__ = [
    "InvalidRules",
    "NothingToPublish",
    "activate_due",
    "limit_to_snapshot",
    "policy_to_snapshot",
    "problem_text",
    "publish_times",
    "publishing_lock",
    "require_publisher",
    "route_to_snapshot",
    "rules_compile",
    "snapshot_activate_due",
    "snapshot_publish",
    "snapshot_store",
    "version_in_force",
]


#: Key of the Postgres advisory lock that serializes publish, rollback and activation.
PUBLISH_LOCK = 0x5_1C_E_9B_1
#: Columns of a version that activating, superseding and re-reading it never need.
_HEAVY = ("content", "content_gzip", "diff")
_RULE_TABLES = "limits_tier, limits_tenant, limits_route, limits_policy, limits_limit"


def publishing_lock(*, rules: bool) -> None:
    """Serialize publishing in the current transaction; with ``rules``, also hold off
    rule edits until commit, so that the working copy is read as one consistent state."""
    chain_lock()  # first: the lock order of every audited write (limits.core.chain)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PUBLISH_LOCK])
        if rules:
            cursor.execute(f"LOCK TABLE {_RULE_TABLES} IN SHARE MODE")


@collector_paused()
@transaction.atomic
def snapshot_publish(
    *,
    actor: Actor,
    message: str,
    effective_at: datetime | None = None,
    note: str = "",
    emergency_reason: str = "",
) -> models.Snapshot:
    """Validate and compile the working copy and store it as the next version.

    Takes effect now, or at ``effective_at`` (in the future). ``note`` is the
    public note of its announcement; ``emergency_reason`` lets a lowering take
    effect before the notice period ends (``limits.publishing.notice``) and marks it as an
    emergency. A person may not publish this way a change that needs approval
    (``limits.publishing.approval``): that goes through a change request. Raises
    InvalidRules (nothing written), NothingToPublish, NoticePeriodTooShort,
    ApprovalRequired, ValidationError for a bad message or time,
    PermissionDenied for a role that may not publish.
    """
    require_publisher(actor)
    publishing_lock(rules=True)
    return snapshot_store(
        actor=actor,
        rules=rules_compile(),
        message=message,
        effective_at=effective_at,
        note=note,
        emergency_reason=emergency_reason,
        check=partial(require_no_approval, actor),
    )


def snapshot_store(
    *,
    actor: Actor,
    rules: sluice_model.Rules,
    message: str,
    effective_at: datetime | None = None,
    restored_version: int | None = None,
    note: str = "",
    emergency_reason: str = "",
    check: Callable[[RulesDiff], None] | None = None,
    keep_scheduled: bool = False,
    replaces: models.Snapshot | None = None,
    tell_again: bool = False,
    known_diff: RulesDiff | None = None,
) -> models.Snapshot:
    """Store ``rules`` as the next version, with its announcement; call with
    :func:`publishing_lock` held.

    ``check`` may refuse the diff once it is known (the approval rule).
    ``keep_scheduled`` leaves scheduled versions alone (a change request carries
    its edits into them instead, ``limits.changes.publishing``); ``replaces`` is
    the scheduled version this one re-issues with such a change carried in: it
    supersedes that version only, counts the notice of what that version already
    announced from when it was published, and continues its announcement
    (``tell_again``: and notifies the tenants again, as for a new time).
    ``known_diff``: the diff of ``rules`` against the version in force now, when
    the caller has it (a rules file's: 120,000 changes for a first version); it is
    used for a version that takes effect now, and computed again otherwise.
    """
    problems = validate_rules(rules)
    if problems:
        raise InvalidRules(problems)
    now = timezone.now()
    published_at, effective = publish_times(now, effective_at)
    parent = version_in_force(effective)
    unchanged = parent is not None and parent.rules_digest == rules.digest()
    if unchanged and not replaces and not _doomed(effective).exists():
        raise NothingToPublish(parent.version)  # superseding is a change
    if known_diff is not None and effective == published_at:
        diff = known_diff
    else:
        diff = rules_diff(
            snapshot_rules(parent) if parent else None, rules, at=effective
        )
    if check is not None and parent is not None:  # a first version replaces nothing
        check(diff)
    row = _snapshot_row(
        rules, parent, published_at, effective, diff=diff, message=_message(message)
    )
    emergency_reason = emergency_reason.strip()
    notice_check(
        diff=diff,
        published_at=_notice_start(diff, published_at, replaces),
        effective_at=effective,
        emergency_reason=emergency_reason,
    )
    row.kind = SnapshotKind.ROLLBACK if restored_version else SnapshotKind.PUBLISH
    row.restored_version = restored_version
    row.author, row.author_id = actor.username, getattr(actor.user, "pk", None)
    row.save()
    superseded = [] if keep_scheduled else _supersede(row, now, only=replaces)
    announced = announcement_create(
        snapshot=row,
        diff=diff,
        note=note,
        emergency_reason=emergency_reason,
        notice_days=notice_days(),
        continues=replaces.announcement if replaces else None,
        tell_again=tell_again,
    )
    audit_record(
        actor=actor,
        action=AuditAction.ROLLBACK if restored_version else AuditAction.PUBLISH,
        obj=row,
        after=_audited(row, superseded) | _announced(announced),
        reason=row.message
        + (f" [emergency: {emergency_reason}]" if emergency_reason else ""),
    )
    if row.effective_at <= published_at:
        activate_due(actor=actor, now=published_at)
        row.activated_at = published_at
    transaction.on_commit(snapshot_bundle_refresh, robust=True)
    return row


@transaction.atomic
def snapshot_activate_due(
    *, actor: Actor, now: datetime | None = None
) -> list[models.Snapshot]:
    """Activate every scheduled version whose time has come, oldest first; audited."""
    now = now or timezone.now()
    if not _due(now).exists():  # the common case, without taking the lock
        return []
    publishing_lock(rules=False)
    activated = activate_due(actor=actor, now=now)
    if activated:
        transaction.on_commit(snapshot_bundle_refresh, robust=True)
    return activated


def activate_due(*, actor: Actor, now: datetime) -> list[models.Snapshot]:
    """Mark due versions active in version order; call with the lock held."""
    # without the bytes and the diff: a first version's diff is 120,000 changes
    activated = list(_due(now).select_for_update().defer(*_HEAVY).order_by("version"))
    for row in activated:
        models.Snapshot.objects.filter(pk=row.pk).update(activated_at=now)
        row.activated_at = now
        audit_record(
            actor=actor,
            action=AuditAction.ACTIVATE,
            obj=row,
            after={"version": row.version, "activated_at": now.isoformat()},
            reason=f"effective {row.effective_at:%Y-%m-%d %H:%M:%S} UTC",
        )
    return activated


def _due(now: datetime):
    return models.Snapshot.objects.filter(
        activated_at__isnull=True, superseded_at__isnull=True, effective_at__lte=now
    )


def publish_times(
    now: datetime, effective_at: datetime | None
) -> tuple[datetime, datetime]:
    """(published at, effective at) of a publish at ``now``, in whole seconds; a
    ValidationError on ``effective_at`` when it has no zone or is not in the future."""
    published_at = now.replace(microsecond=0)
    if effective_at is None:
        return published_at, published_at
    if timezone.is_naive(effective_at):
        raise ValidationError({"effective_at": "Give a time zone (e.g. UTC, 'Z')."})
    effective = effective_at.astimezone(UTC).replace(microsecond=0)
    if effective <= published_at:
        raise ValidationError(
            {
                "effective_at": "The effective time must be in the future; "
                "leave it empty to publish now."
            }
        )
    return published_at, effective


def _message(message: str) -> str:
    if not message.strip():
        raise ValidationError({"message": "Say what this version changes and why."})
    return message.strip()


def version_in_force(effective: datetime) -> models.Snapshot | None:
    """The version in force just before ``effective``: the one the new version replaces.

    Active or past versions, and scheduled ones that take effect earlier; a
    scheduled version taking effect at the same time or later is superseded.
    """
    return (
        models.Snapshot.objects.filter(
            Q(activated_at__isnull=False)
            | Q(superseded_at__isnull=True, effective_at__lt=effective)
        )
        .defer("content_gzip", "diff")
        .order_by("-version")
        .first()
    )


def _snapshot_row(rules, parent, published_at, effective, *, diff, message):
    latest = models.Snapshot.objects.aggregate(top=Max("version"))["top"] or 0
    document = sluice_model.Snapshot.build(
        version=latest + 1,
        parent=parent.version if parent else None,
        published_at=published_at,
        effective_at=effective,
        rules=rules,
    )
    content = document.to_bytes()
    return models.Snapshot(
        version=document.version,
        parent_version=document.parent,
        hash=document.hash,
        rules_digest=rules.digest(),
        content=content,
        content_gzip=gzip.compress(content, mtime=0),  # mtime 0: same bytes, same gzip
        message=message,
        published_at=published_at,
        effective_at=effective,
        diff=diff.to_json(),
    )


def _notice_start(
    diff: RulesDiff, published_at: datetime, replaces: models.Snapshot | None
) -> datetime:
    """When the notice of ``diff``'s lowerings started: at publishing, or, for a
    re-issue that lowers nothing its original did not, when the original's notice
    started (through every re-issue before it, back to the first announcement)."""
    while replaces is not None:
        announced = set(RulesDiff.from_json(replaces.diff).lowered())
        if not set(diff.lowered()) <= announced:
            return published_at
        diff, published_at = RulesDiff.from_json(replaces.diff), replaces.published_at
        replaces = _reissued(replaces)
    return published_at


def _reissued(row: models.Snapshot) -> models.Snapshot | None:
    """The version ``row`` re-issued (carried on), if any: the one of the same
    announcement chain it superseded."""
    first = getattr(row, "announcement", None)
    if first is None:
        return None
    root = first.carries_id
    if root is None:
        return None
    return (
        models.Snapshot.objects.filter(superseded_by=row.version)
        .filter(Q(announcement__pk=root) | Q(announcement__carries_id=root))
        .defer("content", "content_gzip")
        .first()
    )


def _supersede(
    row: models.Snapshot, now: datetime, *, only: models.Snapshot | None = None
) -> list[int]:
    """Scheduled versions that would take effect no sooner than ``row`` never will
    (with ``only``: that one version, which ``row`` re-issues)."""
    doomed = _doomed(row.effective_at).filter(version__lt=row.version)
    if only is not None:
        doomed = doomed.filter(pk=only.pk)
    versions = sorted(doomed.values_list("version", flat=True))
    doomed.update(superseded_at=now, superseded_by=row.version)
    return versions


def _doomed(effective: datetime):
    return models.Snapshot.objects.filter(
        activated_at__isnull=True,
        superseded_at__isnull=True,
        effective_at__gte=effective,
    )


def _audited(row: models.Snapshot, superseded: list[int]) -> dict:
    return {
        "version": row.version,
        "parent_version": row.parent_version,
        "kind": row.kind,
        "restored_version": row.restored_version,
        "hash": row.hash,
        "published_at": row.published_at.isoformat(),
        "effective_at": row.effective_at.isoformat(),
        "superseded": superseded,
        "changes": row.diff["counts"],
    }


def _announced(announcement: models.Announcement) -> dict:
    return {
        "emergency": announcement.is_emergency,
        "emergency_reason": announcement.emergency_reason,
        "note": announcement.note,
        "notice_days": announcement.notice_days,
    }
