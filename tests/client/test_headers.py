"""Decisions rendered as HTTP: RateLimit fields (draft -10), Retry-After, problem+json body."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sluice import FailureMode, Snapshot
from sluice.engine import Engine
from sluice.failure import LocalBuckets, failover
from sluice.headers import (
    PROBLEM_QUOTA_EXCEEDED,
    PROBLEM_REDUCED_CAPACITY,
    error_response,
    rate_limit_headers,
    retry_after_seconds,
)
from sluice.quota import Dimension, Limit
from tests.client.factories import limit, policy, rules, snapshot

# per user: 10 per minute (a token every 6 s), burst 10; per tenant: 100 per hour, burst 50;
# and a shadow limit that is never advertised
ENGINE = Engine(
    snapshot(
        rules(
            policy(
                "default",
                "search",
                limit("user", 10, 60, 10),
                limit("tenant", 100, 3600, 50),
                limit("ip", 1, 1, 1, shadow=True),
            )
        )
    )
)
SECOND = 1_000_000


def decide(reply):
    prepared = ENGINE.prepare(
        route="search",
        method=None,
        path=None,
        tenant="acme",
        user="42",
        api_key=None,
        ip="10.0.0.1",
        now=0.0,
    )
    return ENGINE.decision(prepared, reply)


def test_rate_limit_headers__admitted__one_named_policy_per_enforcing_limit():
    # Given an admitted request: user bucket owes 12 s (8 left), tenant owes 36 s (49 left)
    decision = decide([1, 1, 12 * SECOND, 1, 36 * SECOND, 1, SECOND])
    # When rendered
    headers = dict(rate_limit_headers(decision))
    # Then q is the burst, w the time to refill it, r what is left, t the time until full
    assert headers["RateLimit-Policy"] == '"user-min";q=10;w=60, "tenant-h";q=50;w=1800'
    assert headers["RateLimit"] == '"user-min";r=8;t=12, "tenant-h";r=49;t=36'
    assert "ip-s" not in headers["RateLimit-Policy"]


def test_rate_limit_headers__github_option__deciding_limit_with_epoch_reset():
    decision = decide([1, 1, 12 * SECOND, 1, 36 * SECOND, 1, 0])
    headers = dict(rate_limit_headers(decision, github=True, wall=lambda: 1000.5))
    assert headers["X-RateLimit-Limit"] == "10"
    assert headers["X-RateLimit-Remaining"] == "8"
    assert headers["X-RateLimit-Reset"] == "1013"


def test_error_response__rate_limited__429_problem_json_and_retry_after():
    # Given the user bucket is empty: 60 s of debt, and a request needs 6 s of it back
    decision = decide([0, 0, 60 * SECOND - SECOND // 2, 1, 36 * SECOND, 1, 0])
    # When rendered
    response = error_response(decision)
    headers = dict(response.headers)
    body = json.loads(response.body)
    # Then 429, Retry-After in whole seconds rounded up, t equal to it, and a problem body
    assert response.status == 429
    assert headers["Retry-After"] == "6"
    assert headers["Content-Type"] == "application/problem+json"
    assert headers["RateLimit"].startswith('"user-min";r=0;t=6, ')
    assert body["type"] == PROBLEM_QUOTA_EXCEEDED
    assert body["error"] == "rate_limited"
    assert body["retry_after_seconds"] == 6
    assert body["violated-policies"] == ["user-min"]
    assert "retry in 6 s" in body["message"]


@pytest.mark.parametrize(
    ("retry_after", "jitter", "rng", "expected"),
    [(0.2, 0.0, 0.0, 1), (5.0, 0.0, 0.0, 5), (5.01, 0.0, 0.0, 6), (5.0, 2.0, 0.75, 7)],
)
def test_retry_after_seconds__fractions_and_jitter__whole_seconds_rounded_up(
    retry_after, jitter, rng, expected
):
    decision = decide([0, 0, int((60 + retry_after - 6) * SECOND), 1, 0, 1, 0])
    assert decision.retry_after == pytest.approx(retry_after)
    assert retry_after_seconds(decision, jitter=jitter, rng=lambda: rng) == expected


def test_error_response__limiter_unavailable__503_reduced_capacity():
    # Given a fail-closed decision (Redis down on a closed route)
    prepared = ENGINE.prepare(
        route="orders.read",
        method=None,
        path=None,
        tenant="acme",
        user=None,
        api_key=None,
        ip=None,
        now=0.0,
    )
    assert prepared.failure_mode is FailureMode.CLOSED
    decision = failover(
        ENGINE, prepared, error="down", local=LocalBuckets(), retry_after=2.5
    )
    # When rendered
    response = error_response(decision)
    body = json.loads(response.body)
    # Then 503 says the limiter is at fault, with Retry-After, no RateLimit fields
    # (no bucket decided) and the mode that answered
    assert response.status == 503
    assert dict(response.headers)["Retry-After"] == "3"
    assert "RateLimit" not in dict(response.headers)
    assert dict(response.headers)["Sluice-Degraded"] == "closed"
    assert body["type"] == PROBLEM_REDUCED_CAPACITY
    assert body["error"] == "limiter_unavailable"


def _rejected(engine: Engine, **who):
    """The decision of ``engine`` for a request to search whose first bucket is empty."""
    request = {"tenant": None, "user": None, "api_key": None, "ip": "10.0.0.1", **who}
    prepared = engine.prepare(
        route="search", method=None, path=None, now=0.0, **request
    )
    reply = [0]
    for index in range(len(prepared.keys)):
        reply += [0, 60 * SECOND] if index == 0 else [1, 0]
    return engine.decision(prepared, [*reply, 0])


def test_error_response__limits_without_words__detail_derived_from_the_numbers():
    # Given the user limit rejects (10 per minute, burst 10) / When rendered
    body = json.loads(error_response(decide([0, 0, 60 * SECOND, 1, 0, 1, 0])).body)
    # Then detail and limits say it as customers read it, not "user-min"
    said = "10 requests per minute per user, bursts of 10"
    assert body["detail"].startswith(
        f"Rate limit per user exceeded ({said}); retry in "
    )
    assert body["limits"] == [
        {"policy": "user-min", "name": "Rate limit per user", "description": said}
    ]
    assert "documentation" not in body
    assert "unknown_tenant" not in body


def test_error_response__public_words_and_documentation__used_in_the_body():
    # Given a limit with its own public name and description, and a documentation link
    named = Limit(
        Dimension.TENANT, 2, 1, 5, name="Search", description="2 searches a second"
    )
    engine = Engine(
        snapshot(
            replace(
                rules(policy("default", "search", named)),
                documentation="https://docs.example.com/limits",
            )
        )
    )
    # When acme is rejected
    body = json.loads(error_response(_rejected(engine, tenant="acme")).body)
    # Then the body speaks the public words and links the documentation
    assert body["detail"].startswith("Search exceeded (2 searches a second); retry in ")
    assert body["documentation"] == "https://docs.example.com/limits"


def test_error_response__unknown_tenant_on_a_per_ip_default__said_identified_by_ip():
    # Given the default counts per IP / When a tenant the rules do not know is rejected
    engine = Engine(snapshot(rules(policy("default", "search", limit("ip", 1, 1, 1)))))
    body = json.loads(error_response(_rejected(engine, tenant="initec")).body)
    # Then the 429 says the tenant was unknown and the caller identified by IP only
    assert body["unknown_tenant"] is True
    assert body["detail"].endswith(
        "The tenant named in the request is not known, so the default limits applied: "
        "it was identified by its IP address only."
    )
    # And a known tenant is told nothing of the kind
    known = json.loads(error_response(_rejected(engine, tenant="acme")).body)
    assert "unknown_tenant" not in known
    assert "not known" not in known["detail"]


def test_error_response__per_user_limit_without_a_user__said_to_share_a_bucket():
    engine = Engine(
        snapshot(rules(policy("default", "search", limit("user", 2, 1, 5))))
    )
    missing = json.loads(error_response(_rejected(engine, tenant="acme")).body)
    named = json.loads(error_response(_rejected(engine, tenant="acme", user="u1")).body)
    assert missing["detail"].endswith(
        "Requests that carry no user id share one bucket."
    )
    assert "share one bucket" not in named["detail"]


def test_snapshot__public_members__round_trip_and_absent_ones_keep_older_bytes():
    plain = snapshot(rules(policy("default", "search", limit("user", 2, 1, 5))))
    assert all(
        "name" not in limit.to_json() and "description" not in limit.to_json()
        for p in plain.rules.policies
        for limit in p.limits
    )
    assert b"documentation" not in plain.to_bytes()
    worded = snapshot(
        replace(
            rules(
                policy(
                    "default",
                    "search",
                    Limit(Dimension.USER, 2, 1, 5, name="Per user", description="two"),
                )
            ),
            documentation="https://docs.example.com/limits",
        )
    )
    again = Snapshot.from_bytes(worded.to_bytes())
    assert again == worded
    (search,) = [p for p in again.rules.policies if p.route == "search"]
    assert (search.limits[0].name, search.limits[0].description) == ("Per user", "two")
