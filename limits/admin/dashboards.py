"""The traffic dashboards in the admin: who is limited, where, and the share of fail-open.

The per-minute counts (``DecisionMinute``) have no change list of their own:
its place in the admin is the dashboard. Recent rejections are a read-only
list, searchable by tenant. Every role that may view them sees them.
"""

from datetime import UTC, timedelta
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html

from limits.models import DecisionMinute, Rejection
from limits.traffic import dashboards
from limits.traffic.charts import line_chart

from .base import ReadOnlyAdmin

#: In URLs, requests without a tenant are this (a slug is never "~").
ANONYMOUS_SLUG = "~"
REFRESH_SECONDS = 30


@admin.register(DecisionMinute)
class TrafficDashboardAdmin(ReadOnlyAdmin):
    """Charts and tables over the last hour and day; refreshes itself every 30 s."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "tenant/<path:tenant>/",
                view(self.tenant_view),
                name="limits_decisionminute_tenant",
            ),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = timezone.now()
        hour, day = now - timedelta(hours=1), now - timedelta(days=1)
        context = {
            **self._frame(request, "Traffic: who is limited"),
            "by_tenant": line_chart(
                dashboards.limited_series(by="tenant", since=hour, until=now),
                label="Limited requests per minute, by tenant",
            ),
            "by_route": line_chart(
                dashboards.limited_series(by="route", since=hour, until=now),
                label="Limited requests per minute, by route",
            ),
            "top_hour": dashboards.most_limited_tenants(since=hour),
            "top_day": dashboards.most_limited_tenants(since=day),
            "hardest_hit": dashboards.scheduled_hardest_hit(),
            "fail_open_hour": dashboards.fail_open_share(since=hour),
            "fail_open_day": dashboards.fail_open_share(since=day),
            "gateway_timeout_hour": dashboards.gateway_timeout_share(since=hour),
            "events_lost": dashboards.events_lost(),
        }
        return TemplateResponse(request, "admin/limits/dashboards/index.html", context)

    def tenant_view(self, request, tenant):
        if not self.has_view_permission(request):
            raise PermissionDenied
        slug = "" if tenant == ANONYMOUS_SLUG else tenant
        now = timezone.now()
        shown = slug or dashboards.ANONYMOUS
        context = {
            **self._frame(request, f"Traffic of {shown}"),
            "tenant": shown,
            "chart": line_chart(
                dashboards.tenant_series(
                    tenant=slug, since=now - timedelta(hours=1), until=now
                ),
                label=f"Decisions of {shown} per minute, by outcome",
            ),
            "by_limit": dashboards.rejection_counts(tenant=slug),
            "rejections": dashboards.tenant_rejections(tenant=slug),
        }
        return TemplateResponse(request, "admin/limits/dashboards/tenant.html", context)

    def _frame(self, request, title: str) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "refresh": REFRESH_SECONDS,
            "anonymous_slug": ANONYMOUS_SLUG,
        }


class TimeRangeFilter(admin.ListFilter):
    """``since`` and ``until`` (ISO 8601, to the second, UTC) typed in the list's form."""

    title = "time range"
    template = (
        "admin/limits/rejection/_no_filter.html"  # the form above the list says it
    )
    parameters = ("since", "until")

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        self.bounds = {}
        for name in self.parameters:
            raw = params.pop(name, None)
            value = raw[-1] if isinstance(raw, list) else raw
            if value:
                moment = parse_datetime(value.strip())
                if moment is None:
                    raise IncorrectLookupParameters(f"{name}: not an ISO 8601 time")
                if timezone.is_naive(moment):
                    moment = timezone.make_aware(moment, UTC)
                self.bounds[name] = moment

    def has_output(self):
        return True  # else the change list skips the filter; its template shows nothing

    def expected_parameters(self):
        return list(self.parameters)

    def queryset(self, request, queryset):
        if "since" in self.bounds:
            queryset = queryset.filter(at__gte=self.bounds["since"])
        if "until" in self.bounds:
            queryset = queryset.filter(at__lte=self.bounds["until"])
        return queryset

    def choices(self, changelist):
        return []


@admin.register(Rejection)
class RejectionAdmin(ReadOnlyAdmin):
    """Recent rejections, newest first: a bounded log per tenant, filtered by tenant,
    route, limit and time range; each row links to its explanation."""

    list_display = (
        "at_second",
        "count",
        "tenant",
        "route",
        "limit",
        "dimension",
        "policy",
        "snapshot_version",
        "gateway",
        "explain_link",
    )
    list_display_links = None
    list_filter = ("tenant", "route", "limit", "dimension", TimeRangeFilter)
    search_fields = ("=tenant", "route", "policy")

    @admin.display(description="time (UTC)", ordering="at")
    def at_second(self, row):
        return row.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")

    @admin.display(description="why")
    def explain_link(self, row):
        query = urlencode(
            {
                "tenant": row.tenant,
                "route": row.route,
                "at": row.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "limit": row.limit,
            }
        )
        url = reverse("admin:limits_snapshot_explain")
        return format_html('<a href="{}?{}">explain</a>', url, query)

    def changelist_view(self, request, extra_context=None):
        given = {k: v for k, v in request.GET.items() if v}
        for name in TimeRangeFilter.parameters:  # said on the list, not a broken page
            if name in given and parse_datetime(given[name].strip()) is None:
                messages.error(
                    request,
                    f"{name}: {given.pop(name)!r} is not a time; write it as "
                    "2026-12-03T14:03:07Z (UTC, to the second).",
                )
        if len(given) != len(request.GET):  # the form's empty boxes filter nothing
            return redirect(f"{request.path}?{urlencode(given)}")
        tenants = (
            Rejection.objects.order_by().values_list("tenant", flat=True).distinct()
        )
        routes = Rejection.objects.order_by().values_list("route", flat=True).distinct()
        extra_context = {
            **(extra_context or {}),
            "tenant_slugs": sorted(t for t in tenants if t),
            "route_slugs": sorted(r for r in routes if r),
            "range": {
                k: request.GET.get(k, "") for k in ("tenant", "route", "since", "until")
            },
        }
        return super().changelist_view(request, extra_context)
