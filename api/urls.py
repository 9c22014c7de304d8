"""Routes of the REST API under /api/v1/."""

from rest_framework.routers import DefaultRouter

from .views.announcements import (
    AnnouncementViewSet,
    DeliveryViewSet,
    WebhookEndpointViewSet,
)
from .views.audit import ApiTokenViewSet, AuditEntryViewSet
from .views.rules import (
    LimitViewSet,
    PolicyViewSet,
    RouteViewSet,
    TenantViewSet,
    TierViewSet,
)

app_name = "api"

router = DefaultRouter(trailing_slash=False)
router.register("tiers", TierViewSet)
router.register("tenants", TenantViewSet)
router.register("routes", RouteViewSet)
router.register("policies", PolicyViewSet)
router.register("limits", LimitViewSet)
router.register("audit", AuditEntryViewSet)
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("announcements", AnnouncementViewSet)
router.register("webhook-endpoints", WebhookEndpointViewSet)
router.register("deliveries", DeliveryViewSet)

urlpatterns = router.urls
