"""GET /metrics: Prometheus' text format, behind a bearer token or for local clients only."""

import functools
import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from limits.core.audit import request_ip
from limits.traffic.metrics import metrics_render
from sluice.identity import TrustedProxies


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The control plane's counters (``limits.traffic.metrics``).

    With ``SLUICE_METRICS_TOKEN`` set: 401 without ``Authorization: Bearer <token>``.
    Without it: 403 unless the client is in ``SLUICE_METRICS_NETWORKS`` (loopback by
    default), so a control plane exposed as installed does not publish its traffic.
    """
    token = settings.SLUICE_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return HttpResponse(status=401, headers={"WWW-Authenticate": "Bearer"})
    elif not _local_client(request):
        return HttpResponse(
            "/metrics answers local clients only; set SLUICE_METRICS_TOKEN to scrape it "
            "from elsewhere (docs/operator-guide.md, Metrics).\n",
            status=403,
            content_type="text/plain",
        )
    return HttpResponse(metrics_render(), content_type=CONTENT_TYPE_LATEST)


def _local_client(request: HttpRequest) -> bool:
    """Whether the client is in SLUICE_METRICS_NETWORKS.

    A reverse proxy on the same machine connects from loopback on behalf of anyone:
    a request carrying ``X-Forwarded-For`` from a proxy not in
    ``SLUICE_TRUSTED_PROXIES`` is judged as coming from outside.
    """
    forwarded = bool(request.META.get("HTTP_X_FORWARDED_FOR"))
    proxies = _networks(tuple(settings.SLUICE_TRUSTED_PROXIES))
    if forwarded and request.META.get("REMOTE_ADDR") not in proxies:
        return False
    return request_ip(request.META) in _networks(
        tuple(settings.SLUICE_METRICS_NETWORKS)
    )


@functools.lru_cache(maxsize=8)
def _networks(networks: tuple[str, ...]) -> TrustedProxies:
    return TrustedProxies(networks)
