"""GET /metrics: Prometheus' text format, optionally behind a bearer token."""

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from limits.traffic.metrics import metrics_render


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The control plane's counters (``limits.traffic.metrics``); 401 without the token when one is set."""
    token = settings.SLUICE_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return HttpResponse(status=401, headers={"WWW-Authenticate": "Bearer"})
    return HttpResponse(metrics_render(), content_type=CONTENT_TYPE_LATEST)
