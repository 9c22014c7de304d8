"""The audit log, read-only."""

import json

from django.contrib import admin
from django.utils.html import format_html

from limits.models import AuditEntry

from .base import ReadOnlyAdmin


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Every recorded change, newest first; nobody can add, edit or delete an entry."""

    list_display = (
        "created_at",
        "actor",
        "action",
        "object_type",
        "object_repr",
        "reason",
    )
    list_filter = ("action", "object_type", "actor", "created_at")
    search_fields = ("object_repr", "object_id", "actor", "request_id", "reason")
    date_hierarchy = "created_at"
    fields = (
        "created_at",
        "actor",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "reason",
        "request_id",
        "source_ip",
        "before_json",
        "after_json",
    )
    readonly_fields = fields

    @admin.display(description="before")
    def before_json(self, entry):
        return _pretty(entry.before)

    @admin.display(description="after")
    def after_json(self, entry):
        return _pretty(entry.after)


def _pretty(value):
    if value is None:
        return "—"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))
