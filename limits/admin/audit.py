"""The audit log, read-only: the chain's state on the list, a field-by-field diff
of each change on its page."""

import json

from django.contrib import admin
from django.template.loader import render_to_string
from django.utils.html import format_html

from limits.core.audit_diff import audit_changes
from limits.core.chain import chain_verify
from limits.models import AuditEntry

from .base import ReadOnlyAdmin

#: The most entries the list page walks on each view (about 3 s on 2 busy cores).
ADMIN_VERIFY_LIMIT = 50_000


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Every recorded change, newest first; nobody can add, edit or delete an entry."""

    list_display = (
        "id",
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
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "created_at",
                    "actor",
                    "action",
                    "object_type",
                    "object_id",
                    "object_repr",
                    "reason",
                    "request_id",
                    "source_ip",
                )
            },
        ),
        ("What changed", {"fields": ("changes",)}),
        ("Hash chain", {"fields": ("hash", "prev_hash", "key_id")}),
        (
            "The record as stored",
            {"fields": ("before_json", "after_json"), "classes": ("collapse",)},
        ),
    )
    readonly_fields = tuple(
        name for _, options in fieldsets for name in options["fields"]
    )

    def changelist_view(self, request, extra_context=None):
        # The whole walk, every time (a checkpoint kept anywhere the database's owner
        # can write would be one more thing to trust), up to a size that still
        # answers in a few seconds (docs/benchmarks.md); past it, audit_verify.
        total = AuditEntry.objects.count()
        extra = {
            "chain": chain_verify() if total <= ADMIN_VERIFY_LIMIT else None,
            "chain_total": total,
            "chain_limit": ADMIN_VERIFY_LIMIT,
        }
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    @admin.display(description="changes")
    def changes(self, entry):
        return render_to_string(
            "admin/limits/auditentry/_changes.html",
            {"rows": audit_changes(entry.before, entry.after), "entry": entry},
        )

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
