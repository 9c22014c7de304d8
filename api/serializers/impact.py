"""The impact estimate of a change over HTTP (``limits.traffic.estimate.Impact.to_json``)."""

from rest_framework import serializers

__all__ = ["ImpactSerializer"]


class ImpactRowSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text='"" for anonymous traffic.')
    route = serializers.CharField(help_text='"" for requests that matched no route.')
    requests = serializers.IntegerField(help_text="Requests recorded in the window.")
    rejected_now = serializers.IntegerField(
        help_text="Of them, rejected under the rules in force when they came."
    )
    rejected_new = serializers.IntegerField(
        help_text="Of them, rejected by the new rules (the estimate)."
    )
    worst_minute = serializers.DateTimeField(
        allow_null=True, help_text="The minute the new rules would reject most in."
    )
    worst_minute_rejected = serializers.IntegerField()
    upper_bound = serializers.BooleanField(
        help_text="A limit counts per user, API key or IP: the estimate is a ceiling."
    )
    quotas_left_out = serializers.BooleanField(
        help_text="The new policy holds a calendar quota, which is not replayed: "
        "what it would reject is not in rejected_new."
    )


class ImpactSerializer(serializers.Serializer):
    since = serializers.DateTimeField(help_text="Start of the traffic replayed.")
    until = serializers.DateTimeField()
    tenants_reached = serializers.IntegerField(
        help_text="Tenants the change reaches by scope, with traffic or not."
    )
    series_replayed = serializers.IntegerField(
        help_text="Tenant x route series replayed; the others could not be rejected."
    )
    requests = serializers.IntegerField()
    rejected_now = serializers.IntegerField()
    rejected_new = serializers.IntegerField()
    rows = ImpactRowSerializer(
        many=True,
        help_text="Each reached tenant and route with traffic whose policy changes, "
        "hardest hit first.",
    )
    caveats = serializers.ListField(
        child=serializers.CharField(), help_text="How the estimate can err."
    )
