"""Envoy asking Sluice through its ext_authz filter in HTTP mode (docs/gateways/envoy-ext-authz.yaml).

The real Envoy runs the documented file in front of the backend; each request
is checked with the decision service's HTTP face (``/v1/decide`` + its path,
its own method), on a real Redis.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import replace

from sluice import STREAM_KEY, FailureMode
from tests.celery_fixtures import wait_until
from tests.client.factories import ROUTES, limit, policy, rules, snapshot
from tests.gateways.test_service_deadlines import health, redis_held

NAME = "envoy_ext_authz"

#: The demo's split: orders.create (POST /v1/orders) fails closed, and so does
#: orders.read (GET /v1/orders/{id}) here, which the Envoy file leaves on the
#: filter that fails open (it knows only the demo's split); search fails open.
ROUTES_DEMO = {
    **ROUTES,
    "orders.create": replace(ROUTES["orders.create"], failure_mode=FailureMode.CLOSED),
}

#: 3 searches per tenant, then one every 10 s; 2 orders (2 tokens each), then 2 a minute.
RULES = snapshot(
    rules(
        policy("default", "search", limit("tenant", 6, 60, 3)),
        policy("default", "orders.read", limit("tenant", 6, 60, 3)),
        policy("default", "orders.create", limit("tenant", 2, 60, 4)),
        routes=ROUTES_DEMO,
    )
)


def test_ext_authz__burst_then_more__ratelimit_fields_then_429_problem(stack_of):
    # Given Envoy checking with the decision service: 3 searches, then one per 10 s
    stack = stack_of(NAME, RULES)
    served_before = stack.backend.served
    # When a tenant searches four times in a row
    began = time.monotonic()
    answers = [stack.get("/v1/search?q=x", tenant="acme") for _ in range(4)]
    elapsed = time.monotonic() - began
    # Then three are served, with the query, and carry the RateLimit fields
    assert [a.status for a in answers] == [200, 200, 200, 429]
    served = answers[:3]
    assert [a.json()["path"] for a in served] == ["/v1/search?q=x"] * 3
    assert [a.headers["ratelimit-policy"] for a in served] == [
        '"tenant-min";q=3;w=30'
    ] * 3
    assert [a.headers["ratelimit"].split(";")[1] for a in served] == [
        "r=2",
        "r=1",
        "r=0",
    ]
    # and the fourth is Sluice's 429: Retry-After, the fields, the problem+json body
    refused = answers[3]
    wait = int(refused.headers["retry-after"])
    assert max(1, math.ceil(10 - elapsed)) <= wait <= 10
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["ratelimit"] == f'"tenant-min";r=0;t={wait}'
    assert refused.headers["ratelimit-policy"] == '"tenant-min";q=3;w=30'
    problem = refused.json()
    assert (problem["status"], problem["error"]) == (429, "rate_limited")
    assert problem["violated-policies"] == ["tenant-min"]
    # and what the filter asked for on the way is not shown to the client
    assert "sluice-status" not in refused.headers
    assert "sluice-problem" not in refused.headers
    # and the backend saw the three admitted searches only
    assert stack.backend.served - served_before == 3


def test_ext_authz__method_and_path_of_the_request__decide_its_route(stack_of):
    # Given orders.create (POST /v1/orders) allowed 2 orders a minute per tenant
    stack = stack_of(NAME, RULES)
    # When a tenant lists its orders three times, then places three orders
    listed = [stack.get("/v1/orders", tenant="acme").status for _ in range(3)]
    placed = [
        stack.get("/v1/orders", tenant="acme", method="POST").status for _ in range(3)
    ]
    # Then the GETs are not orders.create (no limit of theirs), the POSTs are
    assert listed == [200, 200, 200]
    assert placed == [200, 200, 429]


def test_ext_authz__check_of_a_path__decides_that_path_and_method_not_the_headers(
    stack_of,
):
    # Given the decision service (orders.create: 4 tokens, 2 per order; search: 3)
    stack = stack_of(NAME, RULES)
    url = f"http://127.0.0.1:{stack.service.http_port}/v1/decide/v1/orders?ref=1"
    # When it is asked as ext_authz asks, with headers that name another request
    headers = {
        "X-Tenant": "acme",
        "X-Forwarded-Method": "GET",
        "X-Forwarded-Uri": "/v1/search",
    }
    answers = [_post(url, headers) for _ in range(3)]
    # Then the prefix's target and the method decide: orders.create, 2 orders
    assert [status for status, _ in answers] == [200, 200, 429]
    assert answers[0][1]["ratelimit-policy"] == '"tenant-min";q=4;w=120'


def _post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, data=b"", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}


def test_ext_authz__redis_down__closed_routes_503_open_route_served(
    stack_of, redis_server
):
    # Given Envoy whose decision service decided in Redis once
    stack = stack_of(NAME, RULES)
    assert stack.get("/v1/orders/7", tenant="acme").status == 200
    # When the buckets' Redis dies
    redis_server.kill()
    try:
        placed = stack.get("/v1/orders", tenant="globex", method="POST")
        read = stack.get("/v1/orders/7", tenant="globex")
        searched = stack.get("/v1/search", tenant="globex")
    finally:
        redis_server.start()
    # Then the routes that fail closed in Sluice get its 503, whichever filter
    # asked (orders.read is on the one that fails open when the service is down)
    for closed in (placed, read):
        assert closed.status == 503
        assert closed.headers["content-type"] == "application/problem+json"
        assert int(closed.headers["retry-after"]) >= 1
        assert closed.json()["error"] == "limiter_unavailable"
    # and the route that fails open is served by the in-process bucket, which says so
    assert searched.status == 200
    assert searched.headers["sluice-degraded"] == "open"
    assert "ratelimit" in searched.headers


def test_ext_authz__decision_service_killed__failure_mode_allow_decides(stack_of):
    # Given Envoy whose decision service has answered once
    stack = stack_of(NAME, RULES)
    assert stack.get("/v1/search", tenant="acme").status == 200
    # When the decision service dies
    stack.service.kill()
    placed = stack.get("/v1/orders", tenant="acme", method="POST")
    opened = {
        path: stack.get(path, tenant="acme")
        for path in ("/v1/search", "/v1/orders/7", "/v1/orders")
    }
    # Then the route the file puts behind the filter with failure_mode_allow:
    # false (POST /v1/orders) gets its status_on_error, 503, with the middlewares'
    # Retry-After and body (local_reply_config)
    assert placed.status == 503
    assert placed.headers["retry-after"] == "1"
    assert placed.headers["content-type"] == "application/problem+json"
    assert placed.json()["error"] == "limiter_unavailable"
    # and every other route is served by failure_mode_allow: true, unlimited and
    # without RateLimit fields
    assert {path: a.status for path, a in opened.items()} == {
        "/v1/search": 200,
        "/v1/orders/7": 200,
        "/v1/orders": 200,
    }
    assert [a.json()["path"] for a in opened.values()] == list(opened)
    assert all("ratelimit" not in a.headers for a in opened.values())


def test_ext_authz__service_slower_than_envoy__envoy_s_own_answers_recorded_once(
    stack_of, redis_server, redis_client
):
    # Given Envoy at its documented timeout for the service (0.25 s), and the
    # service with a budget far above it (5 s): a slow decision is Envoy's
    stack = stack_of(NAME, RULES, gateway_documented=True, budget=5)
    answered = stack.get("/v1/search?q=x", tenant="hooli")
    assert answered.status == 200
    assert "ratelimit" in answered.headers  # Sluice's answer
    # When a tenant searches and another places an order while the service's
    # Redis holds its calls
    with redis_held(redis_server.url):
        searched = stack.get("/v1/search?q=x", tenant="hooli")
        placed = stack.get("/v1/orders", tenant="initech", method="POST")
    # Then Envoy answered each itself: failure_mode_allow served the search
    # (no RateLimit fields: not Sluice's answer), the order's filter refused it
    assert searched.status == 200
    assert "ratelimit" not in searched.headers
    assert placed.status == 503
    assert placed.json()["error"] == "limiter_unavailable"
    # and once the service has finished both calls, each is in the stream once,
    # as Envoy's decision with its tenant and route: from Envoy's access log,
    # not again from the connection Envoy closed on the service; the request
    # Sluice answered is there as Sluice's decision only (not in the log)
    wait_until(
        lambda: health(stack.service)["in_flight"] == 0,
        timeout=60,
        every=0.05,
        why="the service to finish the calls Envoy gave up on",
    )
    events = stream_records(redis_client, expected=3)
    assert events == Counter(
        {
            ("hooli", "search", "allowed"): 1,
            ("hooli", "search", "gateway_timeout"): 1,
            ("initech", "orders.create", "gateway_timeout"): 1,
        }
    )
    assert health(stack.service)["gateway_timeouts"] == 2


def stream_records(redis_client, *, expected: int) -> Counter:
    """(tenant, route, outcome) counts in the decision stream, once it holds
    ``expected`` events (they are flushed in the background)."""

    def counted():
        counts: Counter = Counter()
        for _, fields in redis_client.xrange(STREAM_KEY):
            for record in json.loads(fields[b"events"]):
                counts[(record[1], record[2], record[5])] += record[-1]
        return counts if sum(counts.values()) >= expected else None

    return wait_until(counted, timeout=60, every=0.1, why=f"{expected} events")
