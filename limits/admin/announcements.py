"""Admin pages of announcements (the public note of each version) and private links.

Every write goes through a service of ``limits`` (validated, audited).
"""

from django import forms
from django.contrib import admin, messages
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html

from limits.announcements.quota_reminders import tenant_quota_reminders_set
from limits.announcements.services import announcement_note_update
from limits.announcements.tenant_links import (
    tenant_link_issue,
    tenant_link_path,
    tenant_link_revoke,
)
from limits.core.audit import Actor
from limits.models import Announcement

from .fields import PublicNoteCheck


class AnnouncementForm(PublicNoteCheck, forms.ModelForm):
    class Meta:
        model = Announcement
        fields = ("note",)


@admin.register(Announcement)
class AnnouncementAdmin(admin.ModelAdmin):
    """The public side of each version; only the note changes, until it takes effect."""

    form = AnnouncementForm

    list_display = (
        "version",
        "effective_at",
        "emergency",
        "lowers",
        "note",
        "notified_at",
    )
    list_filter = ("lowers",)
    search_fields = ("note", "emergency_reason")
    fields = (
        "version",
        "effective_at",
        "emergency",
        "emergency_reason",
        "note",
        "public_changes_text",
        "notice_days",
        "notified_at",
        "reminded",
    )
    list_select_related = ("snapshot",)

    @staticmethod
    def _editable(obj) -> bool:
        return obj is not None and not (
            obj.snapshot.activated_at or obj.snapshot.superseded_at
        )

    def get_fields(self, request, obj=None):
        if self._editable(obj) and self.has_change_permission(request, obj):
            # the box to send a note naming a customer, shown by the form when needed
            return [*self.fields, "note_names_ok"]
        return list(self.fields)

    def get_readonly_fields(self, request, obj=None):
        editable = self._editable(obj)
        return [f for f in self.fields if f != "note" or not editable]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .defer("snapshot__content", "snapshot__content_gzip")
        )

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("limits.publish_snapshot")

    def save_model(self, request, obj, form, change):
        announcement_note_update(
            announcement=obj, note=obj.note, actor=Actor.from_request(request)
        )

    @admin.display(description="version", ordering="snapshot__version")
    def version(self, obj):
        url = reverse("admin:limits_snapshot_change", args=[obj.snapshot_id])
        return format_html('<a href="{}">version {}</a>', url, obj.snapshot.version)

    @admin.display(description="effective", ordering="snapshot__effective_at")
    def effective_at(self, obj):
        return obj.snapshot.effective_at

    @admin.display(description="emergency", boolean=True)
    def emergency(self, obj):
        return obj.is_emergency

    @admin.display(description="public changes")
    def public_changes_text(self, obj):
        return render_to_string(
            "admin/limits/announcement/_changes.html", {"changes": obj.public_changes}
        )


class TenantLinkAdminMixin:
    """For the tenant admin: the private changelog link, issue/rotate and revoke
    (product and support: the ``tenantlink`` permissions)."""

    def has_manage_link_permission(self, request):
        return request.user.has_perm("limits.add_tenantlink")

    @admin.display(description="private changelog link")
    def changelog_link(self, tenant):
        link = getattr(tenant, "changelog_link", None) if tenant.pk else None
        if link is None or not link.is_active:
            return "None: use the action “Issue or rotate the private changelog link”."
        url = tenant_link_path(link)
        return format_html(
            '<a href="{}">{}</a><br><small>issued {}</small>', url, url, link.issued_at
        )

    @admin.action(
        description="Issue or rotate the private changelog link",
        permissions=["manage_link"],
    )
    def issue_changelog_link(self, request, queryset):
        for tenant in queryset:
            path_ = tenant_link_issue(tenant=tenant, actor=Actor.from_request(request))
            messages.success(
                request,
                format_html(
                    'Link of {}: <a href="{}">{}</a>',
                    tenant.slug,
                    path_,
                    request.build_absolute_uri(path_),
                ),
            )

    @admin.action(
        description="Revoke the private changelog link", permissions=["manage_link"]
    )
    def revoke_changelog_link(self, request, queryset):
        for tenant in queryset:
            tenant_link_revoke(tenant=tenant, actor=Actor.from_request(request))
        messages.success(request, f"Revoked the links of {queryset.count()} tenant(s).")


class QuotaRemindersAdminMixin:
    """For the tenant admin: quota reminders on or off, written now and audited (a
    preference of whom to tell, like endpoints: not proposed as a change request,
    so the field is read-only on the form and set by these actions)."""

    def has_manage_reminders_permission(self, request):
        return request.user.has_perm("limits.add_webhookendpoint")

    @admin.action(
        description="Turn quota reminders (at 80 and 100 percent of a quota) on",
        permissions=["manage_reminders"],
    )
    def quota_reminders_on(self, request, queryset):
        self._set_quota_reminders(request, queryset, enabled=True)

    @admin.action(
        description="Turn quota reminders off", permissions=["manage_reminders"]
    )
    def quota_reminders_off(self, request, queryset):
        self._set_quota_reminders(request, queryset, enabled=False)

    def _set_quota_reminders(self, request, queryset, *, enabled: bool) -> None:
        actor = Actor.from_request(request)
        for tenant in queryset:
            tenant_quota_reminders_set(tenant=tenant, enabled=enabled, actor=actor)
        state = "on" if enabled else "off"
        messages.success(
            request, f"Quota reminders {state} for {queryset.count()} tenant(s)."
        )
