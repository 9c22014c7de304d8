"""The control plane's Redis stopped: the pages and endpoints that read it answer 503
with ``Retry-After``, not 500 (issue 25).

A private redis-server of the test's own is started, used, then stopped (the real
fault: connections refused); the control plane runs in this process on the test
database, so Postgres is up and only Redis is missing.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from limits.core.audit import Actor
from limits.publishing.services import snapshot_publish
from tests.api.conftest import ApiClient
from tests.servers import RedisServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_stopped(settings):
    """settings.REDIS_URL at a redis-server that answered once and is now stopped."""
    server = RedisServer().start()
    url = server.url
    server.stop()
    settings.REDIS_URL = url
    return url


@pytest.fixture
def published(rules, redis_client):
    return snapshot_publish(actor=Actor.system(), message="v1")


def test_api_fleet__redis_stopped__503_problem_with_retry_after(
    published, redis_stopped, product_user
):
    # Given Redis, where gateways report, is down / When CI reads the fleet
    response = ApiClient().as_user(product_user).get("/api/v1/fleet")
    # Then a problem document says Redis is unavailable, and when to retry
    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["error"] == "redis_unavailable"
    assert int(response["Retry-After"]) > 0


def test_admin_fleet_page__redis_stopped__plain_503_page(
    client, published, redis_stopped, admin_user
):
    client.force_login(admin_user)
    response = client.get(reverse("admin:limits_fleet"))
    assert response.status_code == 503
    assert "Redis is unavailable" in response.content.decode()
    assert int(response["Retry-After"]) > 0
