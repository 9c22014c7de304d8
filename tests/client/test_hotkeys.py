"""Hot keys on real Redis and a real Redis Cluster: shards, leases, the reject cache."""

from __future__ import annotations

import time

import pytest
import redis

from sluice import Limiter, Outcome
from sluice.headers import error_response, rate_limit_headers
from sluice.model import CalendarQuota, Dimension, FailureMode, Route, SlidingWindow
from tests.client.factories import (
    REDIS_TIMEOUT,
    concurrent,
    limit,
    policy,
    rules,
    snapshot,
)


class Clock:
    """A monotonic clock the test moves (the limiter's ``clock``)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def limiter_for(store, *limits, clock=None, **options) -> Limiter:
    rules_ = rules(policy("default", "search", *limits))
    return Limiter(store.client, snapshot(rules_), clock=clock or Clock(), **options)


def keys_of(store, pattern: str) -> list[str]:
    if isinstance(store.inspect, redis.RedisCluster):
        found = store.inspect.keys(pattern, target_nodes=redis.RedisCluster.PRIMARIES)
    else:
        found = store.inspect.keys(pattern)
    return sorted(found)


def test_shards__hot_tenant__spread_over_shard_keys_of_one_slot(store):
    # Given a per-tenant limit of 40 an hour, burst 40, split into 4 shards (no
    # token comes back during the test, however slowly it runs)
    limiter = limiter_for(store, limit("tenant", 40, 3600, 40, shards=4))
    # When the tenant sends 60 requests at once
    decisions = [limiter.decide(route="search", tenant="acme") for _ in range(60)]
    # Then no more than the burst passed (shards are never more generous), the
    # shard keys share the tenant's hash tag, and the whole bucket is advertised
    admitted = sum(d.allowed for d in decisions)
    assert 20 <= admitted <= 40
    shard_keys = keys_of(store, "rl:*")
    assert shard_keys == [
        f"rl:{{tenant:acme}}:route:search:tenant:acme:3600s:s{i}" for i in range(4)
    ]
    if store.cluster:
        slots = {store.inspect.keyslot(key) for key in shard_keys}
        assert len(slots) == 1
    assert decisions[0].limit == 40
    assert decisions[0].deciding.quota == 40


def test_leases__hot_key__one_redis_write_per_lease(store):
    # Given a limit of 100 per minute leased 10 tokens at a time
    limiter = limiter_for(store, limit("tenant", 100, 60, 100, lease=10))
    key = "rl:{tenant:acme}:route:search:tenant:acme:60s"
    # When the first request takes a lease
    first = limiter.decide(route="search", tenant="acme")
    after_lease = store.inspect.get(key)
    # and nine more are decided
    rest = [limiter.decide(route="search", tenant="acme") for _ in range(9)]
    # Then Redis was charged 10 tokens once, and the nine were spent in process
    assert first.allowed
    assert all(d.allowed for d in rest)
    assert store.inspect.get(key) == after_lease
    assert limiter.leases.taken == 1
    assert limiter.leases.local == 9
    assert first.remaining == 90
    # and the eleventh takes the next lease
    limiter.decide(route="search", tenant="acme")
    assert store.inspect.get(key) != after_lease
    assert limiter.leases.taken == 2


def test_leases__lease_time_passes__unspent_tokens_dropped(store):
    # Given a lease of 10 tokens for 200 ms from a bucket of 100 an hour (no token
    # comes back in Redis during the test), and one request spent from it
    clock = Clock()
    limiter = limiter_for(
        store, limit("tenant", 100, 3600, 100, lease=10, lease_ms=200), clock=clock
    )
    limiter.decide(route="search", tenant="acme")
    # When 200 ms pass on the gateway's clock
    clock.now += 0.2
    decision = limiter.decide(route="search", tenant="acme")
    # Then the nine unspent tokens are gone (never given back) and a new lease is taken
    assert decision.allowed
    assert limiter.leases.taken == 2
    assert decision.remaining == 80


def test_leases__several_gateways__admit_no_more_than_redis_granted(store):
    # Given three gateways leasing 4 tokens at a time from one bucket of 10
    # that refills one token a day
    gateways = [
        limiter_for(store, limit("tenant", 1, 86400, 10, lease=4)) for _ in range(3)
    ]
    # When each sends 10 requests, in turns
    admitted = 0
    for _ in range(10):
        for gateway in gateways:
            admitted += gateway.decide(route="search", tenant="acme").allowed
    # Then exactly the bucket was admitted: leases move tokens, they never add any
    assert admitted == 10


def test_leases__other_limit_rejects__leased_token_given_back(store):
    # Given a leased per-tenant limit and a strict per-user limit of 1
    limiter = limiter_for(
        store,
        limit("tenant", 100, 60, 100, lease=10),
        limit("user", 1, 86400, 1),
    )
    limiter.decide(route="search", tenant="acme", user="a")
    held = limiter.leases.held()
    # When the user's limit rejects the next request
    rejected = limiter.decide(route="search", tenant="acme", user="a")
    # Then the token spent from the lease is back in the pool
    assert not rejected.allowed
    assert [s.name for s in rejected.violated] == ["user-day"]
    assert limiter.leases.held() == held


def test_reject_cache__rejected_key__rejected_in_process_until_retry_after(store):
    # Given a bucket of 2 per minute that has rejected a request
    clock = Clock()
    limiter = limiter_for(store, limit("tenant", 2, 60, 2), clock=clock)
    began = time.monotonic()
    for _ in range(3):
        limiter.decide(route="search", tenant="acme")
    elapsed = time.monotonic() - began  # what Redis refilled meanwhile, at most
    # When the bucket is emptied in Redis behind the gateway's back
    store.flush()
    again = limiter.decide(route="search", tenant="acme")
    # Then the gateway still rejects without asking Redis, with the same answer shape
    # (a token's refill, 30 s, less what refilled since the first request)
    assert not again.allowed
    assert again.outcome is Outcome.LIMITED
    assert 30 - elapsed <= again.retry_after <= 30
    assert limiter.rejections.hits == 1
    assert store.inspect.get("rl:{tenant:acme}:route:search:tenant:acme:60s") is None
    # and once the retry-after has passed on its clock, it asks Redis again
    clock.now += 30
    assert limiter.decide(route="search", tenant="acme").allowed


def test_reject_cache__turned_off__every_request_asks_redis(store):
    limiter = limiter_for(store, limit("tenant", 2, 60, 2), reject_cache=False)
    for _ in range(3):
        limiter.decide(route="search", tenant="acme")
    store.flush()
    assert limiter.decide(route="search", tenant="acme").allowed


def test_reject_cache__other_tenant_same_user__decided_in_redis(store):
    # Given a tenant rejected by an enforcing limit, and a shadow limit that would reject
    limiter = limiter_for(
        store, limit("tenant", 2, 60, 2), limit("user", 1, 60, 1, shadow=True)
    )
    for _ in range(3):
        limiter.decide(route="search", tenant="acme", user="u")
    # When another tenant (same user id) comes
    other = limiter.decide(route="search", tenant="globex", user="u")
    # Then it is decided in Redis on its own buckets
    assert other.allowed
    assert limiter.rejections.hits == 0


def test_reject_cache__answer__same_policies_and_last_known_state_as_redis(store):
    # Given a policy of 5 an hour per tenant, 10 an hour per user (no token comes
    # back during the test), and at most 2 requests in flight per tenant (the hot
    # path), whose tenant bucket Redis has just refused
    clock = Clock()
    rules_ = rules(
        policy(
            "default",
            "search",
            limit("tenant", 5, 3600, 5),
            limit("user", 10, 3600, 10),
            concurrency=(concurrent("tenant", 2),),
        )
    )
    limiter = Limiter(store.client, snapshot(rules_), clock=clock)
    for _ in range(5):
        limiter.release(limiter.decide(route="search", tenant="acme", user="u"))
    from_redis = limiter.decide(route="search", tenant="acme", user="u")
    # When the next request is answered from the reject cache
    cached = limiter.decide(route="search", tenant="acme", user="u")
    # Then it shows every limit as Redis last said, not the ones it did not
    # look at as full, and the same RateLimit-Policy, concurrency limit included
    assert limiter.rejections.hits == 1
    redis_headers = dict(error_response(from_redis).headers)
    cached_headers = dict(error_response(cached).headers)
    assert (
        cached_headers["RateLimit-Policy"]
        == redis_headers["RateLimit-Policy"]
        == (
            '"tenant-h";q=5;w=3600, "user-h";q=10;w=3600, '
            '"tenant-concurrent";q=2;qu="concurrent-requests"'
        )
    )
    assert cached_headers["RateLimit"] == redis_headers["RateLimit"]
    assert '"user-h";r=5;' in cached_headers["RateLimit"]
    assert '"tenant-concurrent";r=2;t=0' in cached_headers["RateLimit"]


def test_reject_cache__a_limit_never_seen__left_out_of_ratelimit(store):
    # Given a rejection remembered for the tenant's bucket only (the user bucket's
    # state was forgotten: another policy's rejection shares the key, or a reset)
    clock = Clock()
    limiter = limiter_for(
        store, limit("tenant", 2, 60, 2), limit("user", 10, 60, 10), clock=clock
    )
    for _ in range(3):
        limiter.decide(route="search", tenant="acme", user="u")
    limiter.rejections.seen = {
        k: v for k, v in limiter.rejections.seen.items() if ":tenant:" in k
    }
    # When the next request is answered from the cache
    cached = limiter.decide(route="search", tenant="acme", user="u")
    headers = dict(rate_limit_headers(cached))
    # Then the unknown limit is announced but not given a made-up state
    assert headers["RateLimit-Policy"] == '"tenant-min";q=2;w=60, "user-min";q=10;w=60'
    assert headers["RateLimit"].startswith('"tenant-min";r=0;t=')
    assert "user-min" not in headers["RateLimit"]


#: takes a declared cost of up to 50
REPORTS = Route("reports", ("POST",), "/v1/reports", 1, FailureMode.OPEN, max_cost=50)

#: 100 requests' worth per tenant, no room coming back during a test
KINDS = [
    pytest.param(limit("tenant", 100, 3600, 100), id="gcra"),
    pytest.param(SlidingWindow(Dimension.TENANT, 100, 3600), id="sliding_window"),
    pytest.param(CalendarQuota(Dimension.TENANT, 100, "day"), id="calendar_quota"),
]


def reports_limiter(store, kind, **options) -> Limiter:
    rules_ = rules(policy("default", "reports", kind), routes={"reports": REPORTS})
    return Limiter(
        store.client, snapshot(rules_), clock=Clock(), timeout=REDIS_TIMEOUT, **options
    )


@pytest.mark.parametrize("kind", KINDS)
def test_reject_cache__big_request_rejected__smaller_one_that_fits_asks_redis(
    store, kind
):
    # Given 100 per tenant with 90 used, and a request of 50 Redis rejected
    limiter = reports_limiter(store, kind)
    used = [limiter.decide(route="reports", tenant="acme", cost=30) for _ in range(3)]
    big = limiter.decide(route="reports", tenant="acme", cost=50)
    assert [d.allowed for d in used] == [True, True, True]
    assert not big.allowed
    # When the same request comes again, then one of 10
    again = limiter.decide(route="reports", tenant="acme", cost=50)
    small = limiter.decide(route="reports", tenant="acme", cost=10)
    # Then the big one is rejected in process, as Redis did, the small one is
    # admitted by Redis (a full window's or quota's rejected state depends on
    # the cost: it says nothing of when a cheaper request fits)
    assert (again.allowed, again.outcome) == (False, Outcome.LIMITED)
    assert limiter.rejections.hits == 1
    assert again.retry_after <= big.retry_after
    assert small.allowed
    assert small.remaining == 0
    assert limiter.rejections.hits == 1
    # And the next big one asks Redis (the key let a request through: its state
    # moved on since the rejection the cache remembers)
    later = limiter.decide(route="reports", tenant="acme", cost=50)
    assert not later.allowed
    assert limiter.rejections.hits == 1


@pytest.mark.parametrize("kind", KINDS)
def test_reject_cache__costlier_request__rejected_in_process_with_a_wait_no_longer(
    store, kind
):
    # Given 100 per tenant used up, and a request of 1 Redis rejected
    limiter = reports_limiter(store, kind)
    for _ in range(2):
        limiter.decide(route="reports", tenant="acme", cost=50)
    small = limiter.decide(route="reports", tenant="acme", cost=1)
    assert not small.allowed
    # When a request of 50 comes
    big = limiter.decide(route="reports", tenant="acme", cost=50)
    # Then it is rejected in process, telling a wait no longer than Redis's
    # (nor shorter than the small one's: costlier requests fit no sooner)
    assert (big.allowed, big.outcome) == (False, Outcome.LIMITED)
    assert limiter.rejections.hits == 1
    uncached = reports_limiter(store, kind, reject_cache=False)
    from_redis = uncached.decide(route="reports", tenant="acme", cost=50)
    assert not from_redis.allowed
    assert small.retry_after - 5 <= big.retry_after <= from_redis.retry_after + 5
    assert big.remaining < 50


def test_x_ratelimit_reset__gateway_clock_an_hour_off__from_redis_time(store):
    # Given a gateway whose wall clock is an hour ahead
    skewed = lambda: time.time() + 3600  # noqa: E731
    limiter = limiter_for(store, limit("tenant", 2, 60, 2), wall=skewed)
    # When its bucket rejects, in Redis and then from the reject cache
    before = _redis_time(store)
    answers = [limiter.decide(route="search", tenant="acme") for _ in range(4)]
    after = _redis_time(store)
    # Then X-RateLimit-Reset is Redis's time of the decision plus the reset, rounded
    # up: what a client with a correct clock expects, not an hour off
    for decision in answers[2:]:
        reset = int(
            dict(error_response(decision, github=True).headers)["X-RateLimit-Reset"]
        )
        full = decision.deciding.reset
        assert before + full <= reset <= after + full + 1
    assert limiter.rejections.hits == 1


def _redis_time(store) -> float:
    client = store.inspect
    if isinstance(client, redis.RedisCluster):
        seconds, micros = client.time(target_nodes=redis.RedisCluster.RANDOM)
    else:
        seconds, micros = client.time()
    return seconds + micros / 1_000_000
