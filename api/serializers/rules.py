"""Serializers of the rule objects. Relations are written and read by slug."""

from rest_framework import serializers

from api.serializers.strict import StrictModelSerializer
from limits.choices import ScopeKind
from limits.models import Limit, Policy, Route, Tenant, Tier

#: The subject each policy scope names.
SUBJECTS = {
    ScopeKind.DEFAULT: (),
    ScopeKind.TIER: ("tier",),
    ScopeKind.TENANT: ("tenant",),
}
READ_ONLY = ("id", "revision", "created_at", "updated_at")
#: Limit fields for hot keys (rate limits) and for limits of kind "concurrent".


class TierSerializer(StrictModelSerializer):
    class Meta:
        model = Tier
        fields = ("id", "slug", "name", "description", "position", *READ_ONLY[1:])
        read_only_fields = READ_ONLY


class TenantSerializer(StrictModelSerializer):
    tier = serializers.SlugRelatedField(slug_field="slug", queryset=Tier.objects.all())

    class Meta:
        model = Tenant
        fields = (
            "id",
            "slug",
            "name",
            "tier",
            "contact_emails",
            "time_zone",
            "billing_day",
            "quota_reminders",
            *READ_ONLY[1:],
        )
        read_only_fields = READ_ONLY


class RouteSerializer(StrictModelSerializer):
    methods = serializers.ListField(
        child=serializers.CharField(max_length=7),
        min_length=1,
        error_messages={"min_length": "A route needs at least one HTTP method."},
        help_text='HTTP methods, e.g. ["GET", "HEAD"]; case does not matter.',
    )

    class Meta:
        model = Route
        fields = (
            "id",
            "slug",
            "description",
            "methods",
            "path_pattern",
            "cost",
            "max_cost",
            "failure_mode",
            *READ_ONLY[1:],
        )
        read_only_fields = READ_ONLY


class PolicyLimitSerializer(StrictModelSerializer):
    """A limit inside a policy; send ``id`` to change an existing one, omit it to add one."""

    id = serializers.IntegerField(required=False)
    description = serializers.CharField(source="describe", read_only=True)

    class Meta:
        model = Limit
        fields = ("id", *Limit.SETTINGS, "description")


class PolicySerializer(StrictModelSerializer):
    tier = serializers.SlugRelatedField(
        slug_field="slug", queryset=Tier.objects.all(), required=False, allow_null=True
    )
    tenant = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Tenant.objects.all(),
        required=False,
        allow_null=True,
    )
    route = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Route.objects.all(),
        required=False,
        allow_null=True,
        help_text="A route slug; null or absent for every route.",
    )
    limits = PolicyLimitSerializer(many=True, min_length=1)
    description = serializers.CharField(source="__str__", read_only=True)

    class Meta:
        model = Policy
        fields = (
            "id",
            "description",
            "scope",
            "tier",
            "tenant",
            "route",
            "reason",
            "expires_at",
            "limits",
            *READ_ONLY[1:],
        )
        read_only_fields = READ_ONLY
        validators = []  # uniqueness is checked by the service, with a field-level message

    def validate(self, attrs):
        """Refuse a subject the scope does not name (``scope: tier`` with a ``tenant``):
        the model would drop it silently."""
        scope = attrs.get("scope", getattr(self.instance, "scope", None))
        allowed = SUBJECTS.get(scope, ())
        contradicting = {
            name: [f"A {scope} policy names no {name}: leave it out or null."]
            for name in ("tier", "tenant")
            if name not in allowed and attrs.get(name) is not None
        }
        if contradicting:
            raise serializers.ValidationError(contradicting)
        return attrs


class LimitSerializer(StrictModelSerializer):
    """A limit on its own; writes go through its policy so the policy is validated whole."""

    policy = serializers.PrimaryKeyRelatedField(queryset=Policy.objects.all())
    description = serializers.CharField(source="describe", read_only=True)

    class Meta:
        model = Limit
        fields = (
            "id",
            "policy",
            *Limit.SETTINGS,
            "description",
            *READ_ONLY[1:],
        )
        read_only_fields = READ_ONLY
        validators = []
