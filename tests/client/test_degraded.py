"""Degraded answers still speak: the mode that decided, the in-process bucket's
RateLimit fields, and a Prometheus counter per mode."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sluice import Limiter, LocalBuckets
from sluice.headers import error_response, rate_limit_headers
from sluice.metrics import DegradedCounter
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.servers import free_port

# search fails open, orders.read closed, orders.create local (tests.client.factories)
RULES = snapshot(
    rules(
        policy("tier:pro", "search", limit("tenant", 10, 60, 4)),
        policy("tier:pro", "orders.read", limit("tenant", 10, 60, 4)),
        policy("tier:pro", "orders.create", limit("tenant", 10, 60, 4)),
    )
)


@pytest.fixture
def down():
    """A limiter whose Redis is down (nothing listens: refused at once)."""
    return Limiter(
        f"redis://127.0.0.1:{free_port()}/0",
        RULES,
        timeout=REDIS_TIMEOUT,
        local=LocalBuckets(gateways=2),
    )


def test_degraded__open_route__local_buckets_fields_and_the_mode(down):
    # Given Redis down / When a route that fails open is asked twice
    first = down.decide(route="search", tenant="acme")
    second = down.decide(route="search", tenant="acme")
    # Then both are admitted by the in-process bucket, which tells what it knows
    assert (first.allowed, first.degraded) == (True, True)
    headers = dict(rate_limit_headers(second))
    assert headers["Sluice-Degraded"] == "open"
    assert headers["RateLimit-Policy"] == '"tenant-min";q=4;w=24'
    assert headers["RateLimit"].startswith('"tenant-min";r=2;')


def test_degraded__local_route__this_gateways_share(down):
    # Given two gateways sharing the traffic / When a local route's share (a burst
    # of 2 tokens) is spent by requests of cost 2
    answers = [down.decide(route="orders.create", tenant="acme") for _ in range(2)]
    # Then the second is refused with 429, fields of the half-bucket, and the mode
    assert [a.status for a in answers] == [200, 429]
    response = error_response(answers[-1])
    headers = dict(response.headers)
    assert headers["Sluice-Degraded"] == "local"
    assert headers["RateLimit-Policy"] == '"tenant-min";q=2;w=24'
    assert headers["RateLimit"].startswith('"tenant-min";r=0;')


def test_degraded__closed_route__503_says_closed_without_fields(down):
    decision = down.decide(route="orders.read", tenant="acme")
    response = error_response(decision)
    headers = dict(response.headers)
    assert response.status == 503
    assert headers["Sluice-Degraded"] == "closed"
    assert "RateLimit" not in headers


def test_degraded__counter__one_per_mode_in_prometheus(down):
    # Given decisions by each failure mode, and one Redis would have made
    for route in ("search", "search", "orders.read", "orders.create"):
        down.decide(route=route, tenant="acme")
    # When the counter is read, as text and through prometheus_client
    registry = CollectorRegistry()
    registry.register(down.degraded)
    scraped = generate_latest(registry).decode()
    # Then each mode has its count
    assert down.degraded.counts() == {
        "open": 2,
        "open-unbounded": 0,
        "closed": 1,
        "local": 1,
    }
    assert 'sluice_client_degraded_decisions_total{mode="open"} 2.0' in scraped
    assert 'sluice_client_degraded_decisions_total{mode="closed"} 1' in (
        down.degraded.exposition()
    )


def test_degraded__redis_answers__nothing_counted_no_field(redis_server, redis_client):
    redis_client.flushdb()
    limiter = Limiter(redis_server.url, RULES, timeout=REDIS_TIMEOUT)
    decision = limiter.decide(route="search", tenant="acme")
    assert "Sluice-Degraded" not in dict(rate_limit_headers(decision))
    assert sum(limiter.degraded.counts().values()) == 0


def test_degraded__log__the_first_at_once_then_a_summary_a_minute(down, caplog):
    # Given a gateway whose Redis is down, its log counter on a clock the test moves
    now = [1000.0]
    down.degraded = DegradedCounter(clock=lambda: now[0])
    caplog.set_level("WARNING", logger="sluice.metrics")

    def logged() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith("limiter.degraded")
        ]

    # When its first decisions are degraded
    down.decide(route="search", tenant="acme")
    down.decide(route="orders.read", tenant="acme")
    # Then the first is said at once, the next held for the summary
    (first,) = logged()
    assert first.startswith("limiter.degraded: 1 decision(s) by failure mode (open 1)")
    # When a minute has passed and one more comes
    now[0] += DegradedCounter.LOG_EVERY
    down.decide(route="orders.create", tenant="acme")
    # Then one line says all that came since, by mode
    assert logged()[1].startswith(
        "limiter.degraded: 2 decision(s) by failure mode in the last 60 s "
        "(closed 1, local 1)"
    )
