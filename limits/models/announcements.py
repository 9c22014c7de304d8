"""Announcements of published versions, and the private changelog links of tenants.

A :class:`~limits.models.Snapshot` is immutable, so what is said about it to
customers (a public note, the emergency mark, the changes fit to publish) lives
in its :class:`Announcement`, written in the same transaction as the version.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from .rules import Tenant
from .snapshots import Snapshot

__all__ = ["Announcement", "TenantLink"]


class Announcement(models.Model):
    """What customers are told about one version: its note, emergency mark and public changes.

    ``public_changes`` are the diff's own change records (words and
    classification) without tenant-specific changes or tenant names; they are
    computed once at publish so the public changelog never reads the full diff.
    """

    snapshot = models.OneToOneField(
        Snapshot, on_delete=models.PROTECT, related_name="announcement"
    )
    note = models.TextField(
        blank=True,
        help_text="Public: shown in the changelog, the feed, webhooks and emails. "
        "Editable until the version takes effect.",
    )
    emergency_reason = models.TextField(
        blank=True,
        help_text="Set when published as an emergency: why it could not wait for "
        "the notice period.",
    )
    lowers = models.BooleanField(
        default=False, help_text="Some client gets less than before."
    )
    notice_days = models.PositiveIntegerField(
        default=0, help_text="The notice period in force when it was published."
    )
    public_changes = models.JSONField(default=list, blank=True)
    carries = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="carriers",
        help_text="For a scheduled version re-issued to carry later changes in (or "
        "moved to another time): the first announcement of the pending change. "
        "Customers read the two as one changelog entry.",
    )
    cancellation_note = models.TextField(
        blank=True,
        help_text="Public: why the version was cancelled before it took effect.",
    )
    notified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the notifications were queued."
    )
    reminded = ArrayField(
        models.PositiveIntegerField(),
        default=list,
        blank=True,
        help_text="Reminders sent, as seconds before the effective time.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    revision = models.PositiveIntegerField(default=1, editable=False)

    class Meta:
        ordering = ["-snapshot__version"]
        default_permissions = ("view", "change")

    def __str__(self) -> str:
        return f"announcement of version {self.snapshot.version}"

    @property
    def is_emergency(self) -> bool:
        return bool(self.emergency_reason)


class TenantLink(models.Model):
    """The private changelog link of one tenant: a signed token carrying ``nonce``.

    Rotating draws a new nonce, so every earlier link stops working; revoking
    sets ``revoked_at``. The token itself is not stored: it is signed again from
    the row whenever it is shown.
    """

    tenant = models.OneToOneField(
        Tenant, on_delete=models.CASCADE, related_name="changelog_link"
    )
    nonce = models.CharField(max_length=64, editable=False)
    issued_at = models.DateTimeField(default=timezone.now, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "private changelog link"

    def __str__(self) -> str:
        return f"changelog link of {self.tenant}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
