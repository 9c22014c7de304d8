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

import re
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Lower

from limits.diff.changes import Change
from limits.diff.diffing import RulesDiff
from limits.models import Announcement, Snapshot, Tenant
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
    "note_names_tenants",
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


#: Words (and runs of up to this many words) of a note compared with tenants' names.
_NAME_WORDS = 4


def note_names_tenants(note: str) -> list[str]:
    """The tenants a public ``note`` names, by slug or by name (whole words, any
    case), as "slug (name)": the changelog never names a customer, so its note
    should not either."""
    words = re.findall(r"[\w.-]+", note.lower())
    grams = {
        " ".join(words[i : i + n])
        for n in range(1, _NAME_WORDS + 1)
        for i in range(len(words) - n + 1)
    }
    grams |= {w.strip(".-") for w in words}
    if not grams:
        return []
    found = Tenant.objects.annotate(low=Lower("name")).filter(
        Q(slug__in=grams) | Q(low__in=grams)
    )
    return [f"{t.slug} ({t.name})" for t in found.order_by("slug")[:20]]


def tiers_of(snapshot: Snapshot) -> tuple[dict[str, str], dict[str, str]]:
    """Tenant -> tier in the version's parent and in the version itself."""
    new = snapshot_rules(snapshot).tenants
    parent = Snapshot.objects.filter(version=snapshot.parent_version).first()
    return (snapshot_rules(parent).tenants if parent else {}), new


@dataclass(frozen=True)
class ChangelogEntry:
    """One announced change as customers read it.

    A scheduled version re-issued to carry later changes in stays one entry:
    ``announced_as`` is the version it was first announced as (the entry's
    identity, the feed's id), ``version`` the one that takes effect.
    """

    version: int
    published_at: datetime  #: when it was first announced
    effective_at: datetime
    status: str  #: upcoming, in effect, past or cancelled
    emergency: bool
    note: str
    changes: list[dict]
    replaced_by: int | None = None  #: for a version a later one replaced: that one
    announced_as: int = 0
    cancellation_note: str = ""
    cancelled_at: datetime | None = None

    def __post_init__(self) -> None:
        if not self.announced_as:
            object.__setattr__(self, "announced_as", self.version)

    @property
    def lowers(self) -> bool:
        return any(change["lowers"] for change in self.changes)

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "announced_as": self.announced_as,
            "published_at": self.published_at.isoformat(),
            "effective_at": self.effective_at.isoformat(),
            "status": self.status,
            "emergency": self.emergency,
            "note": self.note,
            "lowers": self.lowers,
            "changes": self.changes,
            "replaced_by": self.replaced_by,
            "cancellation_note": self.cancellation_note,
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
    announcement: Announcement,
    active_version: int | None,
    changes: list[dict],
    *,
    first: Announcement | None = None,
) -> ChangelogEntry:
    """The entry of ``announcement``'s version; ``first`` is the announcement it
    carries on (``Announcement.carries``), if any."""
    snapshot, first = announcement.snapshot, first or announcement
    return ChangelogEntry(
        version=snapshot.version,
        published_at=first.snapshot.published_at,
        effective_at=snapshot.effective_at,
        status=status_of(snapshot, active_version),
        emergency=announcement.is_emergency,
        note=announcement.note,
        changes=changes,
        replaced_by=snapshot.superseded_by,
        announced_as=first.snapshot.version,
        cancellation_note=announcement.cancellation_note,
        cancelled_at=snapshot.superseded_at,
    )


def _latest_carrier():
    return Announcement.objects.filter(carries=OuterRef("pk")).order_by(
        "-snapshot__version"
    )


def _public_rows():
    """First announcements with something public, with the latest version carrying
    each (``head``) and the time that one takes effect, latest first."""
    latest = _latest_carrier()
    return (
        Announcement.objects.select_related("snapshot")
        .defer(*_HEAVY)
        .filter(carries__isnull=True)
        .exclude(Q(public_changes=[]) & Q(note=""))
        .annotate(
            head=Subquery(latest.values("pk")[:1]),
            effective=Coalesce(
                Subquery(latest.values("snapshot__effective_at")[:1]),
                F("snapshot__effective_at"),
            ),
        )
        .order_by("-effective", "-snapshot__version")
    )


def _entries(rows: list[Announcement]) -> list[ChangelogEntry]:
    heads = Announcement.objects.select_related("snapshot").defer(*_HEAVY)
    heads = heads.in_bulk([row.head for row in rows if row.head])
    active = snapshot_active_version()
    entries = []
    for row in rows:
        head = heads.get(row.head, row)
        entries.append(entry_of(head, active, head.public_changes, first=row))
    return entries


def changelog_entries(*, limit: int = 100) -> list[ChangelogEntry]:
    """The public changelog, latest effective time first (upcoming versions on top):
    one entry per announced change, however many versions carried it."""
    return _entries(list(_public_rows()[:limit]))


def changelog_entry(version: int) -> ChangelogEntry | None:
    """The entry of ``version`` (announced as, or carrying it); None if nothing public."""
    row = Announcement.objects.filter(snapshot__version=version)
    first = row.values_list("carries__snapshot__version", flat=True).first()
    rows = list(_public_rows().filter(snapshot__version=first or version))
    return _entries(rows)[0] if rows else None
