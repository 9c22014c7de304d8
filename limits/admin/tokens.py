"""Admin pages of API and gateway tokens: create (secret shown once) and revoke."""

from datetime import UTC, datetime

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path

from limits.core.audit import Actor
from limits.gateways.fleet import fleet_status
from limits.gateways.tokens import token_create, token_revoke
from limits.models import ApiToken, GatewayToken
from limits.versions.selectors import snapshot_get_active


class TokenAdmin(admin.ModelAdmin):
    """Tokens are never edited or deleted: they are created, used, and revoked."""

    list_display = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at", "created_at")
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke_selected"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        secret = token_create(token=obj, actor=Actor.from_request(request))
        messages.warning(
            request,
            f"The secret of {obj.name} is {secret} — copy it now: it is stored hashed and "
            "will not be shown again.",
        )

    @admin.action(description="Revoke the selected tokens", permissions=["add"])
    def revoke_selected(self, request, queryset):
        actor = Actor.from_request(request)
        for token in queryset:
            token_revoke(token=token, actor=actor)
        messages.success(request, f"Revoked {queryset.count()} token(s).")


@admin.register(GatewayToken)
class GatewayTokenAdmin(TokenAdmin):
    fields = ("name", *TokenAdmin.readonly_fields)
    change_list_template = "admin/limits/gatewaytoken/change_list.html"

    def get_urls(self):
        fleet = path(
            "fleet/", self.admin_site.admin_view(self.fleet_view), name="limits_fleet"
        )
        return [fleet, *super().get_urls()]

    def fleet_view(self, request):
        """Every gateway, the version it runs, when it was last seen, and its state."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        active = snapshot_get_active(light=True)
        fleet = fleet_status(
            active_version=active.version if active else None,
            active_since=active.activated_at.timestamp() if active else None,
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Fleet",
            "fleet": fleet,
            "rows": [
                (g, datetime.fromtimestamp(g.report.seen, UTC)) for g in fleet.gateways
            ],
            "stale_after": settings.SLUICE_FLEET_STALE_AFTER,
            "silent_after": settings.SLUICE_FLEET_SILENT_AFTER,
        }
        return TemplateResponse(
            request, "admin/limits/gatewaytoken/fleet.html", context
        )


@admin.register(ApiToken)
class ApiTokenAdmin(TokenAdmin):
    list_display = ("name", "user", *TokenAdmin.list_display[1:])
    list_select_related = ("user",)
    fields = ("name", "user", *TokenAdmin.readonly_fields)
    autocomplete_fields = ("user",)
