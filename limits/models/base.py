"""What every editable rule table shares."""

from django.db import models

__all__ = ["RuleModel"]


class RuleModel(models.Model):
    """Timestamps and a revision counter; the API turns the revision into an ETag."""

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    revision = models.PositiveIntegerField(
        default=1, editable=False, help_text="Incremented by every saved change."
    )

    class Meta:
        abstract = True
