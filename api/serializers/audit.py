from rest_framework import serializers

from limits.models import ApiToken, AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = (
            "id",
            "created_at",
            "action",
            "actor",
            "request_id",
            "source_ip",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
            "reason",
        )
        read_only_fields = fields


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ("id", "name", "prefix", "created_at", "last_used_at", "revoked_at")
        read_only_fields = ("id", "prefix", "created_at", "last_used_at", "revoked_at")


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="Shown once; store it now."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = (*ApiTokenSerializer.Meta.fields, "secret")
