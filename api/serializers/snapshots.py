"""Serializers of published versions, diffs, explanations and the fleet."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers.strict import StrictSerializer
from limits.models import Snapshot
from limits.versions.explain import ExplainSource


class SnapshotSerializer(serializers.ModelSerializer):
    """A published version without its document (``GET /snapshots/{version}`` has it)."""

    status = serializers.SerializerMethodField()
    etag = serializers.SerializerMethodField()
    counts = serializers.SerializerMethodField(
        help_text="Changes against the parent, by kind."
    )

    class Meta:
        model = Snapshot
        fields = (
            "version",
            "parent_version",
            "kind",
            "restored_version",
            "status",
            "etag",
            "rules_digest",
            "author",
            "message",
            "published_at",
            "effective_at",
            "activated_at",
            "superseded_at",
            "superseded_by",
            "counts",
        )
        read_only_fields = fields

    @extend_schema_field(
        serializers.ChoiceField(choices=["active", "scheduled", "superseded", "past"])
    )
    def get_status(self, row) -> str:
        return row.status(self.context["active_version"]).value

    def get_etag(self, row) -> str:
        return f'"{row.hash}"'

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_counts(self, row) -> dict:
        counts = getattr(row, "change_counts", None)
        return counts if counts is not None else (row.diff or {}).get("counts", {})


class PublishInputSerializer(StrictSerializer):
    message = serializers.CharField(max_length=2000, help_text="What changes and why.")
    effective_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When gateways start enforcing it; now if absent.",
    )
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=4000,
        help_text="What customers read in the changelog about this version.",
    )
    emergency_reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Lower limits sooner than the notice period allows; marked and audited.",
    )


class RollbackInputSerializer(PublishInputSerializer):
    message = serializers.CharField(max_length=2000, help_text="Why roll back.")


def _diff_side(value: str) -> int | str:
    if value in ("active", "working"):
        return value
    if value.isdigit():
        return int(value)
    raise serializers.ValidationError("A version number, 'active' or 'working'.")


#: What a side of a diff may be: a version number, "active" or "working".
DIFF_SIDE = r"^(?:[0-9]{1,10}|active|working)$"


@extend_schema_field(
    {"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]}
)
class IPAddressField(serializers.IPAddressField):
    """An IPv4 or IPv6 address, documented as either (drf-spectacular says a string)."""


class DiffQuerySerializer(serializers.Serializer):
    old = serializers.RegexField(
        DIFF_SIDE, default="active", help_text="A version, 'active' or 'working'."
    )
    new = serializers.RegexField(
        DIFF_SIDE, default="working", help_text="A version, 'active' or 'working'."
    )

    def validate_old(self, value):
        return _diff_side(value)

    def validate_new(self, value):
        return _diff_side(value)


class ExplainQuerySerializer(serializers.Serializer):
    tenant = serializers.CharField(
        required=False, help_text="A tenant slug; none for anonymous traffic."
    )
    route = serializers.CharField(
        required=False, help_text="A route slug (or give method and path)."
    )
    method = serializers.CharField(required=False)
    path = serializers.CharField(required=False)
    user = serializers.CharField(required=False)
    api_key = serializers.CharField(required=False)
    ip = IPAddressField(required=False)
    source = serializers.ChoiceField(
        choices=ExplainSource.choices, default=ExplainSource.ACTIVE
    )
    at = serializers.DateTimeField(
        required=False,
        help_text="ISO 8601, to the second: also explain a 429 of the tenant at that "
        "second, with the version then in force and the traffic before it.",
    )
    limit = serializers.CharField(
        required=False,
        max_length=40,
        help_text="The limit the rejection log names (user-s), to mark it.",
    )


class LimitOutSerializer(serializers.Serializer):
    dimension = serializers.CharField()
    rate = serializers.IntegerField()
    period = serializers.IntegerField()
    burst = serializers.IntegerField()
    cost = serializers.IntegerField(allow_null=True)
    shadow = serializers.BooleanField()
    description = serializers.CharField()
    public_name = serializers.CharField(help_text="What customers read in a 429.")
    public_description = serializers.CharField(help_text="Likewise, in its detail.")


class PolicyOutSerializer(serializers.Serializer):
    scope = serializers.CharField()
    route = serializers.CharField()
    expires_at = serializers.DateTimeField(allow_null=True)
    description = serializers.CharField()
    level = serializers.CharField(required=False)
    limits = LimitOutSerializer(many=True)


class KeyOutSerializer(serializers.Serializer):
    key = serializers.CharField()
    cost = serializers.IntegerField()
    limit = serializers.CharField()


class VerdictOutSerializer(serializers.Serializer):
    name = serializers.CharField()
    words = serializers.CharField()
    rejected = serializers.BooleanField()
    busiest = serializers.IntegerField(
        help_text="Most requests in one window up to then."
    )
    busiest_window = serializers.IntegerField(help_text="That window, in seconds.")
    allowed_then = serializers.IntegerField(help_text="What the bucket admits in it.")
    burst_needed = serializers.IntegerField()
    rate_needed = serializers.IntegerField(allow_null=True)
    per_caller = serializers.BooleanField()


class WindowVerdictOutSerializer(serializers.Serializer):
    name = serializers.CharField()
    words = serializers.CharField()
    rejected = serializers.BooleanField()
    window = serializers.IntegerField(help_text="The window, in seconds.")
    busiest = serializers.IntegerField(
        allow_null=True,
        help_text="Most requests in a window's length up to then; null when the "
        "recorded seconds are shorter than the window (an hour, a day): not judged.",
    )
    admits = serializers.IntegerField(help_text="Requests the window admits.")
    limit_needed = serializers.IntegerField(allow_null=True)
    per_caller = serializers.BooleanField()


class RejectionOutSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    version = serializers.IntegerField(help_text="The version in force at that second.")
    tenant_known = serializers.BooleanField()
    policy = serializers.CharField()
    requests = serializers.IntegerField(help_text="Decisions in the 60 s up to then.")
    seconds = serializers.ListField(child=serializers.IntegerField())
    verdicts = VerdictOutSerializer(many=True, help_text="Its token buckets.")
    windows = WindowVerdictOutSerializer(many=True, help_text="Its sliding windows.")


class ExplanationSerializer(serializers.Serializer):
    source = serializers.CharField()
    version = serializers.IntegerField(allow_null=True)
    tenant = serializers.CharField(allow_null=True)
    tenant_known = serializers.BooleanField()
    tier = serializers.CharField(allow_null=True)
    route = serializers.CharField(allow_null=True)
    level = serializers.CharField()
    why = serializers.CharField()
    policy = PolicyOutSerializer()
    keys = KeyOutSerializer(many=True)
    beaten = PolicyOutSerializer(many=True)
    expired = PolicyOutSerializer(many=True)
    rejection = RejectionOutSerializer(
        allow_null=True, help_text="With ``at``: why the tenant was rejected then."
    )


class GatewayOutSerializer(serializers.Serializer):
    gateway = serializers.CharField()
    state = serializers.CharField()
    applied = serializers.IntegerField(allow_null=True)
    rejected = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    seen = serializers.DateTimeField()
    token = serializers.CharField(
        help_text="Prefix of the gateway token it polled with."
    )
    address = serializers.CharField()
    rehearsed = serializers.IntegerField(
        allow_null=True,
        help_text="The scheduled version it rehearses in shadow; null when none.",
    )


class VersionCountSerializer(serializers.Serializer):
    version = serializers.IntegerField(allow_null=True)
    gateways = serializers.IntegerField()


class RehearsalQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(
        required=False, help_text="From this time (to the minute); default: a day ago."
    )
    tenant = serializers.CharField(required=False, help_text="One tenant's figures.")


class RehearsalFigureSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="Empty for requests without a tenant.")
    route = serializers.CharField(help_text="Empty for requests that matched no route.")
    requests = serializers.IntegerField(
        help_text="Requests that rehearsed the version."
    )
    would_reject = serializers.IntegerField(
        help_text="Of those, how many the version would have rejected."
    )


class RehearsalSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    since = serializers.DateTimeField()
    figures = RehearsalFigureSerializer(many=True)


class FleetRehearsalSerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="A scheduled version.")
    gateways = serializers.ListField(
        child=serializers.CharField(), help_text="Ids of the gateways rehearsing it."
    )


class FleetSerializer(serializers.Serializer):
    active_version = serializers.IntegerField(allow_null=True)
    gateways = GatewayOutSerializer(many=True)
    versions = VersionCountSerializer(many=True)
    rehearsals = FleetRehearsalSerializer(many=True)


class FieldChangeSerializer(serializers.Serializer):
    field = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class LimitChangeSerializer(serializers.Serializer):
    dimension = serializers.CharField()
    period = serializers.IntegerField(
        allow_null=True, help_text="Seconds; null for a concurrency limit."
    )
    kind = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    fields = FieldChangeSerializer(many=True)
    text = serializers.CharField()


class AffectedSerializer(serializers.Serializer):
    tiers = serializers.ListField(child=serializers.CharField())
    tenants = serializers.ListField(child=serializers.CharField())
    anonymous = serializers.BooleanField()


class ChangeSerializer(serializers.Serializer):
    subject = serializers.ChoiceField(choices=["tier", "tenant", "route", "policy"])
    key = serializers.CharField()
    kind = serializers.ChoiceField(
        choices=["new", "raised", "lowered", "removed", "changed"]
    )
    direction = serializers.CharField(allow_null=True)
    lowers = serializers.BooleanField(help_text="Some client can get less than before.")
    text = serializers.CharField(help_text="The change in words.")
    fields = FieldChangeSerializer(many=True)
    limits = LimitChangeSerializer(many=True)
    affected = serializers.JSONField()


class DiffSerializer(serializers.Serializer):
    old = serializers.JSONField(
        help_text="The version compared from ('active', 'working' or a number)."
    )
    new = serializers.JSONField()
    changes = ChangeSerializer(many=True)
    counts = serializers.DictField(child=serializers.IntegerField())
    lowers = serializers.BooleanField()
    affected = AffectedSerializer()
