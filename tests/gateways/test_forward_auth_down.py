"""The gateways with their decision service down: each route of the demo rules
gets its failure mode from the gateway's own configuration, at once.

The gateways cannot ask Sluice for a route's failure mode when Sluice is down:
``docs/gateways/`` repeats the demo's split (``orders.create`` closed, every other
route open; ``reports.export`` is ``local``, and a gateway has no bucket of its
own). These tests hold each configuration to that split and to the time it takes.
"""

from __future__ import annotations

import statistics
import time

import pytest

from limits.management.commands import seed_demo
from sluice import FailureMode, Route
from tests.client.factories import rules, snapshot
from tests.gateways.conftest import GATEWAYS, Answer

#: The demo's routes (``make run``, ``seed_demo``), as the decision service gets them.
DEMO_ROUTES = {
    slug: Route(slug, tuple(methods), path, cost, FailureMode(mode))
    for slug, methods, path, cost, mode, _ in seed_demo.ROUTES
}
DEMO = snapshot(rules(routes=DEMO_ROUTES))

#: One request on each route of the demo, as a client sends it.
REQUESTS = {
    "search": ("GET", "/v1/search?q=x"),
    "orders.read": ("GET", "/v1/orders/7"),
    "orders.list": ("GET", "/v1/orders"),
    "orders.create": ("POST", "/v1/orders"),
    "reports.export": ("POST", "/v1/reports/7/export"),
}

#: Seconds: HAProxy 2.6's core.httpclient took 3 s a request when the service's
#: port was closed (3 retries, a second apart). A refused connection is decided
#: at once; this bound only says "no retries", however busy the machine is.
AT_ONCE = 2.0


def test_demo_requests__cover_every_demo_route():
    assert set(REQUESTS) == set(DEMO_ROUTES)


@pytest.mark.parametrize("name", GATEWAYS)
def test_gateway__decision_service_killed__each_demo_route_its_failure_mode_at_once(
    stack_of, name
):
    # Given a gateway in front of the demo rules, whose decision service answered
    stack = stack_of(name, DEMO)
    assert stack.get("/v1/search", tenant="acme").status == 200
    served_before = stack.backend.served
    # When the decision service dies (its port refuses connections)
    stack.service.kill()
    answers, took = {}, []
    for route, (method, path) in REQUESTS.items():
        began = time.monotonic()
        answers[route] = stack.get(path, tenant="acme", method=method)
        took.append(time.monotonic() - began)
    # Then the route that fails closed gets a 503 with Retry-After
    closed = answers.pop("orders.create")
    assert (closed.status, closed.headers["retry-after"]) == (503, "1")
    _assert_unavailable_body(name, closed)
    # and every other route reaches the backend, with its method and path
    statuses = {route: a.status for route, a in answers.items()}
    assert statuses == dict.fromkeys(answers, 200)
    echoed = {
        route: (a.json()["method"], a.json()["path"]) for route, a in answers.items()
    }
    assert echoed == {route: REQUESTS[route] for route in answers}
    assert stack.backend.served - served_before == len(answers)
    # and each answer came at once: no retries of the refused connection
    print(f"{name}: " + ", ".join(f"{t * 1000:.0f} ms" for t in took))
    assert max(took) < AT_ONCE
    assert statistics.median(took) < AT_ONCE / 2


def _assert_unavailable_body(name: str, closed: Answer) -> None:
    """The 503's body: Sluice's problem+json, except through Traefik, which
    hosts no body of its own (docs/gateways/traefik.md)."""
    if name == "traefik":
        assert closed.body == b""
        return
    assert closed.headers["content-type"] == "application/problem+json"
    problem = closed.json()
    assert (problem["status"], problem["error"]) == (503, "limiter_unavailable")
