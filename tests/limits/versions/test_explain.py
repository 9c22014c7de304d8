"""Explain: the policy a request gets and why, from the gateways' own resolver."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from limits.models import Limit
from limits.publishing.services import snapshot_publish
from limits.versions.explain import ExplainSource, explain
from sluice import Level, Resolver, Snapshot


@pytest.fixture
def published(rules, publisher):
    return snapshot_publish(actor=publisher, message="v1")


@pytest.mark.parametrize(
    ("tenant", "route", "scope", "level"),
    [
        ("acme", "search", "tier:pro", Level.TIER_ROUTE),
        ("globex", "search", "tenant:globex", Level.TENANT_ROUTE),
        ("initech", "search", "tier:free", Level.TIER_ALL),
        ("acme", "orders.read", "default", Level.DEFAULT_ALL),
        ("unknown", "search", "default", Level.DEFAULT_ALL),
        (None, None, "default", Level.DEFAULT_ALL),
    ],
)
def test_explain__active_version__same_answer_as_the_resolver(
    published, tenant, route, scope, level
):
    # Given the active version / When explaining a request
    result = explain(tenant=tenant, route=route)
    # Then the policy and level are the resolver's, on the published bytes
    expected = Resolver(Snapshot.from_bytes(bytes(published.content)).rules).resolve(
        tenant=tenant, route=route, now=None
    )
    assert (result.resolution.policy, result.resolution.level) == (
        expected.policy,
        expected.level,
    )
    assert (result.resolution.policy.scope, result.resolution.level) == (scope, level)
    assert result.version == 1


def test_explain__tenant_policy__names_the_policies_it_beat(published):
    result = explain(tenant="globex", route="search")
    assert [c.policy.scope for c in result.resolution.beaten] == ["tier:pro", "default"]
    assert "over tier pro · search; default · all routes" in result.resolution.why()


def test_explain__method_and_path__matched_like_a_gateway(published):
    result = explain(tenant="acme", method="get", path="/v1/orders/42")
    assert result.resolution.route.slug == "orders.read"
    assert result.resolution.cost == 2


def test_explain__path_of_no_route__all_route_policies_apply(published):
    result = explain(tenant="acme", method="GET", path="/v1/nowhere")
    assert result.resolution.route is None
    assert (
        result.resolution.level == Level.TIER_ALL
        or result.resolution.policy.route == "*"
    )


def test_explain__identities__keys_per_limit(published):
    # Given free search limits per tenant / When explaining with a user and an IP
    result = explain(tenant="initech", route="search", user="u1", ip="203.0.113.9")
    # Then there is one key per limit, built as gateways build it: the free tier's
    # policy covers all routes, so its bucket is shared by every route ("*")
    (key,) = result.keys
    assert key.key == "rl:{tenant:initech}:route:*:tenant:initech:1s"
    assert key.cost == 1


def test_explain__working_copy__sees_unpublished_edits(published, rules):
    # Given an unpublished raise of pro search
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=70, burst=140)
    # When explaining the working copy and the active version
    working = explain(tenant="acme", route="search", source=ExplainSource.WORKING_COPY)
    active = explain(tenant="acme", route="search")
    # Then only the working copy has it
    assert working.limits == ["per tenant: 70 / s, burst 140"]
    assert active.limits == ["per tenant: 50 / s, burst 100"]
    assert working.version is None


def test_explain__nothing_published__says_so(rules):
    with pytest.raises(ValidationError, match="Nothing has been published"):
        explain(tenant="acme", route="search")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"route": "nope"},
        {"route": "search", "path": "/v1/search"},
    ],
)
def test_explain__bad_question__refused(published, kwargs):
    with pytest.raises(ValidationError):
        explain(tenant="acme", **kwargs)
