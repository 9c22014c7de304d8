"""Filters of the list endpoints (django-filter), strict: a value a filter cannot read is
a 400 naming it, never a filter silently dropped (which would match everything)."""

from copy import deepcopy
from datetime import UTC

import django_filters
from django import forms
from django.db import models
from django_filters import rest_framework as drf_filters
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions, filters

from limits.models import AuditEntry, Limit, Policy, Route, Tenant

_TRUTH = {"true": True, "1": True, "false": False, "0": False}


class _BooleanWidget(django_filters.widgets.BooleanWidget):
    """``true``/``false`` (or ``1``/``0``) as booleans; anything else passed on as is."""

    def value_from_datadict(self, data, files, name):
        value = data.get(name)
        return _TRUTH.get(value.lower(), value) if isinstance(value, str) else value


class _BooleanField(forms.NullBooleanField):
    widget = _BooleanWidget

    def to_python(self, value):
        if value in (None, "", True, False):
            return None if value == "" else value
        raise forms.ValidationError("Must be true or false.")

    def validate(self, value):
        pass


class BooleanFilter(django_filters.BooleanFilter):
    """A boolean filter refusing what is neither true nor false (DRF's ignores it)."""

    field_class = _BooleanField


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": 2**63 - 1})
class IdFilter(django_filters.NumberFilter):
    """An object by id (or version number): a whole number from 1; one that matches
    nothing lists nothing (no "Select a valid choice"), one out of range is a 400."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": 2**31 - 1})
class VersionFilter(IdFilter):
    """A version number (an integer column)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, max_value=2**31 - 1, **kwargs)


class StrictFilterSet(drf_filters.FilterSet):
    FILTER_DEFAULTS = deepcopy(drf_filters.FilterSet.FILTER_DEFAULTS)
    FILTER_DEFAULTS[models.BooleanField] = {"filter_class": BooleanFilter}


class FilterBackend(drf_filters.DjangoFilterBackend):
    """django-filter's backend, building ``filterset_fields`` filters strictly too."""

    filterset_base = StrictFilterSet


class TenantFilter(StrictFilterSet):
    tier = django_filters.CharFilter(field_name="tier__slug")

    class Meta:
        model = Tenant
        fields = ("slug", "tier")


class RouteFilter(StrictFilterSet):
    class Meta:
        model = Route
        fields = ("slug", "failure_mode")


class PolicyFilter(StrictFilterSet):
    tier = django_filters.CharFilter(field_name="tier__slug")
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    route = django_filters.CharFilter(
        field_name="route__slug", help_text="A route slug."
    )
    all_routes = BooleanFilter(field_name="route", lookup_expr="isnull")
    override = BooleanFilter(
        field_name="expires_at",
        lookup_expr="isnull",
        exclude=True,
        help_text="true: temporary overrides only; false: permanent policies only.",
    )

    class Meta:
        model = Policy
        fields = ("scope", "tier", "tenant", "route", "all_routes", "override")


class LimitFilter(StrictFilterSet):
    policy = IdFilter(field_name="policy_id", help_text="A policy id.")

    class Meta:
        model = Limit
        fields = ("policy", "dimension", "period", "shadow")


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 time in any offset, compared in UTC (Postgres refuses offsets past ±16h)."""

    def filter(self, qs, value):
        return super().filter(qs, value.astimezone(UTC) if value else value)


class AuditFilter(StrictFilterSet):
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
