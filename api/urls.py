"""Routes of the REST API under /api/v1/."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from api.views.announcements import (
    AnnouncementViewSet,
    DeliveryViewSet,
    WebhookEndpointViewSet,
)
from api.views.audit import AuditEntryViewSet
from api.views.publishing import (
    ExplainView,
    FleetView,
    SnapshotDiffView,
    SnapshotListView,
    SnapshotPublishView,
    SnapshotRollbackView,
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

urlpatterns = [
    # Gateways
    path("snapshot", SnapshotBundleView.as_view(), name="snapshot-bundle"),
    path(
        "snapshots/<int:version>",
        SnapshotDocumentView.as_view(),
        name="snapshot-document",
    ),
    # Publishing
    path("snapshots", SnapshotListView.as_view(), name="snapshot-list"),
    path("snapshots/publish", SnapshotPublishView.as_view(), name="snapshot-publish"),
    path(
        "snapshots/<int:version>/rollback",
        SnapshotRollbackView.as_view(),
        name="snapshot-rollback",
    ),
    path("snapshots/diff", SnapshotDiffView.as_view(), name="snapshot-diff"),
    path("explain", ExplainView.as_view(), name="explain"),
    path("fleet", FleetView.as_view(), name="fleet"),
    *router.urls,
]
