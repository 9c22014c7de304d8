"""Admin pages of API and gateway tokens: create (secret shown once) and revoke."""

from django.contrib import admin, messages

from limits.audit import Actor
from limits.models import ApiToken, GatewayToken
from limits.tokens import token_create, token_revoke


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


@admin.register(ApiToken)
class ApiTokenAdmin(TokenAdmin):
    list_display = ("name", "user", *TokenAdmin.list_display[1:])
    list_select_related = ("user",)
    fields = ("name", "user", *TokenAdmin.readonly_fields)
    autocomplete_fields = ("user",)
