"""A request's declared cost within the bounds its route allows (``Route.max_cost``):
the format, validation, the one rule (``rules.request_cost``) and decisions of both
kinds on Redis (plain and Cluster)."""

from __future__ import annotations

import logging

import pytest

from sluice import Limiter, SnapshotError, validate_rules
from sluice.model import (
    Dimension,
    FailureMode,
    Route,
    SlidingWindow,
    parse_route,
)
from sluice.rules import CostRefusal, request_cost
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot

#: reports cost 5 unless a request declares otherwise, up to 50
REPORTS = Route("reports", ("POST",), "/v1/reports", 5, FailureMode.OPEN, max_cost=50)
#: costs 5, and takes no declared cost
EXPORTS = Route("exports", ("POST",), "/v1/exports", 5, FailureMode.OPEN)
ROUTES = {"reports": REPORTS, "exports": EXPORTS}


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "declared", "cost", "refusal"),
    [
        (REPORTS, None, 5, None),
        (REPORTS, 30, 30, None),
        (REPORTS, 1, 1, None),  # less than the route's cost: taken
        (REPORTS, 50, 50, None),
        (REPORTS, 51, 50, CostRefusal.ABOVE_MAX),
        (REPORTS, 1_000_000, 50, CostRefusal.ABOVE_MAX),
        (EXPORTS, None, 5, None),
        (EXPORTS, 5, 5, None),
        (EXPORTS, 30, 5, CostRefusal.NOT_TAKEN),
        (None, None, 1, None),
        (None, 30, 1, CostRefusal.NOT_TAKEN),
    ],
)
def test_request_cost__declared__bounded_by_the_route(route, declared, cost, refusal):
    # When a request of the route declares a cost (or none)
    # Then it is decided at the cost the route allows, and says why when not its own
    assert request_cost(route, declared) == (cost, refusal)


# -- the format -------------------------------------------------------------------------


def test_route__without_max_cost__writes_no_member():
    # Given a route that takes no declared cost (every route before max_cost)
    # Then its document has no max_cost member: older snapshots keep their bytes
    assert "max_cost" not in EXPORTS.to_json()


def test_route__with_max_cost__reads_back():
    # Given a route with a max cost / When it is written and read back
    data = REPORTS.to_json()
    # Then the member is there and the route is the same
    assert data["max_cost"] == 50
    assert parse_route("reports", data) == REPORTS


@pytest.mark.parametrize("bad", [0, -1, "50", 1.5])
def test_route__bad_max_cost__snapshot_error_names_it(bad):
    # Given a route document whose max_cost is not a whole number from 1
    data = {**REPORTS.to_json(), "max_cost": bad}
    # When it is read / Then the error names the member
    with pytest.raises(SnapshotError) as raised:
        parse_route("reports", data, "rules.routes.reports")
    assert raised.value.path == "rules.routes.reports.max_cost"


# -- validation -------------------------------------------------------------------------


def _problems(*policies, routes=ROUTES):
    return {
        (p.kind, p.key, p.field)
        for p in validate_rules(rules(*policies, routes=routes))
    }


def test_validate__max_cost_below_cost__route_problem():
    # Given a route whose max cost is below its own cost
    routes = {"reports": Route("reports", ("POST",), "/v1/r", 5, max_cost=4)}
    # Then validation names the route's max_cost
    assert ("route", "reports", "max_cost") in _problems(routes=routes)


@pytest.mark.parametrize(
    "shallow",
    [
        limit("tenant", 100, 60, 49),
        SlidingWindow(Dimension.TENANT, 49, 60),
    ],
    ids=["gcra", "sliding_window"],
)
def test_validate__limit_below_max_cost__policy_problem(shallow):
    # Given a limit of the route that holds less than its max cost of 50
    # Then validation refuses it: a request declaring 50 could never pass
    assert any(
        kind == "policy" and key == "default/reports"
        for kind, key, _ in _problems(policy("default", "reports", shallow))
    )


def test_validate__limit_holds_max_cost__no_problem():
    # Given each kind holding the route's max cost
    holds = policy(
        "default",
        "reports",
        limit("tenant", 100, 60, 50),
        SlidingWindow(Dimension.USER, 50, 60),
    )
    # Then nothing is wrong
    assert _problems(holds) == set()


# -- decisions on Redis -----------------------------------------------------------------


def _limiter(store, *limits):
    return Limiter(
        store.client,
        snapshot(rules(policy("default", "reports", *limits), routes=ROUTES)),
        timeout=REDIS_TIMEOUT,
    )


KINDS = [
    pytest.param(limit("tenant", 1, 3600, 100), id="gcra"),
    pytest.param(SlidingWindow(Dimension.TENANT, 100, 3600), id="sliding_window"),
]


@pytest.mark.parametrize("kind", KINDS)
def test_declared_cost__within_bound__charged_on_every_kind(store, kind):
    # Given 100 per hour for a tenant on a route taking declared costs up to 50
    limiter = _limiter(store, kind)
    # When the gateway declares 30, 50, 20, then 1
    decisions = [
        limiter.decide(route="reports", tenant="acme", cost=c) for c in (30, 50, 20, 1)
    ]
    # Then each is charged as declared: 100 fit, then not 1 more
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert decisions[0].remaining == 70
    assert all(d.declared_cost is None for d in decisions)


@pytest.mark.parametrize("kind", KINDS)
def test_declared_cost__above_bound__charged_at_the_bound(store, kind):
    # Given the same limit
    limiter = _limiter(store, kind)
    # When the gateway declares a million
    decision = limiter.decide(route="reports", tenant="acme", cost=1_000_000)
    # Then the request is decided at the route's max cost of 50, and says so
    assert decision.allowed
    assert decision.remaining == 50
    assert decision.declared_cost == 1_000_000
    # And the other 50 are left: 50 more fit, then not 1 more
    more = [limiter.decide(route="reports", tenant="acme", cost=c) for c in (50, 1)]
    assert [d.allowed for d in more] == [True, False]


@pytest.mark.parametrize("kind", KINDS)
def test_declared_cost__route_takes_none__charged_the_route_cost(store, kind):
    # Given the limit on a route of cost 5 that takes no declared cost
    limiter = Limiter(
        store.client,
        snapshot(rules(policy("default", "exports", kind), routes=ROUTES)),
        timeout=REDIS_TIMEOUT,
    )
    # When the gateway declares 40
    decision = limiter.decide(route="exports", tenant="acme", cost=40)
    # Then the route's cost of 5 is charged
    assert decision.allowed
    assert decision.remaining == 95
    assert decision.declared_cost == 40


def test_declared_cost__refused__logged_once_then_quiet(caplog, store):
    # Given a limiter and a gateway that keeps declaring a cost the route refuses
    limiter = _limiter(store, limit("tenant", 1, 3600, 100))
    caplog.set_level(logging.DEBUG, logger="sluice.limiter")
    # When it does so three times, twice for another reason
    for _ in range(3):
        limiter.decide(route="exports", tenant="acme", cost=40)
    # Then at most one WARNING per reason: a gateway cannot flood the log
    warnings = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "cost_not_taken" in r.getMessage()
    ]
    assert len(warnings) <= 1
    assert any("cost_not_taken" in r.getMessage() for r in caplog.records)
