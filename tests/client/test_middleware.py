"""WSGI, ASGI and Django middleware on a real Redis: 429 answered by the middleware, headers on 200."""

from __future__ import annotations

import asyncio
import json
import time
from wsgiref.util import setup_testing_defaults

import pytest
from django.http import HttpResponse

from sluice import AsyncLimiter, Identity, Limiter
from sluice.asgi import RateLimitMiddleware as ASGIMiddleware
from sluice.django import RateLimitMiddleware as DjangoMiddleware
from sluice.wsgi import RateLimitMiddleware as WSGIMiddleware
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot

# Two requests per minute per tenant on search; per IP elsewhere.
RULES = snapshot(
    rules(
        policy("default", "search", limit("tenant", 2, 60, 2)),
        policy("default", "*", limit("ip", 2, 60, 2)),
    )
)


def identify_wsgi(environ):
    return Identity(tenant=environ.get("HTTP_X_TENANT"))


def wsgi_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"results"]


def call_wsgi(app, path, headers=None, remote="10.0.0.1"):
    environ = {"PATH_INFO": path, "REMOTE_ADDR": remote, **(headers or {})}
    setup_testing_defaults(environ)
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"], captured["headers"] = status, dict(response_headers)
        return lambda data: None

    body = b"".join(app(environ, start_response))
    return captured["status"], captured["headers"], body


@pytest.fixture
def limiter(redis_server, redis_client):
    return Limiter(redis_server.url, RULES, timeout=REDIS_TIMEOUT)


def test_wsgi__within_limit__app_answers_with_ratelimit_headers(limiter):
    # Given the middleware around an app
    app = WSGIMiddleware(wsgi_app, limiter, identify=identify_wsgi)
    # When a tenant searches
    status, headers, body = call_wsgi(app, "/v1/search", {"HTTP_X_TENANT": "acme"})
    # Then the app answered, and the headers say what is left
    assert status == "200 OK"
    assert body == b"results"
    assert headers["RateLimit-Policy"] == '"tenant-min";q=2;w=60'
    assert headers["RateLimit"] == '"tenant-min";r=1;t=30'


def test_wsgi__over_limit__429_from_the_middleware_not_the_app(limiter):
    app = WSGIMiddleware(wsgi_app, limiter, identify=identify_wsgi, github_headers=True)
    began = time.monotonic()
    for _ in range(2):
        call_wsgi(app, "/v1/search", {"HTTP_X_TENANT": "acme"})
    status, headers, body = call_wsgi(app, "/v1/search", {"HTTP_X_TENANT": "acme"})
    elapsed = time.monotonic() - began
    assert status == "429 Too Many Requests"
    assert refill_left(30, elapsed, headers["Retry-After"])
    assert headers["X-RateLimit-Remaining"] == "0"
    assert json.loads(body)["error"] == "rate_limited"
    # another tenant is not affected
    other, _, _ = call_wsgi(app, "/v1/search", {"HTTP_X_TENANT": "globex"})
    assert other == "200 OK"


def test_wsgi__forwarded_for__believed_only_from_trusted_proxies(limiter):
    # Given a proxy at 10.0.0.1 that is trusted, and requests on a per-IP route
    app = WSGIMiddleware(wsgi_app, limiter, trusted_proxies=["10.0.0.1"])
    spoofed = {"HTTP_X_FORWARDED_FOR": "198.51.100.7"}
    # When two clients come through the proxy, and one spoofs the header directly
    via_proxy = [call_wsgi(app, "/v1/orders/1", spoofed)[0] for _ in range(3)]
    other_client = call_wsgi(
        app, "/v1/orders/1", {"HTTP_X_FORWARDED_FOR": "198.51.100.8"}
    )
    direct = [
        call_wsgi(app, "/v1/orders/1", spoofed, remote="203.0.113.5")[0]
        for _ in range(3)
    ]
    # Then the forwarded client is limited on its own, and the direct one by its address
    assert via_proxy == ["200 OK", "200 OK", "429 Too Many Requests"]
    assert other_client[0] == "200 OK"
    assert direct == ["200 OK", "200 OK", "429 Too Many Requests"]


def test_asgi__over_limit__429_and_headers_on_admitted_responses(
    redis_server, redis_client
):
    # Given an ASGI app behind the middleware, identifying tenants by header
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"results"})

    def identify(scope):
        return Identity(
            tenant=dict(scope["headers"]).get(b"x-tenant", b"").decode() or None
        )

    async def scenario():
        limiter = AsyncLimiter(redis_server.url, RULES, timeout=REDIS_TIMEOUT)
        middleware = ASGIMiddleware(app, limiter, identify=identify)
        answers = [await call_asgi(middleware, "/v1/search") for _ in range(3)]
        await limiter.aclose()
        return answers

    # When a tenant searches three times
    began = time.monotonic()
    answers = asyncio.run(scenario())
    elapsed = time.monotonic() - began
    # Then two are served with RateLimit fields, the third is a 429 from the middleware
    assert [a[0] for a in answers] == [200, 200, 429]
    assert answers[0][1][b"ratelimit"] == b'"tenant-min";r=1;t=30'
    assert answers[0][2] == b"results"
    retry_after = answers[2][1][b"retry-after"].decode()
    assert refill_left(30, elapsed, retry_after)
    assert json.loads(answers[2][2])["retry_after_seconds"] == int(retry_after)


async def call_asgi(app, path):
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [(b"x-tenant", b"acme")],
        "client": ("10.0.0.1", 5000),
    }
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


def test_django__over_limit__429_and_headers(redis_server, redis_client, settings, rf):
    # Given the Django middleware configured from settings
    settings.SLUICE_LIMITER = Limiter(redis_server.url, RULES, timeout=REDIS_TIMEOUT)
    settings.SLUICE_IDENTIFY = "tests.client.test_middleware.identify_django"
    middleware = DjangoMiddleware(lambda request: HttpResponse("results"))
    # When a tenant searches three times
    began = time.monotonic()
    responses = [
        middleware(rf.get("/v1/search", HTTP_X_TENANT="acme")) for _ in range(3)
    ]
    elapsed = time.monotonic() - began
    # Then two reach the view with headers, the third is answered with 429
    assert [r.status_code for r in responses] == [200, 200, 429]
    prefix, full = responses[1]["RateLimit"].split(";t=")
    assert prefix == '"tenant-min";r=0'
    assert refill_left(60, elapsed, full)
    assert refill_left(30, elapsed, responses[2]["Retry-After"])
    assert responses[2]["Content-Type"] == "application/problem+json"


def identify_django(request):
    return Identity(tenant=request.headers.get("X-Tenant"))


def refill_left(seconds: int, elapsed: float, header: str) -> bool:
    """Whether ``header`` (whole seconds, rounded up) is ``seconds`` of refill less
    what refilled during the ``elapsed`` seconds since the tenant's first request."""
    return seconds - elapsed <= int(header) <= seconds
