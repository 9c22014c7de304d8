"""A Django view limited by Sluice's decorator, in one file (settings included).

    pip install "sluice-client[yaml,django]"
    python django_app.py runserver                # memory store: one process

The decorator decides the view's requests as a route and cost of its own, with
or without ``sluice.django.RateLimitMiddleware``. Its own tests
(test_django_app.py) run with the memory store and no Redis.
"""

import os
import sys
from pathlib import Path

from django.conf import settings
from django.http import JsonResponse
from django.urls import path

from sluice import Identity, Limiter, RulesFile
from sluice.django import rate_limit


def identify(request) -> Identity:
    """Who is calling. A real service reads its own authentication here (a verified
    token, a session); never a header a client can set, as this example does."""
    return Identity(tenant=request.headers.get("X-Tenant"))


def limiter() -> Limiter:
    """SLUICE_LIMITER: called once, on the first request of a decorated view."""
    rules = RulesFile(
        os.environ.get("SLUICE_RULES", Path(__file__).with_name("rules.yaml"))
    )
    return Limiter(os.environ.get("SLUICE_REDIS_URL", "memory://"), rules)


if not settings.configured:
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        SECRET_KEY="only-an-example",
        SLUICE_LIMITER=f"{__name__}.limiter",
        SLUICE_IDENTIFY=f"{__name__}.identify",
    )


@rate_limit("reports.run", cost=5)
def run_report(request, report_id):
    return JsonResponse({"report": report_id, "status": "queued"})


urlpatterns = [path("v1/reports/<int:report_id>/run", run_report)]

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
