"""Filters of the list endpoints (django-filter)."""

from datetime import UTC

import django_filters
from rest_framework import exceptions, filters

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


class SearchFilter(filters.SearchFilter):
    """DRF's search, documented only on endpoints with ``search_fields`` (the others
    refuse ``?search=`` as an unknown parameter, ``api.views.base.StrictQueryMixin``)."""

    def get_schema_operation_parameters(self, view):
        if not getattr(view, "search_fields", None):
            return []
        return super().get_schema_operation_parameters(view)


class OrderingFilter(filters.OrderingFilter):
    """DRF's ordering, documented only on endpoints with ``ordering_fields``, with the
    fields it accepts (``-`` first for descending)."""

    def get_schema_operation_parameters(self, view):
        fields = getattr(view, "ordering_fields", None)
        if not fields:
            return []
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"] = {
                "type": "string",
                "enum": [f"{sign}{name}" for name in fields for sign in ("", "-")],
            }
        return parameters

    def get_ordering(self, request, queryset, view):
        """Refuse (400 naming ``ordering``) what DRF would silently ignore."""
        given = request.query_params.get(self.ordering_param)
        if given is not None:
            valid = {
                name
                for name, _ in self.get_valid_fields(
                    queryset, view, {"request": request}
                )
            }
            wrong = [t for t in given.split(",") if t.strip().lstrip("-") not in valid]
            if wrong:
                raise exceptions.ValidationError(
                    {
                        self.ordering_param: [
                            f"Order by one of: {', '.join(sorted(valid))}."
                        ]
                    }
                )
        return super().get_ordering(request, queryset, view)
