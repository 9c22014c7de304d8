"""Filters of the list endpoints (django-filter)."""

from datetime import UTC

import django_filters

from limits.models import AuditEntry, Limit, Policy, Route, Tenant


class TenantFilter(django_filters.FilterSet):
    tier = django_filters.CharFilter(field_name="tier__slug")

    class Meta:
        model = Tenant
        fields = ("slug", "tier")


class RouteFilter(django_filters.FilterSet):
    class Meta:
        model = Route
        fields = ("slug", "failure_mode")


class PolicyFilter(django_filters.FilterSet):
    tier = django_filters.CharFilter(field_name="tier__slug")
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    route = django_filters.CharFilter(
        field_name="route__slug", help_text="A route slug."
    )
    all_routes = django_filters.BooleanFilter(field_name="route", lookup_expr="isnull")
    override = django_filters.BooleanFilter(
        field_name="expires_at",
        lookup_expr="isnull",
        exclude=True,
        help_text="true: temporary overrides only; false: permanent policies only.",
    )

    class Meta:
        model = Policy
        fields = ("scope", "tier", "tenant", "route", "all_routes", "override")


class LimitFilter(django_filters.FilterSet):
    class Meta:
        model = Limit
        fields = ("policy", "dimension", "period", "shadow")


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 time in any offset, compared in UTC (Postgres refuses offsets past ±16h)."""

    def filter(self, qs, value):
        return super().filter(qs, value.astimezone(UTC) if value else value)


class AuditFilter(django_filters.FilterSet):
    since = UTCDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UTCDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = (
            "action",
            "object_type",
            "object_id",
            "actor",
            "request_id",
            "since",
            "until",
        )
