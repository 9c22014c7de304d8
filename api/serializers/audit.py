from rest_framework import serializers

from limits.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = (
            "id",
            "created_at",
            "action",
            "actor",
            "actor_id",
            "request_id",
            "source_ip",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
            "reason",
            "prev_hash",
            "hash",
        )
        read_only_fields = fields
