"""/healthz and /readyz (controlplane/health.py): open to probes, coarse, and honest."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from tests.conftest import PATIENT_REDIS_TIMEOUT
from tests.servers import RedisServer


@pytest.fixture
def own_redis(settings, monkeypatch):
    """The app's Redis on a server of this test's own, which the test may stop.

    The readiness check waits for its PONG as long as it takes: these tests judge what
    /readyz says of a Redis that answers or is stopped (refused at once), and a loaded
    machine must not turn a slow PONG into "failing". The product's 1 s is for probes.
    """
    monkeypatch.setattr("controlplane.health.REDIS_TIMEOUT", PATIENT_REDIS_TIMEOUT)
    server = RedisServer().start()
    settings.REDIS_URL = server.url
    yield server
    server.cleanup()


def _get(client, path, **extra):
    response = client.get(path, **extra)
    return response.status_code, json.loads(response.content), response


def test_healthz__anonymous_any_host__200_and_nothing_else(client):
    # When a probe asks with the pod's address as host, no token, no session
    status, body, response = _get(client, "/healthz", HTTP_HOST="10.1.2.3:8000")
    # Then the process says it is up, and no more
    assert (status, body) == (200, {"status": "ok"})
    assert response["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_readyz__everything_answers__200_each_check_ok(client, own_redis):
    status, body, _ = _get(client, "/readyz", HTTP_HOST="10.1.2.3:8000")
    assert status == 200
    assert body == {
        "status": "ok",
        "checks": {"postgres": "ok", "migrations": "ok", "redis": "ok"},
    }


@pytest.mark.django_db
def test_readyz__redis_stopped__503_redis_failing_without_details(
    client, own_redis, caplog
):
    # Given the app's Redis stopped
    own_redis.stop()
    # When a probe asks
    status, body, response = _get(client, "/readyz")
    # Then 503, Redis failing, and nothing a stranger could use (no address, no error)
    assert status == 503
    assert body == {
        "status": "failing",
        "checks": {"postgres": "ok", "migrations": "ok", "redis": "failing"},
    }
    assert str(own_redis.port) not in response.content.decode()
    # And the server log says what failed
    assert "readyz: redis failing" in caplog.text


@pytest.mark.django_db
def test_readyz__redis_stopped_but_excluded__200(client, own_redis):
    own_redis.stop()
    status, body, _ = _get(client, "/readyz?exclude=redis")
    assert (status, body["checks"]) == (200, {"postgres": "ok", "migrations": "ok"})


@pytest.mark.django_db(transaction=True)
def test_readyz__a_migration_not_applied__503_migrations_failing(
    client, own_redis, caplog
):
    # Given the database without the record of its latest migration (committed: the
    # check reads on a connection of its own; put back after)
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE id = "
            "(SELECT max(id) FROM django_migrations WHERE app = 'limits') "
            "RETURNING id, app, name, applied"
        )
        removed = cursor.fetchone()
    try:
        # When a probe asks
        status, body, _ = _get(client, "/readyz")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO django_migrations (id, app, name, applied) "
                "VALUES (%s, %s, %s, %s)",
                removed,
            )
    # Then not ready: the migrations are failing, Postgres itself is fine
    assert status == 503
    assert body["checks"] == {"postgres": "ok", "migrations": "failing", "redis": "ok"}
    assert "readyz: migrations not applied" in caplog.text


def test_health__not_get__405(client):
    response = client.post("/readyz")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
