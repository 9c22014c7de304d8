"""The changelog: each version's changes in the diff's own words, filtered by audience.

Nothing here formats a change: entries carry the ``text``, ``kind`` and
``direction`` of the stored diff (``limits.diff.diffing``). What differs is who may
read which change:

* **public** (:func:`public_changes`): tier, route, tier-policy and
  default-policy changes, with the tiers they reach; never a tenant added,
  moved or removed, never a tenant policy or override, never a tenant's name;
* **one tenant** (:func:`tenant_changes`): every change that reaches it,
  including its own policies and overrides, and nobody else's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from limits.diff.changes import Change
from limits.diff.diffing import RulesDiff
from limits.models import Announcement, Snapshot
from limits.models.snapshots import SnapshotStatus
from limits.versions.selectors import (
    snapshot_active_version,
    snapshot_rules,
)

__all__ = [
    "ChangelogEntry",
    "changelog_entries",
    "changelog_entry",
    "entry_of",
    "public_changes",
    "tenant_changes",
]

_PUBLIC_SUBJECTS = {"tier", "route"}
_HEAVY = ("snapshot__content", "snapshot__content_gzip", "snapshot__diff")


def _shown(change: Change) -> dict:
    """A change as customers see it: words and classification, tiers but no tenants."""
    return {
        "subject": change.subject,
        "kind": change.kind.value,
        "direction": change.direction.value if change.direction else None,
        "lowers": change.lowers,
        "text": change.text,
        "tiers": list(change.affected.tiers),
        "anonymous": change.affected.anonymous,
    }


def _is_public(change: Change) -> bool:
    if change.subject in _PUBLIC_SUBJECTS:
        return True
    return change.subject == "policy" and not change.key.startswith("tenant:")


def public_changes(diff: RulesDiff) -> list[dict]:
    """The changes of ``diff`` that anyone may read, in the form customers get."""
    return [_shown(change) for change in diff.changes if _is_public(change)]


def tenant_changes(diff: RulesDiff, *, tenant: str, tiers: set[str]) -> list[dict]:
    """The changes of ``diff`` that reach ``tenant``, on ``tiers`` before or after."""
    return [_shown(c) for c in diff.changes if c.affected.reaches(tenant, tiers)]


def tiers_of(snapshot: Snapshot) -> tuple[dict[str, str], dict[str, str]]:
    """Tenant -> tier in the version's parent and in the version itself."""
    new = snapshot_rules(snapshot).tenants
    parent = Snapshot.objects.filter(version=snapshot.parent_version).first()
    return (snapshot_rules(parent).tenants if parent else {}), new


@dataclass(frozen=True)
class ChangelogEntry:
    """One version as customers read it."""

    version: int
    published_at: datetime
    effective_at: datetime
    status: str  #: upcoming, in effect, past or cancelled
    emergency: bool
    note: str
    changes: list[dict]
    replaced_by: int | None = None  #: for a cancelled version: the one that replaced it

    @property
    def lowers(self) -> bool:
        return any(change["lowers"] for change in self.changes)

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "published_at": self.published_at.isoformat(),
            "effective_at": self.effective_at.isoformat(),
            "status": self.status,
            "emergency": self.emergency,
            "note": self.note,
            "lowers": self.lowers,
            "changes": self.changes,
            "replaced_by": self.replaced_by,
        }


#: How customers read a version's status.
_PUBLIC_STATUS = {
    SnapshotStatus.ACTIVE: "in effect",
    SnapshotStatus.PAST: "past",
    SnapshotStatus.SCHEDULED: "upcoming",
    SnapshotStatus.SUPERSEDED: "cancelled",
}


def status_of(snapshot: Snapshot, active_version: int | None) -> str:
    """The version's status in the changelog's words: in effect, past, upcoming, cancelled."""
    return _PUBLIC_STATUS[snapshot.status(active_version)]


def entry_of(
    announcement: Announcement, active_version: int | None, changes: list[dict]
) -> ChangelogEntry:
    snapshot = announcement.snapshot
    return ChangelogEntry(
        version=snapshot.version,
        published_at=snapshot.published_at,
        effective_at=snapshot.effective_at,
        status=status_of(snapshot, active_version),
        emergency=announcement.is_emergency,
        note=announcement.note,
        changes=changes,
        replaced_by=snapshot.superseded_by,
    )


def _public_rows():
    return (
        Announcement.objects.select_related("snapshot")
        .defer(*_HEAVY)
        .exclude(Q(public_changes=[]) & Q(note=""))
        .order_by("-snapshot__effective_at", "-snapshot__version")
    )


def changelog_entries(*, limit: int = 100) -> list[ChangelogEntry]:
    """The public changelog, latest effective time first (upcoming versions on top)."""
    active = snapshot_active_version()
    return [entry_of(a, active, a.public_changes) for a in _public_rows()[:limit]]


def changelog_entry(version: int) -> ChangelogEntry | None:
    """One version of the public changelog; None if it has nothing public."""
    row = _public_rows().filter(snapshot__version=version).first()
    return entry_of(row, snapshot_active_version(), row.public_changes) if row else None
