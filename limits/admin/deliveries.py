"""Admin pages of webhook endpoints and deliveries (every notification, attempt by attempt).

Every write goes through a service of ``limits`` (validated, audited). Secrets
are shown once, in a message, when an endpoint is created or its secret rotated.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.shortcuts import get_object_or_404, redirect
from django.urls import path, reverse
from django.utils.html import format_html

from limits.announcements.deliveries import delivery_resend, webhook_endpoint_test
from limits.announcements.webhooks import (
    webhook_endpoint_create,
    webhook_endpoint_delete,
    webhook_endpoint_rotate_secret,
    webhook_endpoint_sends_legacy_signature,
    webhook_endpoint_update,
)
from limits.core.audit import Actor
from limits.models import Delivery, DeliveryAttempt, WebhookEndpoint


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Endpoints per tenant: created with a secret shown once; test events and rotation."""

    list_display = (
        "tenant",
        "url",
        "is_active",
        "secret_prefix",
        "legacy_signature",
        "updated_at",
    )
    list_filter = ("is_active",)
    list_select_related = ("tenant",)
    search_fields = ("tenant__slug", "url", "description")
    autocomplete_fields = ("tenant",)
    fields = (
        "tenant",
        "url",
        "description",
        "is_active",
        "secret_prefix",
        "legacy_signature",
        "created_at",
        "updated_at",
    )
    readonly_fields = ("secret_prefix", "legacy_signature", "created_at", "updated_at")
    actions = ["send_test_event", "rotate_secret"]
    change_form_template = "admin/limits/webhookendpoint/change_form.html"
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    @admin.display(
        boolean=True, description="Former signature too (a secret from before: rotate)"
    )
    def legacy_signature(self, obj):
        return None if obj.pk is None else webhook_endpoint_sends_legacy_signature(obj)

    def save_model(self, request, obj, form, change):
        actor = Actor.from_request(request)
        if change:
            webhook_endpoint_update(endpoint=obj, actor=actor)
            return
        secret = webhook_endpoint_create(endpoint=obj, actor=actor)
        _show_secret(request, obj, secret)

    def delete_model(self, request, obj):
        webhook_endpoint_delete(endpoint=obj, actor=Actor.from_request(request))

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def get_urls(self):
        view = self.admin_site.admin_view(self.test_view)
        return [
            path("<int:pk>/send-test/", view, name="limits_webhookendpoint_test"),
            *super().get_urls(),
        ]

    def test_view(self, request, pk):
        """The "Send a test event" button of the change page (POST only)."""
        endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
        if request.method == "POST" and self.has_change_permission(request, endpoint):
            self._test(request, endpoint)
        return redirect("admin:limits_webhookendpoint_change", pk)

    def _test(self, request, endpoint):
        try:
            delivery = webhook_endpoint_test(
                endpoint=endpoint, actor=Actor.from_request(request)
            )
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return
        url = reverse("admin:limits_delivery_change", args=[delivery.pk])
        messages.success(
            request,
            format_html(
                'Test event queued to {}: <a href="{}">see its attempts</a>.',
                endpoint.url,
                url,
            ),
        )

    @admin.action(description="Send a test event", permissions=["change"])
    def send_test_event(self, request, queryset):
        for endpoint in queryset:
            self._test(request, endpoint)

    @admin.action(
        description="Rotate the secret (the old one stops at once)",
        permissions=["change"],
    )
    def rotate_secret(self, request, queryset):
        for endpoint in queryset:
            secret = webhook_endpoint_rotate_secret(
                endpoint=endpoint, actor=Actor.from_request(request)
            )
            _show_secret(request, endpoint, secret)


def _show_secret(request, endpoint, secret: str) -> None:
    messages.warning(
        request,
        f"The signing secret of {endpoint.url} is {secret} — copy it now and give it to "
        "the tenant: it will not be shown again.",
    )


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = (
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "error",
        "response_excerpt",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """Every notification and its attempts; read-only, with a manual resend."""

    list_display = (
        "created_at",
        "tenant",
        "kind",
        "channel",
        "version",
        "target",
        "state",
        "attempt_count",
        "last_status_code",
    )
    list_filter = ("state", "channel", "kind")
    list_select_related = ("tenant", "announcement__snapshot")
    search_fields = ("tenant__slug", "target", "event_id")
    inlines = [AttemptInline]
    actions = ["resend"]
    fields = (
        "tenant",
        "kind",
        "channel",
        "version",
        "lead",
        "target",
        "event_id",
        "state",
        "attempt_count",
        "last_status_code",
        "last_error",
        "delivered_at",
        "created_at",
        "payload",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .defer(
                "announcement__snapshot__content",
                "announcement__snapshot__content_gzip",
                "announcement__snapshot__diff",
            )
        )

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="version")
    def version(self, obj):
        return obj.announcement.snapshot.version if obj.announcement_id else "—"

    @admin.action(
        description="Resend the selected notifications", permissions=["change"]
    )
    def resend(self, request, queryset):
        actor, sent = Actor.from_request(request), 0
        for delivery in queryset:
            try:
                delivery_resend(delivery=delivery, actor=actor)
                sent += 1
            except ValidationError as exc:
                messages.warning(request, f"{delivery}: {' '.join(exc.messages)}")
        messages.success(request, f"Queued {sent} notification(s) again.")
