"""Routes of the REST API under /api/v1/."""

from django.urls import path, register_converter
from rest_framework.routers import DefaultRouter

from api.views.announcements import (
    AnnouncementViewSet,
    DeliveryViewSet,
    WebhookEndpointViewSet,
)
from api.views.audit import AuditEntryViewSet
from api.views.changes import (
    ChangeRequestViewSet,
    OverrideRenewView,
    RulesApplyView,
    RulesDiffView,
    RulesExportView,
)
from api.views.publishing import (
    ExplainView,
    FleetView,
    SnapshotDiffView,
    SnapshotImpactView,
    SnapshotListView,
    SnapshotPublishView,
    SnapshotRehearsalView,
    SnapshotRollbackView,
    WorkingCopyImpactView,
)
from api.views.rules import (
    LimitViewSet,
    PolicyViewSet,
    RouteViewSet,
    TenantViewSet,
    TierViewSet,
)
from api.views.snapshots import SnapshotBundleView, SnapshotDocumentView
from api.views.tokens import ApiTokenViewSet, GatewayTokenViewSet

app_name = "api"


class VersionConverter:
    """A version number in its column's range (``<version:...>``), else no match: a 404,
    never a query Postgres refuses (Django's ``<int:>`` takes any length)."""

    regex = "[0-9]{1,10}"
    largest = 2**31 - 1  #: Snapshot.version is an integer column

    def to_python(self, value: str) -> int:
        if int(value) > self.largest:
            raise ValueError(value)
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


class IdConverter(VersionConverter):
    """A row id (``<id:...>``): a bigint."""

    regex = "[0-9]{1,18}"
    largest = 2**63 - 1


register_converter(VersionConverter, "version")
register_converter(IdConverter, "id")

router = DefaultRouter(trailing_slash=False)
router.include_root_view = False
router.register("tiers", TierViewSet)
router.register("tenants", TenantViewSet)
router.register("routes", RouteViewSet)
router.register("policies", PolicyViewSet)
router.register("limits", LimitViewSet)
router.register("audit", AuditEntryViewSet)
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("gateway-tokens", GatewayTokenViewSet, basename="gateway-token")
router.register("announcements", AnnouncementViewSet)
router.register("webhook-endpoints", WebhookEndpointViewSet)
router.register("deliveries", DeliveryViewSet)
router.register("change-requests", ChangeRequestViewSet)

urlpatterns = [
    # Gateways
    path("snapshot", SnapshotBundleView.as_view(), name="snapshot-bundle"),
    path(
        "snapshots/<version:version>",
        SnapshotDocumentView.as_view(),
        name="snapshot-document",
    ),
    # Publishing
    path("snapshots", SnapshotListView.as_view(), name="snapshot-list"),
    path("snapshots/publish", SnapshotPublishView.as_view(), name="snapshot-publish"),
    path(
        "snapshots/<version:version>/rollback",
        SnapshotRollbackView.as_view(),
        name="snapshot-rollback",
    ),
    path(
        "snapshots/<int:version>/rehearsal",
        SnapshotRehearsalView.as_view(),
        name="snapshot-rehearsal",
    ),
    path("snapshots/diff", SnapshotDiffView.as_view(), name="snapshot-diff"),
    path(
        "snapshots/<int:version>/impact",
        SnapshotImpactView.as_view(),
        name="snapshot-impact",
    ),
    path(
        "working-copy/impact",
        WorkingCopyImpactView.as_view(),
        name="working-copy-impact",
    ),
    path("explain", ExplainView.as_view(), name="explain"),
    path("fleet", FleetView.as_view(), name="fleet"),
    # Change requests and rules as code
    path("overrides/<id:pk>/renew", OverrideRenewView.as_view(), name="override-renew"),
    path("rules/export", RulesExportView.as_view(), name="rules-export"),
    path("rules/diff", RulesDiffView.as_view(), name="rules-diff"),
    path("rules/apply", RulesApplyView.as_view(), name="rules-apply"),
    *router.urls,
]
