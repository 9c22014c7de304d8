from rest_framework import serializers

from limits.core.chain import CHAINED_FIELDS
from limits.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        # every field the chain's digest covers, so an export verifies on its own
        # (with the audit keys: the hashes are keyed)
        fields = ("id", *CHAINED_FIELDS, "key_id", "hash")
        read_only_fields = fields
