"""Envoy, nginx, HAProxy and Traefik, the real binaries, enforcing Sluice's rules.

Each runs its configuration from ``docs/gateways/`` in front of a backend,
with the decision service (``sluice-decide``) and a real Redis behind it.
"""

from __future__ import annotations

import math

import pytest

from tests.client.factories import ROUTES, concurrent, limit, policy, rules, snapshot
from tests.gateways.conftest import GATEWAYS

#: Gateways that put the RateLimit fields of an admitted request on its response.
#: Traefik copies them onto the request it forwards upstream only.
ON_THE_RESPONSE = ("envoy", "nginx", "haproxy")


@pytest.mark.parametrize("name", GATEWAYS)
def test_gateway__burst_then_more__429_with_retry_after_ratelimit_and_problem_body(
    stack_of, name
):
    # Given a gateway whose rules allow a tenant 3 searches, then one per 10 s
    stack = stack_of(name)
    # When the tenant searches four times in a row
    answers = [stack.get("/v1/search?q=x", tenant="acme") for _ in range(4)]
    # Then three are served by the backend, the fourth is refused with a 429
    assert [a.status for a in answers] == [200, 200, 200, 429]
    served = answers[:3]
    assert all(a.json()["path"] == "/v1/search?q=x" for a in served)
    # and the admitted ones carry the RateLimit fields (Traefik: upstream only)
    fields = [
        a.headers if name in ON_THE_RESPONSE else a.json()["headers"] for a in served
    ]
    assert [f["ratelimit-policy"] for f in fields] == ['"tenant-min";q=3;w=30'] * 3
    left = [_item(f["ratelimit"]) for f in fields]  # (name, r, t)
    assert [(name, r) for name, r, _ in left] == [("tenant-min", n) for n in (2, 1, 0)]
    # t: until the bucket is full again, 10 s per spent token (less the time passed)
    assert [t for _, _, t in left] == sorted(t for _, _, t in left)
    assert 5 <= left[0][2] <= 10
    assert 25 <= left[2][2] <= 30
    # and the 429 carries Retry-After, the RateLimit fields and the problem+json body
    refused = answers[3]
    assert refused.headers["content-type"] == "application/problem+json"
    wait = int(refused.headers["retry-after"])
    assert 1 <= wait <= 10
    assert refused.headers["ratelimit"] == f'"tenant-min";r=0;t={wait}'
    assert refused.headers["ratelimit-policy"] == '"tenant-min";q=3;w=30'
    assert refused.headers["x-ratelimit-remaining"] == "0"
    problem = refused.json()
    assert problem["type"].endswith("#quota-exceeded")
    assert (problem["status"], problem["error"]) == (429, "rate_limited")
    assert problem["violated-policies"] == ["tenant-min"]
    assert problem["retry_after_seconds"] == wait
    # and the backend never saw the refused request
    assert stack.backend.served >= 3


@pytest.mark.parametrize("name", GATEWAYS)
def test_gateway__decision_service_killed__each_route_its_documented_behaviour(
    stack_of, name
):
    # Given a gateway whose decision service has answered once
    stack = stack_of(name)
    assert stack.get("/v1/search", tenant="acme").status == 200
    # When the decision service dies
    stack.service.kill()
    closed = stack.get("/v1/orders/7", tenant="acme")
    opened = stack.get("/v1/search", tenant="acme")
    # Then (docs/gateways/): Traefik's forwardAuth answers 500 on every route;
    # elsewhere a route that fails closed gets the middlewares' 503, one that
    # fails open is served
    if name == "traefik":
        assert (closed.status, opened.status) == (500, 500)
        return
    assert closed.status == 503
    assert closed.headers["retry-after"] == "1"
    assert closed.json()["error"] == "limiter_unavailable"
    assert opened.status == 200
    assert opened.json()["path"] == "/v1/search"


@pytest.mark.parametrize("name", GATEWAYS)
def test_gateway__redis_down__closed_route_503_open_route_admitted(
    stack_of, name, redis_server
):
    # Given a gateway whose decision service decided in Redis once
    stack = stack_of(name)
    assert stack.get("/v1/orders/7", tenant="acme").status == 200
    # When the buckets' Redis dies
    redis_server.kill()
    try:
        closed = stack.get("/v1/orders/7", tenant="globex")
        opened = stack.get("/v1/search", tenant="globex")
    finally:
        redis_server.start()
    # Then the route that fails closed gets the middlewares' 503 with Retry-After
    assert closed.status == 503
    assert closed.headers["content-type"] == "application/problem+json"
    assert closed.headers["retry-after"] == "1"
    assert closed.json()["error"] == "limiter_unavailable"
    # and the route that fails open is served, without RateLimit fields (degraded)
    assert opened.status == 200
    assert "ratelimit" not in opened.headers


def test_two_envoys__one_redis__share_one_budget(stack_of, redis_client):
    # Given two Envoys, each with its own decision service, on one Redis, and a
    # search limit of 40 / s with a burst of 40 per tenant
    from tests.client.factories import ROUTES, limit, policy, rules, snapshot

    shared = snapshot(
        rules(policy("default", "search", limit("tenant", 40, 1, 40)), routes=ROUTES)
    )
    one, two = stack_of("envoy", shared), stack_of("envoy", shared)
    # When both are hammered by the same tenant for about two seconds
    decided, unchecked, elapsed = hammer([one.port, two.port], seconds=2.0)
    # Then together they admit what one bucket allows: burst + rate x elapsed.
    # Only what Sluice decided counts (its answers carry RateLimit fields): on a
    # busy machine Envoy itself admits a search whose decision took longer than
    # the filter's 0.1 s timeout (failure_mode_deny: false, the documented open
    # side of an unreachable service).
    budget = 40 + 40 * elapsed
    print(
        f"two envoys: {decided} admitted by Sluice in {elapsed:.2f} s, budget "
        f"{budget:.0f} ({decided / budget:.1%}); {unchecked} admitted by Envoy alone"
    )
    assert decided <= math.ceil(budget)
    assert decided + unchecked >= 0.95 * budget


def _item(field: str) -> tuple[str, int, int]:
    """``"tenant-min";r=2;t=10`` -> ("tenant-min", 2, 10)."""
    name, r, t = field.split(";")
    return name.strip('"'), int(r.removeprefix("r=")), int(t.removeprefix("t="))


def hammer(ports: list[int], *, seconds: float) -> tuple[int, int, float]:
    """Send searches of one tenant through ``ports`` from 8 threads.

    Return (200s with RateLimit fields, 200s without them, window). The window
    runs from before the first request to the answer of the last admitted one:
    every admitting decision happened inside it.
    """
    import threading
    import time

    from tests.gateways.conftest import call

    decided: list[int] = []
    unchecked: list[int] = []
    last: list[float] = []
    start = time.monotonic()
    stop = start + seconds

    def worker(port: int) -> None:
        ok, alone, seen = 0, 0, start
        while time.monotonic() < stop:
            answer = call(port, "/v1/search", tenant="acme")
            if answer.status == 200:
                seen = time.monotonic()
                if "ratelimit" in answer.headers:
                    ok += 1
                else:
                    alone += 1
        decided.append(ok)
        unchecked.append(alone)
        last.append(seen)

    threads = [threading.Thread(target=worker, args=(p,)) for p in ports * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return sum(decided), sum(unchecked), max(last) - start


def _one_order_at_a_time():
    """orders.create capped at one request in flight per tenant (and 100/s)."""
    return snapshot(
        rules(
            policy(
                "default",
                "orders.create",
                limit("tenant", 100, 1, 100),
                concurrency=(concurrent("tenant", 1),),
            ),
            routes=ROUTES,
        )
    )


def test_haproxy__concurrency_limit__slot_released_when_the_response_starts(stack_of):
    # Given orders.create with at most one request in flight per tenant
    stack = stack_of("haproxy", _one_order_at_a_time())
    # When one tenant places five orders, one after the other
    statuses = [
        stack.get("/v1/orders", tenant="acme", method="POST").status for _ in range(5)
    ]
    # Then each is served: sluice.lua gives the slot back as each response starts
    assert statuses == [200] * 5


def test_envoy__concurrency_limit__slot_held_until_its_timeout(stack_of):
    # Given the same cap behind Envoy, which does not report the end of a request
    stack = stack_of("envoy", _one_order_at_a_time())
    # When one tenant places two orders, one after the other
    first = stack.get("/v1/orders", tenant="acme", method="POST")
    second = stack.get("/v1/orders", tenant="acme", method="POST")
    # Then the second waits for the first slot's timeout (docs/gateways/README.md)
    assert (first.status, second.status) == (200, 429)
    assert second.json()["error"] == "too_many_concurrent_requests"
