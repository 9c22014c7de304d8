"""A URLconf with a view that fails, for the tests of Django's debug page (tests/test_settings.py)."""

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView


class FailingView(APIView):
    """Any signed-in role may call it; it fails as a bug would."""

    def get(self, request) -> Response:
        raise RuntimeError("a bug the debug page would show")


urlpatterns = [path("api/v1/fails", FailingView.as_view())]
