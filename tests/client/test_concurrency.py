"""Concurrency limits on real Redis and a real Redis Cluster: acquire, release, expiry, 429."""

from __future__ import annotations

import json

from sluice import CircuitBreaker, Limiter, LocalBuckets, Outcome
from sluice.bucket import connect
from sluice.headers import error_response, rate_limit_headers
from tests.client.factories import (
    REDIS_TIMEOUT,
    concurrent,
    limit,
    policy,
    rules,
    snapshot,
)
from tests.servers import RedisServer

INFLIGHT = "rl:{tenant:acme}:route:search:tenant:acme:inflight"


def limiter_for(client, *limits, concurrency=(), **options) -> Limiter:
    rules_ = rules(policy("default", "search", *limits, concurrency=concurrency))
    return Limiter(client, snapshot(rules_), **options)


def capped_on(client, most=2, **cap) -> Limiter:
    # 100 an hour: a token takes 36 s to come back, so what a test reads of the
    # bucket is what its decisions spent, however slowly a loaded machine runs them
    return limiter_for(
        client,
        limit("tenant", 100, 3600, 100),
        concurrency=(concurrent("tenant", most, **cap),),
    )


def capped(store, most=2, **cap) -> Limiter:
    return capped_on(store.client, most, **cap)


def test_concurrency__cap_reached__429_says_so_until_a_release(store):
    # Given at most two requests in flight per tenant
    limiter = capped(store)
    first, second = (limiter.decide(route="search", tenant="acme") for _ in range(2))
    # When a third starts while both are in flight
    third = limiter.decide(route="search", tenant="acme")
    # Then it is rejected by the concurrency limit, and the answer says so
    assert first.allowed
    assert second.allowed
    assert not third.allowed
    assert third.status == 429
    assert third.outcome is Outcome.LIMITED
    assert [s.name for s in third.violated] == ["tenant-concurrent"]
    body = json.loads(error_response(third).body)
    assert body["error"] == "too_many_concurrent_requests"
    assert "in flight" in body["detail"]
    # and once one response ends, a new request gets its slot
    limiter.release(first)
    assert limiter.decide(route="search", tenant="acme").allowed


def test_concurrency__headers__concurrent_requests_quota_unit(store):
    limiter = capped(store, most=3)
    decision = limiter.decide(route="search", tenant="acme")
    headers = dict(rate_limit_headers(decision))
    assert headers["RateLimit-Policy"] == (
        '"tenant-h";q=100;w=3600, "tenant-concurrent";q=3;qu="concurrent-requests"'
    )
    assert headers["RateLimit"] == '"tenant-h";r=99;t=36, "tenant-concurrent";r=2;t=0'


def test_concurrency__slot_rejects__bucket_not_charged(store):
    # Given one slot, taken
    limiter = capped(store, most=1)
    limiter.decide(route="search", tenant="acme")
    # When the next request is rejected for want of a slot
    rejected = limiter.decide(route="search", tenant="acme")
    # Then its rate bucket was not charged
    assert not rejected.allowed
    bucket = next(s for s in rejected.statuses if s.name == "tenant-h")
    assert bucket.remaining == 99


def test_concurrency__bucket_rejects__no_slot_taken(store):
    limiter = limiter_for(
        store.client,
        limit("tenant", 1, 60, 1),
        concurrency=(concurrent("tenant", 5),),
    )
    assert limiter.decide(route="search", tenant="acme").allowed
    rejected = limiter.decide(route="search", tenant="acme")
    assert not rejected.allowed
    assert rejected.held is None
    assert store.inspect.zcard(INFLIGHT) == 1


def test_concurrency__crashed_gateway_entries__expire_and_cap_heals(store):
    # Given two slots held by a gateway that crashed: entries past their expiry
    limiter = capped(store, timeout=60)
    held = [limiter.decide(route="search", tenant="acme") for _ in range(2)]
    assert not limiter.decide(route="search", tenant="acme").allowed
    seconds, _ = store.inspect.time()
    for decision in held:  # what the clock will do to them after the timeout
        store.inspect.zadd(INFLIGHT, {decision.held.member: (seconds - 1) * 1000})
    # When another gateway's request comes
    fresh = capped(store, timeout=60).decide(route="search", tenant="acme")
    # Then the expired entries no longer count, and the key lives as long as its entries
    assert fresh.allowed
    assert store.inspect.zcard(INFLIGHT) == 1
    assert 0 < store.inspect.pttl(INFLIGHT) <= 60_000


def test_concurrency__keys__one_slot_with_the_buckets(store):
    decision = capped(store).decide(route="search", tenant="acme", user="u")
    keys = [s.key for s in decision.statuses]
    assert keys[1] == INFLIGHT
    if store.cluster:
        assert len({store.inspect.keyslot(key) for key in keys}) == 1


def test_concurrency__redis_down_local_mode__local_share_of_the_cap():
    # Given a route that fails local, a cap of 4 shared by 2 gateways, and Redis gone
    server = RedisServer().start()
    rules_ = rules(
        policy(
            "default",
            "orders.create",
            limit("tenant", 100, 1, 100),
            concurrency=(concurrent("tenant", 4),),
        )
    )
    limiter = Limiter(
        connect(server.url, timeout=REDIS_TIMEOUT),
        snapshot(rules_),
        breaker=CircuitBreaker(min_calls=1),
        local=LocalBuckets(gateways=2),
    )
    server.cleanup()
    # When three requests are in flight at once
    decisions = [limiter.decide(route="orders.create", tenant="acme") for _ in range(3)]
    # Then this gateway admits its share (2) and holds the slots in process
    assert [d.outcome for d in decisions] == [
        Outcome.LOCAL,
        Outcome.LOCAL,
        Outcome.LIMITED,
    ]
    assert decisions[0].held.local
    limiter.release(decisions[0])
    assert limiter.decide(route="orders.create", tenant="acme").allowed


def test_release__redis_stopped__does_not_raise(caplog):
    # Given a request holding a slot (decided by Redis: a timeout no healthy call
    # reaches), then its Redis stops
    server = RedisServer().start()
    limiter = capped_on(connect(server.url, timeout=REDIS_TIMEOUT))
    decision = limiter.decide(route="search", tenant="acme")
    assert decision.held is not None
    assert not decision.held.local
    server.cleanup()
    # When the response ends
    limiter.release(decision)
    # Then the failure is logged, not raised: the entry expires by itself
    assert "limiter.release_failed" in caplog.text
