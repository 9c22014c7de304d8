"""The integration examples of docs/gateway-integration.md: the WSGI and ASGI services
against a live control plane, and the framework examples' own tests (memory store, no Redis)."""

import asyncio
import importlib.util
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import pytest

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import GatewayToken
from sluice import protocol
from tests.celery_fixtures import wait_until
from tests.conftest import PATIENT_REDIS_TIMEOUT

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


def live(test):
    """A test of a service polling a live control plane."""
    test = pytest.mark.django_db(transaction=True)(test)
    # the live server's poll path waits for its Redis (tests/conftest.py)
    return pytest.mark.usefixtures("patient_poll_redis")(test)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def wiring(live_server, redis_server, tmp_path, django_capture_on_commit_callbacks):
    """The demo rules published on a live control plane, and what a service needs to poll it."""
    from django.core.management import call_command

    call_command("seed_demo", verbosity=0)
    token = token_create(token=GatewayToken(name="example"), actor=Actor.system())
    # The operator saves the published keys once and gives them to the service
    keys = tmp_path / "sluice-keys.json"
    with urllib.request.urlopen(f"{live_server.url}{protocol.SIGNING_KEYS_PATH}") as r:
        keys.write_bytes(r.read())
    return {
        "control_plane": live_server.url,
        "token": token,
        "redis_url": redis_server.url,
        "cache_path": str(tmp_path / "rules.json"),
        "gateway_id": "example-1",
        "public_keys": str(keys),
        # checks decisions, not slowness: a loaded machine must not fail open
        "redis_timeout": PATIENT_REDIS_TIMEOUT,
    }


def _wait_for_rules(app) -> None:
    """Poll (besides the example's own polling) until the rules are there: each poll
    may fail on its 2 s timeout on a loaded machine, so a time bounds it, not a count."""
    source = app.limiter.source

    def has_rules() -> bool:
        if source.current().version >= 1:
            return True
        source.poll_once()
        return source.current().version >= 1

    wait_until(has_rules, every=0.1, why="the example's rules")


@live
def test_wsgi_example__initech_on_free_search__admitted_then_429(wiring):
    # Given the WSGI example, polling the control plane (free search: 5 / s, burst 10 per tenant)
    app = _load("wsgi_service").build(**wiring)
    _wait_for_rules(app)
    statuses, headers = [], {}

    def start_response(status, response_headers, exc_info=None):
        statuses.append(status)
        headers.update(response_headers)

    # When initech calls search at once, until it is limited (a fixed number of calls
    # could all be admitted on a machine slow enough for the bucket to refill meanwhile)
    while not statuses or statuses[-1] == "200 OK":
        assert len(statuses) < 1000, "never limited"
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/v1/search",
            "myapp.tenant": "initech",
            "myapp.user_id": f"u{len(statuses)}",
        }
        setup_testing_defaults(environ)
        b"".join(app(environ, start_response))
    # Then the burst is admitted, then 429 with Retry-After and the RateLimit fields
    assert statuses[:10] == ["200 OK"] * 10
    assert statuses[-1].startswith("429")
    assert "Retry-After" in headers
    assert "RateLimit-Policy" in headers
    app.limiter.source.stop()


@live
def test_asgi_example__admitted_with_ratelimit_headers(wiring):
    app = _load("asgi_service").build(**wiring)
    _wait_for_rules(app)
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/search",
        "headers": [],
        "client": ("203.0.113.9", 5000),
        "state": {"tenant": "acme"},
    }
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    assert start["status"] == 200
    assert any(name.lower() == b"ratelimit" for name, _ in start["headers"]), start
    app.limiter.source.stop()


@pytest.mark.parametrize("framework", ["fastapi", "flask", "aiohttp", "django"])
def test_framework_example__its_own_tests__pass_on_the_memory_store_without_redis(
    framework,
):
    # Given an example app and its tests, as a team keeps them (docs/examples/)
    test_file = EXAMPLES / f"test_{framework}_app.py"
    # When they run on their own: no Redis URL, no control plane, no settings of ours
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "REDIS"))
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", test_file.name],
        cwd=EXAMPLES,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    # Then every one of them passes (none skipped)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    assert "skipped" not in result.stdout
    assert "failed" not in result.stdout
