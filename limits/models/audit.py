"""The append-only audit log."""

from django.db import models
from django.utils import timezone

from limits.choices import AuditAction

__all__ = ["AuditEntry"]


class AuditEntry(models.Model):
    """One recorded change: who, when, from where, what it was before and after, and why.

    Rows are only ever inserted: the application has no update path, database
    triggers (migrations ``audit_append_only``, ``audit_chain``) refuse UPDATE,
    DELETE and TRUNCATE, and the runtime role has no such grant (``db_roles``).
    Each entry carries the hash of the one before it, keyed with a secret the
    database does not hold (``limits.core.chain``), so an entry edited or added
    behind the application's back shows when the chain is verified.
    The actor is kept as text, not a foreign key, so deleting a user touches no row.
    """

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=12, choices=AuditAction.choices)
    actor = models.CharField(
        max_length=150, help_text="Username, or 'system' for automated changes."
    )
    actor_id = models.BigIntegerField(null=True, blank=True)
    request_id = models.CharField(max_length=128, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    object_type = models.CharField(max_length=50)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=300)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    prev_hash = models.CharField(
        max_length=64, editable=False, help_text="The hash of the entry before it."
    )
    hash = models.CharField(
        max_length=64,
        editable=False,
        help_text="HMAC-SHA256, under the application's audit key, of this entry's "
        "content and the previous hash (plain SHA-256 for entries from before keys).",
    )
    key_id = models.CharField(
        max_length=32,
        blank=True,
        default="",
        editable=False,
        help_text="The audit key the hash was made with; empty before keys existed.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        indexes = [
            models.Index(
                fields=["object_type", "object_id"], name="limits_audit_object_idx"
            ),
        ]
        constraints = [
            # Two entries linking to the same one would fork the chain.
            models.UniqueConstraint(
                fields=["prev_hash"],
                name="%(app_label)s_%(class)s_unique_prev_hash",
                violation_error_message="Another entry already follows this one.",
            ),
            models.UniqueConstraint(
                fields=["hash"],
                name="%(app_label)s_%(class)s_unique_hash",
                violation_error_message="An entry with this hash exists.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_repr}"
