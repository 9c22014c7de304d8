"""Published versions of the rules: immutable snapshots that gateways enforce."""

from django.db import models
from django.db.models import F, Q

from limits.choices import SnapshotKind

__all__ = ["Snapshot", "SnapshotStatus"]


class SnapshotStatus(models.TextChoices):
    """Where a snapshot stands in the timeline (see ``Snapshot.status``)."""

    ACTIVE = "active", "active: what gateways enforce now"
    SCHEDULED = "scheduled", "scheduled: takes effect later"
    SUPERSEDED = "superseded", "superseded: a later version took effect first"
    PAST = "past", "past: was active, replaced since"


class Snapshot(models.Model):
    """One published version of the rules, with its bytes prepared once at publish.

    Rows are written once by ``limits.publishing.services``. Only the lifecycle columns
    change afterwards, once each, from empty to a value: ``activated_at`` when the
    version takes effect, ``superseded_at``/``superseded_by`` when a later version
    is published to take effect no later than this one. A database trigger
    (migration ``snapshot_immutable``) refuses any other UPDATE and every DELETE.

    ``content`` is the canonical document of ``sluice.snapshot``;
    ``hash`` is its SHA-256 and the HTTP ETag. The author is kept as text, not a
    foreign key, so that deleting or renaming a user touches no published version.
    """

    version = models.PositiveIntegerField(unique=True)
    parent_version = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The version this one replaces when it takes effect.",
    )
    kind = models.CharField(
        max_length=8, choices=SnapshotKind.choices, default=SnapshotKind.PUBLISH
    )
    restored_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="For a rollback: the version it restores."
    )
    hash = models.CharField(max_length=64, unique=True)
    rules_digest = models.CharField(
        max_length=64,
        db_index=True,
        help_text="SHA-256 of the rules alone: equal rules, equal digest.",
    )
    content = models.BinaryField(help_text="The canonical snapshot document.")
    content_gzip = models.BinaryField(help_text="The same bytes, gzip-compressed.")
    author = models.CharField(max_length=150)
    author_id = models.BigIntegerField(null=True, blank=True)
    message = models.TextField()
    published_at = models.DateTimeField()
    effective_at = models.DateTimeField(db_index=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    superseded_by = models.PositiveIntegerField(null=True, blank=True)
    diff = models.JSONField(
        help_text="The structured diff against the parent (limits.diffing)."
    )

    class Meta:
        ordering = ["-version"]
        verbose_name = "version"
        verbose_name_plural = "versions"
        default_permissions = ("view",)
        permissions = [("publish_snapshot", "Can publish and roll back versions")]
        constraints = [
            models.CheckConstraint(
                condition=Q(version__gte=1),
                name="%(app_label)s_%(class)s_version_positive",
                violation_error_message="Versions start at 1.",
            ),
            models.CheckConstraint(
                condition=Q(parent_version__isnull=True)
                | Q(parent_version__lt=F("version")),
                name="%(app_label)s_%(class)s_parent_before_version",
                violation_error_message="A version replaces an earlier version.",
            ),
            models.CheckConstraint(
                condition=Q(effective_at__gte=F("published_at")),
                name="%(app_label)s_%(class)s_effective_after_published",
                violation_error_message="A version cannot take effect before it is published.",
            ),
            models.CheckConstraint(
                condition=Q(activated_at__isnull=True) | Q(superseded_at__isnull=True),
                name="%(app_label)s_%(class)s_activated_or_superseded",
                violation_error_message="A superseded version never takes effect.",
            ),
            models.CheckConstraint(
                condition=Q(kind=SnapshotKind.ROLLBACK, restored_version__isnull=False)
                | Q(kind=SnapshotKind.PUBLISH, restored_version__isnull=True),
                name="%(app_label)s_%(class)s_rollback_names_version",
                violation_error_message="A rollback names the version it restores.",
            ),
        ]

    def __str__(self) -> str:
        return f"version {self.version}"

    def save(self, *args, **kwargs) -> None:
        """Insert only: a published version is never rewritten."""
        if not self._state.adding:
            raise TypeError("a published snapshot is immutable")
        super().save(*args, **kwargs)

    @property
    def etag(self) -> str:
        """The quoted strong entity tag of ``content``."""
        return f'"{self.hash}"'

    def status(self, active_version: int | None) -> SnapshotStatus:
        """Where this version stands, given the version that is active now."""
        if self.activated_at is not None:
            if self.version == active_version:
                return SnapshotStatus.ACTIVE
            return SnapshotStatus.PAST
        if self.superseded_at is not None:
            return SnapshotStatus.SUPERSEDED
        return SnapshotStatus.SCHEDULED
