"""The Django example's own tests: the memory store (sluice.testing), no Redis."""

import django
import django_app  # noqa: F401  (configures the settings)
import pytest
from django.conf import settings
from django.test import Client

django.setup()


@pytest.fixture
def client(sluice_limiter):
    """The app with the test's limiter in SLUICE_LIMITER (read on each request)."""
    given = settings.SLUICE_LIMITER
    settings.SLUICE_LIMITER = sluice_limiter
    yield Client()
    settings.SLUICE_LIMITER = given


def test_report__costs_five__two_of_ten_then_429_then_refilled(client, sluice_clock):
    answers = [
        client.post("/v1/reports/7/run", headers={"X-Tenant": "acme"}) for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0]["RateLimit-Policy"] == '"tenant-h";q=10;w=3600'
    assert answers[-1]["Retry-After"] == "1800"
    sluice_clock.advance(1800)
    assert (
        client.post("/v1/reports/7/run", headers={"X-Tenant": "acme"}).status_code
        == 200
    )
