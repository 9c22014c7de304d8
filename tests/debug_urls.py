"""A URLconf with a view that fails (tests of Django's debug page, tests/test_settings.py)
and one that needs nothing (tests of the request log, tests/test_request_log.py)."""

from django.http import HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView


class FailingView(APIView):
    """Any signed-in role may call it; it fails as a bug would."""

    def get(self, request) -> Response:
        raise RuntimeError("a bug the debug page would show")


def failing_page(request) -> HttpResponse:
    """A page outside the API (where errors are problem documents) that fails."""
    raise RuntimeError("a bug the debug page would show")


def no_database(request) -> HttpResponse:
    """Answers without a query of its own."""
    return HttpResponse(b"ok", content_type="text/plain")


urlpatterns = [
    path("api/v1/fails", FailingView.as_view()),
    path("fails", failing_page),
    path("no-database", no_database),
]
