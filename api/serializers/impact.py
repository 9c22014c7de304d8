"""The impact estimate of a change over HTTP (``limits.traffic.estimate.Impact.to_json``)."""

from rest_framework import serializers

__all__ = ["ImpactSerializer"]


class ImpactQuotaSerializer(serializers.Serializer):
    """A calendar quota of a row (``limits.traffic.quotas``): a day counted, a month
    projected; the members of the other method are absent."""

    quota = serializers.CharField(
        help_text='In words: "daily quota of 1,000 requests".'
    )
    per = serializers.ChoiceField(["day", "month"])
    method = serializers.ChoiceField(
        ["recorded", "projection"],
        help_text="recorded: counted over the recorded local days (per day); "
        "projection: the used count now plus the recorded rate (per month).",
    )
    over = serializers.IntegerField(
        help_text="recorded: requests over the quota the buckets did not reject "
        "already, in rejected_new. projection: requests over it by the period's end, "
        "not in rejected_new."
    )
    days = serializers.IntegerField(
        required=False,
        help_text="Local days the window touches, partial ones included.",
    )
    days_over = serializers.IntegerField(required=False)
    worst_day = serializers.DateField(required=False, allow_null=True)
    worst_day_over = serializers.IntegerField(required=False)
    limit = serializers.IntegerField(required=False)
    used = serializers.IntegerField(
        required=False, help_text="Requests' worth used this period by now."
    )
    used_from = serializers.ChoiceField(
        ["redis", "record", "redis_unavailable"],
        required=False,
        help_text="redis: the count gateways charge; record: none for the period "
        "(a new quota, or one per user or key), estimated from the traffic recorded; "
        "redis_unavailable: Redis did not answer, estimated from the traffic recorded.",
    )
    period_end = serializers.DateTimeField(required=False)
    reaches_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When the projection reaches the quota; null: it stays under.",
    )


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
        help_text="A monthly quota of the new policy is projected (see quotas): "
        "what it would reject is not in rejected_new."
    )
    quotas = ImpactQuotaSerializer(
        many=True, help_text="The new policy's calendar quotas, estimated."
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
