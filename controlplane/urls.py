"""Root URLs: the admin, the API, its schema and documentation, the public changelog,
Prometheus metrics, and the public keys gateways verify bundles with."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from api.views.keys import signing_keys_view
from api.views.metrics import metrics_view

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/v1/", include("api.urls")),
    path("changelog/", include("limits.announcements.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        SpectacularSwaggerView.as_view(url_name="schema"),
        name="swagger-ui",
    ),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("metrics", metrics_view, name="metrics"),
    path(".well-known/sluice-keys.json", signing_keys_view, name="signing-keys"),
]
