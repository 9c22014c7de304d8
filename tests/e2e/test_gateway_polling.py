"""Publish -> a gateway polls the real control plane -> it enforces, and the fleet sees it.

The client (sluice.SnapshotSource) and the server (api/) are tested
against each other over HTTP, with Django served by pytest-django's live server.
"""

import pytest
from rest_framework.test import APIClient

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import GatewayToken
from limits.publishing.services import snapshot_publish
from sluice import Limiter
from sluice.source import PollResult, SnapshotSource
from tests.signing import TEST_KEYS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def control_plane(live_server, rules, redis_client):
    """The live server with version 1 published and a gateway token."""
    snapshot_publish(actor=Actor.system(), message="first")
    secret = token_create(token=GatewayToken(name="gw-e2e"), actor=Actor.system())
    return live_server.url, secret


def test_gateway__polls_and_enforces__shown_in_sync(
    control_plane, tmp_path, redis_server, product_user, settings
):
    # Given a gateway pointed at the control plane (reports written at once: no poll window)
    settings.SLUICE_POLL_WINDOW_MS = 0
    url, secret = control_plane
    source = SnapshotSource(
        f"{url}/api/v1/snapshot",
        secret,
        gateway_id="gw-e2e",
        public_keys=TEST_KEYS,
        cache_path=tmp_path / "lkg.json",
    )
    # When it polls twice and decides a request
    assert source.poll_once() == PollResult.APPLIED
    assert source.poll_once() == PollResult.NOT_MODIFIED
    decision = Limiter(redis_server.url, source, timeout=1.0).decide(
        method="GET", path="/v1/search", tenant="acme", ip="203.0.113.9"
    )
    # Then it enforces version 1 (pro search: 50 / s, burst 100) and the fleet shows it in sync
    assert decision.allowed
    assert decision.limit == 100
    assert decision.snapshot_version == 1
    people = APIClient()
    people.force_login(product_user)
    fleet = people.get("/api/v1/fleet").json()
    assert [(g["gateway"], g["state"], g["applied"]) for g in fleet["gateways"]] == [
        ("gw-e2e", "in sync", 1)
    ]


def test_gateway__control_plane_down_at_restart__starts_from_last_known_good(
    control_plane, tmp_path
):
    # Given a gateway that fetched version 1 once
    url, secret = control_plane
    cache = tmp_path / "lkg.json"
    SnapshotSource(
        f"{url}/api/v1/snapshot",
        secret,
        gateway_id="gw-1",
        public_keys=TEST_KEYS,
        cache_path=cache,
    ).poll_once()
    # When it restarts while the control plane cannot be reached
    restarted = SnapshotSource(
        "http://127.0.0.1:9/api/v1/snapshot",
        secret,
        gateway_id="gw-1",
        public_keys=TEST_KEYS,
        cache_path=cache,
        timeout=0.5,
    )
    # Then it enforces version 1 from its file, and a poll fails without harm
    assert restarted.current().version == 1
    assert restarted.poll_once() == PollResult.FAILED
    assert restarted.current().version == 1
