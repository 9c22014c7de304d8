"""Decisions rendered as HTTP: RateLimit fields (draft -10), Retry-After, problem+json body."""

from __future__ import annotations

import json

import pytest

from sluice import FailureMode
from sluice.engine import Engine
from sluice.failure import LocalBuckets, failover
from sluice.headers import (
    PROBLEM_QUOTA_EXCEEDED,
    PROBLEM_REDUCED_CAPACITY,
    error_response,
    rate_limit_headers,
    retry_after_seconds,
)
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
