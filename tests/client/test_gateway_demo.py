"""The demo gateway end to end: rules from a control plane, Redis buckets, 429 when hammered."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from gateway.demo import build, serve
from sluice import Bundle
from tests.client.factories import ROUTES, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer

# search: 3 per minute per tenant; everything else: 100 per second per IP
RULES = snapshot(
    rules(
        policy("default", "search", limit("tenant", 3, 60, 3)),
        policy("default", "*", limit("ip", 100, 1, 100)),
        routes=ROUTES,
    )
)


@pytest.fixture
def gateway(redis_server, redis_client, tmp_path):
    control_plane = ProtocolServer().start()
    control_plane.serve(Bundle(RULES))
    env = {
        "SLUICE_CONTROL_PLANE_URL": control_plane.url.removesuffix("/api/v1/snapshot"),
        "SLUICE_GATEWAY_TOKEN": control_plane.token,
        "SLUICE_GATEWAY_ID": "demo-test",
        "SLUICE_REDIS_URL": redis_server.url,
        "SLUICE_REDIS_TIMEOUT": "1.0",  # counts must not depend on a busy machine
        "SLUICE_SNAPSHOT_CACHE": str(tmp_path / "bundle.json"),
        "SLUICE_POLL_INTERVAL": "0.05",
    }
    built = build(env)
    built.source.start()
    server = serve(built, "127.0.0.1", 0)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    deadline = time.monotonic() + 10
    while built.source.current().version != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{server.server_address[1]}", control_plane, built
    server.shutdown()
    server.server_close()
    built.source.stop()
    control_plane.stop()


def get(url, tenant):
    request = urllib.request.Request(url, headers={"X-Tenant": tenant})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_demo_gateway__hammered__429_with_headers_after_the_limit(gateway):
    # Given the demo gateway running on the rules of the control plane
    base, control_plane, built = gateway
    # When a tenant searches four times in a row
    answers = [get(f"{base}/v1/search?q=widget", "acme") for _ in range(4)]
    # Then three are served by the backend with RateLimit fields, the fourth is a 429
    assert [status for status, _, _ in answers] == [200, 200, 200, 429]
    assert answers[0][1]["RateLimit-Policy"] == '"tenant-min";q=3;w=60'
    assert answers[2][1]["RateLimit"] == '"tenant-min";r=0;t=60'
    _, headers, body = answers[3]
    assert headers["Retry-After"] == "20"
    assert headers["X-RateLimit-Remaining"] == "0"
    assert json.loads(body)["error"] == "rate_limited"
    # and the gateway tells the control plane who it is and which version it runs
    built.source.poll_once()
    assert control_plane.requests[-1]["Sluice-Gateway-Id"] == "demo-test"
    assert control_plane.requests[-1]["Sluice-Applied-Version"] == "1"


def test_demo_gateway__other_routes__served_by_the_backends(gateway):
    base, _, _ = gateway
    status, _, body = get(f"{base}/v1/orders/17", "acme")
    assert status == 200
    assert json.loads(body) == {"order": "17", "status": "shipped"}
