"""Each gateway and its decision service against the real control plane: publish, fleet, dashboards.

The control plane is Django's live server on the test database; the decision
service polls it like any gateway, under its own gateway id.
"""

from __future__ import annotations

import time

import pytest
from django.core.signals import request_started
from django.db.models import Sum
from rest_framework.test import APIClient

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import DecisionMinute, GatewayToken
from limits.publishing.services import snapshot_publish
from limits.traffic.stats import decision_stream_aggregate
from tests.celery_fixtures import wait_until
from tests.factories import PolicyFactory
from tests.gateways import servers
from tests.gateways.conftest import GATEWAYS, Answer, call, start_gateway

pytestmark = pytest.mark.django_db(transaction=True)

POLL = 1.0  #: the decision service's poll interval, seconds (± 20 % jitter)


@pytest.fixture(params=GATEWAYS)
def on_control_plane(
    request, live_server, rules, redis_server, redis_client, backend, tmp_path, settings
):
    """Version 1 published; a gateway in front of a decision service polling the live server."""
    name = request.param
    settings.SLUICE_POLL_WINDOW_MS = 0  # fleet reports written at once
    snapshot_publish(actor=Actor.system(), message="v1")
    secret = token_create(token=GatewayToken(name=f"{name}-e2e"), actor=Actor.system())
    service = servers.DecisionService(
        live_server.url,
        secret,
        redis_server.url,  # the buckets, and the control plane's REDIS_URL (events)
        tmp_path,
        gateway_id=f"{name}-e2e",
        poll_interval=POLL,
    ).start()
    service.wait_version(1)
    port, gateway = start_gateway(name, tmp_path, backend=backend.port, service=service)
    yield name, port
    gateway.stop()
    service.stop()


@pytest.fixture
def polls():
    """Each poll of the snapshot endpoint the live server takes: (time.monotonic()
    as it starts, the Sluice-Applied-Version the poller reported)."""
    seen: list[tuple[float, str | None]] = []

    def record(sender, environ, **kwargs):
        if environ.get("PATH_INFO") == "/api/v1/snapshot":
            seen.append((time.monotonic(), environ.get("HTTP_SLUICE_APPLIED_VERSION")))

    request_started.connect(record, weak=False)
    yield seen
    request_started.disconnect(record)


def test_gateway__override_published__enforced_from_the_next_poll_and_seen(
    on_control_plane, rules, product_user, polls
):
    # Given a gateway enforcing version 1: initech (free) gets 5 / s, burst 10, on all routes
    name, port = on_control_plane
    began = time.monotonic()
    first = [call(port, "/v1/search", tenant="initech")]
    while first[-1].status == 200 and len(first) < 200:  # until the bucket is empty
        first.append(call(port, "/v1/search", tenant="initech"))
    elapsed = time.monotonic() - began
    assert _policy(name, first[0]) == '"tenant-s";q=10;w=2'
    admitted = sum(a.status == 200 for a in first)
    assert (
        10 <= admitted <= 10 + 5 * elapsed + 1
    )  # the burst, and what refilled meanwhile
    assert first[-1].status == 429
    # When support grants initech an override on search (50 / s, burst 100) and publishes
    PolicyFactory(
        override=True,
        tenant=rules["initech"],
        route=rules["search"],
        limit__rate=50,
        limit__burst=100,
    )
    snapshot_publish(actor=Actor.system(), message="initech launch week")
    published = time.monotonic()
    # Then the gateway enforces it
    switched = wait_until(
        lambda: _on_new_policy(name, port), timeout=60, every=0.05, why="the override"
    )
    took = time.monotonic() - published
    print(f"override published -> enforced through {name} in {took:.2f} s")
    assert _policy(name, switched) == '"tenant-s";q=100;w=2'
    # from the first poll after the publish on: the poll after it already reports
    # version 2 applied. (How many seconds that took is the poll interval plus
    # this machine's delays, so it is only printed.)
    wait_until(
        lambda: any(v == "2" for t, v in polls if t > published),
        timeout=60,
        why="a poll reporting version 2 applied",
    )
    after = [applied for started, applied in polls if started > published]
    assert "2" in after[:2], after
    burst = [call(port, "/v1/search", tenant="initech").status for _ in range(20)]
    assert burst == [200] * 20  # more than the old burst of 10
    # and the fleet shows the decision service on version 2, in sync
    people = APIClient()
    people.force_login(product_user)
    fleet = wait_until(
        lambda: [
            g
            for g in people.get("/api/v1/fleet").json()["gateways"]
            if g["gateway"] == f"{name}-e2e" and g["applied"] == 2
        ],
        timeout=60,
        why="the fleet report",
    )
    assert fleet[0]["state"] == "in sync"
    # and the gateway's decisions reach the dashboards' counts, rejections included
    wait_until(lambda: _counted("limited") >= 1, timeout=60, why="rejections")
    wait_until(
        lambda: _counted("allowed") >= admitted + 21, timeout=60, why="admissions"
    )


def _policy(name: str, answer: Answer) -> str:
    """The RateLimit-Policy of an admitted answer (Traefik: as the upstream received it)."""
    fields = answer.json()["headers"] if name == "traefik" else answer.headers
    return fields.get("ratelimit-policy", "")


def _on_new_policy(name: str, port: int) -> Answer | None:
    answer = call(port, "/v1/search", tenant="initech")
    if answer.status == 200 and "q=100" in _policy(name, answer):
        return answer
    return None


def _counted(outcome: str) -> int:
    decision_stream_aggregate()
    return DecisionMinute.objects.filter(tenant="initech", outcome=outcome).aggregate(
        n=Sum("count", default=0)
    )["n"]
