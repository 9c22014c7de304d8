"""The control plane's URLs plus two bench views the snapshot poll is compared with."""

import functools

from django.http import HttpResponse
from django.urls import path

from controlplane.urls import urlpatterns as control_plane


def ping(request):
    """The least a Django view can do: the same middleware, no query, a fixed body."""
    return HttpResponse(b"ok", content_type="text/plain")


@functools.cache
def _payload(size: int) -> bytes:
    return b"x" * size


def sized(request):
    """``?size=N`` bytes prepared in memory: what sending a body costs, without Redis."""
    size = min(int(request.GET.get("size", "2")), 64 * 2**20)
    return HttpResponse(_payload(size), content_type="application/octet-stream")


urlpatterns = [path("bench/ping", ping), path("bench/bytes", sized), *control_plane]
