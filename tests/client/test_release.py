"""The middlewares release concurrency slots when the response ends: streamed, failed or not."""

from __future__ import annotations

import asyncio
from wsgiref.util import setup_testing_defaults

import pytest
from django.http import HttpResponse, StreamingHttpResponse

from sluice import AsyncLimiter, Identity, Limiter
from sluice.asgi import RateLimitMiddleware as ASGIMiddleware
from sluice.django import RateLimitMiddleware as DjangoMiddleware
from sluice.wsgi import RateLimitMiddleware as WSGIMiddleware
from tests.client.factories import (
    REDIS_TIMEOUT,
    concurrent,
    limit,
    policy,
    rules,
    snapshot,
)

RULES = snapshot(
    rules(
        policy(
            "default",
            "search",
            limit("tenant", 1000, 1, 1000),
            concurrency=(concurrent("tenant", 1),),
        )
    )
)
INFLIGHT = "rl:{tenant:acme}:route:search:tenant:acme:inflight"


def acme(request) -> Identity:
    return Identity(tenant="acme")


@pytest.fixture
def limiter(redis_server, redis_client):
    return Limiter(redis_server.url, RULES, timeout=REDIS_TIMEOUT)


def environ() -> dict:
    env = {"PATH_INFO": "/v1/search", "REMOTE_ADDR": "10.0.0.1"}
    setup_testing_defaults(env)
    return env


def start_response(status, headers, exc_info=None):
    return lambda data: None


def test_wsgi__streamed_body__slot_held_until_the_server_closes_it(
    limiter, redis_client
):
    # Given an app that streams its body, behind a cap of one request in flight
    def app(environ, start):
        start("200 OK", [])
        yield b"part 1"
        yield b"part 2"

    middleware = WSGIMiddleware(app, limiter, identify=acme)
    # When the server has sent part of the body
    body = middleware(environ(), start_response)
    first = next(iter(body))
    # Then the slot is still held, and a second request is refused
    statuses = []
    middleware(environ(), lambda status, headers: statuses.append(status))
    assert first == b"part 1"
    assert redis_client.zcard(INFLIGHT) == 1
    assert statuses == ["429 Too Many Requests"]
    # until the server closes the body
    body.close()
    assert redis_client.zcard(INFLIGHT) == 0


def test_wsgi__app_raises__slot_released(limiter, redis_client):
    def app(environ, start):
        raise RuntimeError("backend down")

    middleware = WSGIMiddleware(app, limiter, identify=acme)
    with pytest.raises(RuntimeError):
        middleware(environ(), start_response)
    assert redis_client.zcard(INFLIGHT) == 0


@pytest.mark.parametrize("fails", [False, True])
def test_asgi__app_returns_or_raises__slot_released(redis_server, redis_client, fails):
    # Given an ASGI app that streams two chunks (or fails after the first)
    seen = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"1", "more_body": True})
        seen.append(redis_client.zcard(INFLIGHT))
        if fails:
            raise RuntimeError("backend down")
        await send({"type": "http.response.body", "body": b"2"})

    async def scenario():
        limiter = AsyncLimiter(redis_server.url, RULES, timeout=REDIS_TIMEOUT)
        middleware = ASGIMiddleware(app, limiter, identify=acme)
        scope = {"type": "http", "method": "GET", "path": "/v1/search", "headers": []}

        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            pass

        try:
            await middleware(scope, receive, send)
        finally:
            await limiter.aclose()

    # When it runs to its end
    if fails:
        with pytest.raises(RuntimeError):
            asyncio.run(scenario())
    else:
        asyncio.run(scenario())
    # Then the slot was held while it streamed, and released after
    assert seen == [1]
    assert redis_client.zcard(INFLIGHT) == 0


def test_django__streaming_response__released_when_django_closes_it(
    limiter, redis_client, settings, rf, django_db_blocker
):
    # Given a view that streams, behind the Django middleware
    settings.SLUICE_LIMITER = limiter
    settings.SLUICE_IDENTIFY = "tests.client.test_release.acme"
    middleware = DjangoMiddleware(
        lambda request: StreamingHttpResponse(iter([b"a", b"b"]))
    )
    # When the response has been produced but not yet sent
    response = middleware(rf.get("/v1/search"))
    # Then the slot is held until Django closes the response
    assert redis_client.zcard(INFLIGHT) == 1
    assert b"".join(response.streaming_content) == b"ab"
    with (
        django_db_blocker.unblock()
    ):  # close() sends request_finished: Django checks its DB connections
        response.close()
    assert redis_client.zcard(INFLIGHT) == 0


def test_django__plain_response_or_exception__released_at_once(
    limiter, redis_client, settings, rf
):
    settings.SLUICE_LIMITER = limiter
    settings.SLUICE_IDENTIFY = "tests.client.test_release.acme"
    plain = DjangoMiddleware(lambda request: HttpResponse("ok"))
    assert plain(rf.get("/v1/search")).status_code == 200
    assert redis_client.zcard(INFLIGHT) == 0

    def broken(request):
        raise RuntimeError("backend down")

    with pytest.raises(RuntimeError):
        DjangoMiddleware(broken)(rf.get("/v1/search"))
    assert redis_client.zcard(INFLIGHT) == 0
