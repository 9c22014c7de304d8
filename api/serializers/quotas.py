"""What ``GET /tenants/{slug}/usage`` answers: a tenant's calendar quotas this period."""

from rest_framework import serializers


class QuotaUsageSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The quota's public name.")
    words = serializers.CharField(
        help_text='The quota in words, e.g. "10,000 requests per month per account".'
    )
    limit = serializers.IntegerField(help_text="Requests' worth per period.")
    used = serializers.IntegerField(help_text="Requests' worth used this period.")
    remaining = serializers.IntegerField()
    percent = serializers.FloatField(help_text="Used, in percent of the limit.")
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField(help_text="When the quota resets.")
    routes = serializers.ListField(
        child=serializers.CharField(),
        help_text='The routes it applies to ("other routes": requests matching none).',
    )
    shadow = serializers.BooleanField(
        help_text="Reported, not enforced: requests beyond the limit are admitted."
    )


class TenantUsageSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    version = serializers.IntegerField(
        allow_null=True,
        help_text="The active version the quotas come from; null before the first publish.",
    )
    quotas = QuotaUsageSerializer(many=True)
