"""The request log (controlplane.middleware.RequestLogMiddleware), plain and JSON."""

from __future__ import annotations

import json
import logging
import os
import urllib.request

import pytest
from django.db import OperationalError, connection

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, GatewayToken
from limits.publishing.services import snapshot_publish
from tests.celery_fixtures import database_url
from tests.factories import UserFactory
from tests.servers import ControlPlaneServer


def _token(username: str, role: str) -> str:
    user = UserFactory(username=username, role=role)
    return token_create(token=ApiToken(user=user, name="t"), actor=Actor.system())


@pytest.mark.django_db(transaction=True)
def test_request_log__json_format_under_gunicorn__one_parsable_line_per_request(
    redis_server,
):
    # Given the control plane on gunicorn with SLUICE_LOG_FORMAT=json, and a viewer's token
    secret = _token("val-viewer", "viewer")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_server.url,
        "SLUICE_LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
    }
    server = ControlPlaneServer(env).start()
    try:
        # When the viewer lists the tiers
        request = urllib.request.Request(
            f"{server.url}/api/v1/tiers?limit=5",
            headers={"Authorization": f"Bearer {secret}", "X-Request-ID": "req-json-1"},
        )
        # (a slow answer is still an answer: the log line is what is checked)
        with urllib.request.urlopen(request, timeout=120) as response:
            assert response.status == 200
        lines = server.log.read_text().splitlines()
    finally:
        server.stop()
    # Then the log has one JSON line for that request, with who, what and how long
    (line,) = [line for line in lines if "req-json-1" in line]
    entry = json.loads(line)
    assert entry["logger"] == "sluice.request"
    assert entry["level"] == "INFO"
    assert {
        k: entry[k] for k in ("request_id", "user", "method", "path", "status")
    } == {
        "request_id": "req-json-1",
        "user": "val-viewer",
        "method": "GET",
        "path": "/api/v1/tiers",
        "status": 200,
    }
    assert isinstance(entry["duration_ms"], int | float)
    assert entry["duration_ms"] >= 0


@pytest.mark.django_db
def test_request_log__plain_by_default__a_text_line_with_the_fields(client, caplog):
    # Given a viewer's token / When it reads the tiers
    secret = _token("val-viewer", "viewer")
    with caplog.at_level(logging.INFO, logger="sluice.request"):
        client.get(
            "/api/v1/tiers",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
            HTTP_X_REQUEST_ID="req-plain-1",
        )
    # Then one INFO line says what happened, and its fields ride along for formatters
    (record,) = [r for r in caplog.records if r.name == "sluice.request"]
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith("GET /api/v1/tiers 200 ")
    assert "user=val-viewer" in record.getMessage()
    assert "request_id=req-plain-1" in record.getMessage()


@pytest.mark.django_db
@pytest.mark.usefixtures("patient_poll_redis")
def test_request_log__gateway_poll_unchanged__debug_with_the_gateway_id(
    client, rules, redis_client, caplog, django_capture_on_commit_callbacks
):
    # Given a published version and a gateway that holds its ETag
    with django_capture_on_commit_callbacks(execute=True):
        snapshot_publish(actor=Actor.system(), message="v1")
    secret = token_create(token=GatewayToken(name="gw"), actor=Actor.system())
    headers = {
        "HTTP_AUTHORIZATION": f"Bearer {secret}",
        "HTTP_SLUICE_GATEWAY_ID": "gw-eu-1",
    }
    etag = client.get("/api/v1/snapshot", **headers)["ETag"]
    caplog.clear()
    # When it polls again
    with caplog.at_level(logging.DEBUG, logger="sluice.request"):
        response = client.get("/api/v1/snapshot", HTTP_IF_NONE_MATCH=etag, **headers)
    # Then the 304 is logged at DEBUG (a fleet's polls would drown INFO), naming the gateway
    assert response.status_code == 304
    (record,) = [r for r in caplog.records if r.name == "sluice.request"]
    assert (record.levelno, record.gateway, record.status) == (
        logging.DEBUG,
        "gw-eu-1",
        304,
    )


@pytest.mark.django_db
@pytest.mark.urls("tests.debug_urls")
def test_request_log__session_unreadable__request_answered_and_logged(client, caplog):
    # Given a signed-in person, and then a database that fails every query
    client.force_login(UserFactory(username="pat-product", role="product"))

    def failing(execute, sql, params, many, context):
        raise OperationalError("the database is gone")

    # When a view that needs no database answers
    with (
        connection.execute_wrapper(failing),
        caplog.at_level(logging.INFO, logger="sluice.request"),
    ):
        response = client.get("/no-database")
    # Then its answer stands, and is logged without a user
    assert response.status_code == 200
    (record,) = [r for r in caplog.records if r.name == "sluice.request"]
    assert (record.status, getattr(record, "user", None)) == (200, None)
