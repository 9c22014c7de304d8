"""Serializers of announcements, webhook endpoints and deliveries."""

from rest_framework import serializers

from api.serializers.strict import StrictModelSerializer
from limits.announcements.changelog import status_of
from limits.announcements.webhooks import webhook_endpoint_sends_legacy_signature
from limits.models import (
    Announcement,
    Delivery,
    DeliveryAttempt,
    Tenant,
    WebhookEndpoint,
)


class AnnouncementSerializer(StrictModelSerializer):
    """What is said about one version; only ``note`` is writable (until it takes effect)."""

    version = serializers.IntegerField(source="snapshot.version", read_only=True)
    published_at = serializers.DateTimeField(
        source="snapshot.published_at", read_only=True
    )
    effective_at = serializers.DateTimeField(
        source="snapshot.effective_at", read_only=True
    )
    status = serializers.SerializerMethodField(
        help_text="upcoming, in effect, past or cancelled."
    )
    emergency = serializers.BooleanField(source="is_emergency", read_only=True)

    class Meta:
        model = Announcement
        fields = (
            "version",
            "published_at",
            "effective_at",
            "status",
            "emergency",
            "emergency_reason",
            "note",
            "lowers",
            "notice_days",
            "public_changes",
            "notified_at",
            "reminded",
            "revision",
        )
        read_only_fields = tuple(f for f in fields if f != "note")

    def get_status(self, obj) -> str:
        return status_of(obj.snapshot, self.context.get("active_version"))


class WebhookEndpointSerializer(StrictModelSerializer):
    tenant = serializers.SlugRelatedField(
        slug_field="slug", queryset=Tenant.objects.all()
    )
    legacy_signature = serializers.SerializerMethodField(
        help_text="Whether deliveries also carry the former Sluice-Signature header: "
        "a secret issued before Standard Webhooks (rotate it to end that); null when "
        "no configured key decrypts the secret."
    )

    def get_legacy_signature(self, endpoint) -> bool | None:
        return webhook_endpoint_sends_legacy_signature(endpoint)

    class Meta:
        model = WebhookEndpoint
        fields = (
            "id",
            "tenant",
            "url",
            "description",
            "is_active",
            "secret_prefix",
            "legacy_signature",
            "revision",
            "created_at",
            "updated_at",
        )
        read_only_fields = (
            "id",
            "secret_prefix",
            "revision",
            "created_at",
            "updated_at",
        )


class WebhookEndpointCreatedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="The signing secret. Shown once; store it now."
    )

    class Meta(WebhookEndpointSerializer.Meta):
        fields = (*WebhookEndpointSerializer.Meta.fields, "secret")


class SecretSerializer(serializers.Serializer):
    secret = serializers.CharField(help_text="The new signing secret. Shown once.")


class DeliveryAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ("number", "started_at", "duration_ms", "status_code", "error")
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    version = serializers.IntegerField(
        source="announcement.snapshot.version", read_only=True, allow_null=True
    )
    attempts = DeliveryAttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = (
            "id",
            "event_id",
            "tenant",
            "version",
            "endpoint",
            "channel",
            "kind",
            "lead",
            "target",
            "state",
            "attempt_count",
            "last_status_code",
            "last_error",
            "delivered_at",
            "created_at",
            "payload",
            "attempts",
        )
        read_only_fields = fields
