"""The traffic dashboards in the admin: who is limited, where, and the share of fail-open.

The per-minute counts (``DecisionMinute``) have no change list of their own:
its place in the admin is the dashboard. Recent rejections are a read-only
list, searchable by tenant. Every role that may view them sees them.
"""

from datetime import timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone

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


@admin.register(Rejection)
class RejectionAdmin(ReadOnlyAdmin):
    """Recent rejections, newest first: a bounded log per tenant."""

    list_display = (
        "at",
        "count",
        "tenant",
        "route",
        "limit",
        "dimension",
        "policy",
        "snapshot_version",
        "gateway",
    )
    list_filter = ("dimension", "limit")
    search_fields = ("=tenant", "route", "policy")
    date_hierarchy = "at"
