"""Versions in the admin: a read-only list and detail, plus the publishing pages.

Viewers see versions, diffs and Explain; only holders of
``limits.publish_snapshot`` (product, superusers) publish and roll back. The
pages themselves live in :mod:`limits.admin.publishing`.
"""

from django.contrib import admin
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from limits.models import Snapshot, SnapshotStatus
from limits.templatetags.sluice_words import shorten
from limits.traffic.rehearsal import rehearsal_recent
from limits.versions.selectors import snapshot_get_active, snapshot_list

from . import publishing, scheduled
from .base import ReadOnlyAdmin


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyAdmin):
    """Published versions, newest first; nobody can add, change or delete one here."""

    # What a reader scans for; publish and activation times, origin, hash and sizes
    # are on each version's page (the list fits a 1,280 px window without scrolling).
    list_display = (
        "version",
        "status_text",
        "summary",
        "author",
        "effective",
        "change_count",
        "announced",
    )
    list_display_links = ("version", "summary")
    search_fields = ("message", "author", "hash")
    list_filter = ("kind", "author")
    fields = (
        "version",
        "status_text",
        "origin",
        "message",
        "author",
        "published_at",
        "effective_at",
        "activated_at",
        "superseded_text",
        "hash",
        "rules_digest_text",
        "sizes",
        "same_content",
        "announced",
        "diff_words",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return snapshot_list().select_related("announcement")

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "publish/",
                view(publishing.publish_view),
                name="limits_snapshot_publish",
            ),
            path("diff/", view(publishing.diff_view), name="limits_snapshot_diff"),
            path(
                "explain/",
                view(publishing.explain_view),
                name="limits_snapshot_explain",
            ),
            path(
                "<int:version>/rollback/",
                view(publishing.rollback_view),
                name="limits_snapshot_rollback",
            ),
            path(
                "<int:version>/scheduled/",
                view(scheduled.scheduled_view),
                name="limits_snapshot_scheduled",
            ),
            path(
                "<int:version>/content/",
                view(self.content_view),
                name="limits_snapshot_content",
            ),
            path(
                "<int:version>/rehearsal/",
                view(self.rehearsal_view),
                name="limits_snapshot_rehearsal",
            ),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        extra = {"can_publish": request.user.has_perm("limits.publish_snapshot")}
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        active = snapshot_get_active(light=True)
        extra = {
            "can_publish": request.user.has_perm("limits.publish_snapshot"),
            "active_version": active.version if active else None,
        }
        row = (
            Snapshot.objects.filter(pk=object_id).first()
            if str(object_id).isdigit()
            else None  # the admin answers a malformed id itself
        )
        if row is not None:
            extra["rehearsal"] = _rehearsal_context(row, active)
            extra["scheduled"] = row.status(extra["active_version"]) is (
                SnapshotStatus.SCHEDULED
            )
        return super().change_view(
            request, object_id, form_url, {**extra, **(extra_context or {})}
        )

    def content_view(self, request, version):
        """The stored document, byte for byte, as gateways receive it."""
        if not self.has_view_permission(request):
            raise publishing.PermissionDenied
        row = get_object_or_404(Snapshot, version=version)
        response = HttpResponse(bytes(row.content), content_type="application/json")
        response["ETag"] = row.etag
        return response

    def rehearsal_view(self, request, version):
        """The version's rehearsal table alone: what its page reloads as traffic flows."""
        if not self.has_view_permission(request):
            raise publishing.PermissionDenied
        row = get_object_or_404(Snapshot, version=version)
        context = _rehearsal_context(row, snapshot_get_active(light=True))
        return HttpResponse(
            render_to_string("admin/limits/snapshot/_rehearsal.html", context)
        )

    @admin.display(description="status")
    def status_text(self, row):
        active = getattr(row, "active_version", None)
        if active is None:
            active_row = snapshot_get_active(light=True)
            active = active_row.version if active_row else None
        return row.status(active).label.split(":")[0]

    @admin.display(description="effective", ordering="effective_at")
    def effective(self, row):
        return f"{row.effective_at:%Y-%m-%d %H:%M} UTC"

    @admin.display(description="message", ordering="message")
    def summary(self, row):
        return shorten(row.message, 70)

    @admin.display(description="origin")
    def origin(self, row):
        if row.restored_version:
            return f"rollback to version {row.restored_version}"
        return (
            f"publish after version {row.parent_version}"
            if row.parent_version
            else "first publish"
        )

    @admin.display(description="changes")
    def change_count(self, row):
        counts = getattr(row, "change_counts", None) or row.diff["counts"]
        return ", ".join(f"{n} {kind}" for kind, n in counts.items() if n) or "—"

    @admin.display(description="announcement")
    def announced(self, row):
        """EMERGENCY (with its reason) or notice, and the public note, linked to its page."""
        announcement = getattr(row, "announcement", None)
        if announcement is None:
            return "—"
        url = reverse("admin:limits_announcement_change", args=[announcement.pk])
        if announcement.is_emergency:
            return format_html(
                '<a href="{}"><strong style="color:#b71c1c">EMERGENCY</strong></a>: {}',
                url,
                shorten(announcement.emergency_reason, 60),
            )
        said = announcement.note or ("notice given" if announcement.lowers else "note")
        return format_html('<a href="{}">{}</a>', url, shorten(said, 60))

    @admin.display(description="superseded")
    def superseded_text(self, row):
        if row.superseded_at is None:
            return "—"
        if row.superseded_by is None:
            return f"cancelled at {row.superseded_at:%Y-%m-%d %H:%M:%S} UTC"
        return f"by version {row.superseded_by} at {row.superseded_at:%Y-%m-%d %H:%M:%S} UTC"

    @admin.display(description="size")
    def sizes(self, row):
        return f"{len(row.content):,} bytes, {len(row.content_gzip):,} gzipped"

    @admin.display(description="rules digest")
    def rules_digest_text(self, row):
        """Unlike the hash (which covers the version's number and times), the same on
        every installation with the same rules: compare staging's with production's."""
        return row.rules_digest

    @admin.display(description="same rules as")
    def same_content(self, row):
        others = (
            Snapshot.objects.filter(rules_digest=row.rules_digest)
            .exclude(pk=row.pk)
            .order_by("version")
            .values_list("pk", "version")
        )
        links = (
            (reverse("admin:limits_snapshot_change", args=[pk]), version)
            for pk, version in others
        )
        return format_html_join(", ", '<a href="{}">version {}</a>', links) or "—"

    @admin.display(description="changes from the version it replaces")
    def diff_words(self, row):
        return render_to_string("admin/limits/snapshot/_diff.html", {"diff": row.diff})


def _rehearsal_context(row: Snapshot, active: Snapshot | None) -> dict:
    """What the version page shows of the gateways' rehearsal of ``row``."""
    scheduled = (
        row.status(active.version if active else None) is SnapshotStatus.SCHEDULED
    )
    return {
        "version": row.version,
        "live": scheduled,  # rehearsed now: the page refreshes the table
        "rows": rehearsal_recent(version=row.version, now=timezone.now()),
    }
