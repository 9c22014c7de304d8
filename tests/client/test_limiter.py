"""Decisions on real Redis and a real Redis Cluster: the Lua bucket through the sync limiter."""

from __future__ import annotations

import time

import pytest

from sluice import Bundle, FailureMode, Limiter, Outcome, Route
from tests.celery_fixtures import wait_until
from tests.client.clock import moment, redis_time
from tests.client.factories import (
    ROUTES,
    limit,
    policy,
    rules,
    snapshot,
)


def limiter_for(store, *policies, wall=time.time, **options) -> Limiter:
    return Limiter(store.client, snapshot(rules(*policies)), wall=wall, **options)


def test_decide__within_burst__admits_and_counts_down(store):
    # Given a per-user limit of 3 per minute, burst 3
    limiter = limiter_for(store, policy("default", "search", limit("user", 3, 60, 3)))
    # When the user calls three times
    decisions = [limiter.decide(route="search", user="42") for _ in range(3)]
    # Then all are admitted, remaining counts down, and the deciding limit is named
    assert [d.allowed for d in decisions] == [True, True, True]
    assert [d.remaining for d in decisions] == [2, 1, 0]
    assert decisions[0].limit == 3
    assert decisions[0].deciding.name == "user-min"
    assert decisions[0].outcome is Outcome.ALLOWED
    assert decisions[0].route == "search"
    assert decisions[0].snapshot_version == 1
    assert not decisions[0].degraded


def test_decide__burst_exhausted__rejects_with_retry_after(store):
    # Given a bucket of 2 that refills one token every 30 s
    limiter = limiter_for(store, policy("default", "search", limit("user", 2, 60, 2)))
    began = time.monotonic()
    limiter.decide(route="search", user="42")
    limiter.decide(route="search", user="42")
    # When a third request comes at once
    decision = limiter.decide(route="search", user="42")
    elapsed = time.monotonic() - began  # what the bucket refilled meanwhile, at most
    # Then it is rejected with 429 and told to wait one token's refill time, less
    # what refilled since the first request (and the bucket is full 30 s after that)
    assert not decision.allowed
    assert decision.status == 429
    assert decision.outcome is Outcome.LIMITED
    assert 30 - elapsed <= decision.retry_after <= 30
    assert decision.remaining == 0
    assert 60 - elapsed <= decision.reset <= 60
    assert [s.name for s in decision.violated] == ["user-min"]


def test_decide__one_limit_rejects__nothing_is_charged(store):
    # Given a policy per user (1 per minute) and per tenant (100 an hour: no token
    # comes back during the test, however slowly it runs)
    limiter = limiter_for(
        store,
        policy(
            "default", "*", limit("user", 1, 60, 1), limit("tenant", 100, 3600, 100)
        ),
    )
    first = limiter.decide(route="search", tenant="acme", user="42")
    # When the user's limit rejects the next request
    rejected = limiter.decide(route="search", tenant="acme", user="42")
    # Then the tenant's bucket was not charged for it
    assert first.allowed
    assert not rejected.allowed
    tenant_status = next(s for s in rejected.statuses if s.name == "tenant-h")
    assert tenant_status.fits
    assert tenant_status.remaining == 99
    other_user = limiter.decide(route="search", tenant="acme", user="7")
    assert next(s for s in other_user.statuses if s.name == "tenant-h").remaining == 98


def test_decide__shadow_limit_exhausted__admits_and_reports_shadow(store):
    # Given an enforcing limit of 100 an hour and a shadow limit of 1 per minute
    limiter = limiter_for(
        store,
        policy(
            "default",
            "search",
            limit("ip", 100, 3600, 100),
            limit("user", 1, 60, 1, shadow=True),
        ),
    )
    limiter.decide(route="search", user="42", ip="10.0.0.1")
    # When the shadow limit would reject
    decision = limiter.decide(route="search", user="42", ip="10.0.0.1")
    # Then the request is admitted, marked shadow-limited, and charged to the real limit
    assert decision.allowed
    assert decision.shadow
    assert decision.outcome is Outcome.SHADOW_LIMITED
    assert decision.deciding.name == "ip-h"
    assert decision.remaining == 98


def test_decide__bucket_refilled_after_retry_after__admits_again(store):
    # Given a bucket of one token that refills every 50 ms (Redis TIME drives it),
    # spent until Redis refuses a request (on a loaded machine a request may come
    # after the refill)
    limiter = limiter_for(store, policy("default", "search", limit("ip", 20, 1, 1)))
    rejected = wait_until(
        lambda: refused(limiter.decide(route="search", ip="10.0.0.1")),
        timeout=60,
        every=0,
        why="a request refused by the empty bucket",
    )
    # When the client waits what it was told
    time.sleep(rejected.retry_after + 0.005)
    decision = limiter.decide(route="search", ip="10.0.0.1")
    # Then it is admitted
    assert rejected.outcome is Outcome.LIMITED
    assert 0 < rejected.retry_after <= 0.05
    assert decision.allowed


def refused(decision):
    """``decision`` if it was refused, else None."""
    return None if decision.allowed else decision


def test_decide__admitted__bucket_expires_when_it_would_be_full(store):
    # Given a bucket of 10 refilling 1 per minute
    limiter = limiter_for(store, policy("default", "search", limit("ip", 1, 60, 10)))
    # When three requests are charged
    began = time.monotonic()
    for _ in range(3):
        decision = limiter.decide(route="search", ip="10.0.0.1")
    ttl_ms = store.inspect.pttl(decision.deciding.key)
    elapsed_ms = (time.monotonic() - began) * 1000  # what refilled meanwhile, at most
    # Then the key lives as long as the refill of 3 tokens (less what refilled since
    # the first), and holds an integer
    assert 180_000 - elapsed_ms - 1 <= ttl_ms <= 180_000
    assert store.inspect.get(decision.deciding.key).isdigit()


def test_decide__tenant_moves_tier__keeps_its_bucket(store):
    # Given acme on tier free (3 an hour per tenant) has spent a third of its bucket
    free = policy("tier:free", "*", limit("tenant", 3, 3600, 3))
    pro = policy("tier:pro", "*", limit("tenant", 6, 3600, 6))
    before = snapshot(rules(free, pro, tenants={"acme": "free"}), version=1)
    after = snapshot(rules(free, pro, tenants={"acme": "pro"}), version=2)
    used = Limiter(store.client, before).decide(route="search", tenant="acme")
    # When acme moves to pro (6 an hour) and calls again
    moved = Limiter(store.client, after).decide(route="search", tenant="acme")
    # Then the same bucket goes on: the third already spent stays spent (2 of 6)
    assert used.remaining == 2
    assert moved.deciding.key == used.deciding.key
    assert moved.policy.scope == "tier:pro"
    assert moved.allowed
    assert moved.remaining == 3


def test_decide__override_expires__falls_back_to_tier_policy(store):
    # Given an override for acme that expires 2 s from now on Redis's clock
    expires = moment(int(redis_time(store)) + 2)
    override = policy(
        "tenant:acme", "search", limit("tenant", 1000, 1, 1000), expires_at=expires
    )
    tier = policy("tier:pro", "search", limit("tenant", 5, 1, 5))
    limiter = limiter_for(store, override, tier)
    live = limiter.decide(route="search", tenant="acme")
    # When Redis's clock passes the expiry (by 2 s: the limiter carries Redis's
    # clock from its last reply, read a moment after Redis wrote it, so on a
    # loaded machine its clock may lag Redis's by that moment)
    wait_until(
        lambda: redis_time(store) > expires.timestamp() + 2,
        timeout=60,
        every=0.05,
        why="Redis's clock past the expiry",
    )
    expired = limiter.decide(route="search", tenant="acme")
    # Then the tier policy applies, on the same tenant bucket
    assert live.policy.is_override
    assert live.limit == 1000
    assert expired.policy.scope == "tier:pro"
    assert expired.limit == 5
    assert expired.deciding.key == live.deciding.key


def test_decide__missing_user__shares_one_bucket_and_is_limited(store):
    # Given a per-user limit of 2 per minute
    limiter = limiter_for(store, policy("default", "*", limit("user", 2, 60, 2)))
    # When three requests come without a user id
    decisions = [limiter.decide(route="search", tenant="acme") for _ in range(3)]
    # Then they share the ~ bucket, and the third is rejected
    assert [d.allowed for d in decisions] == [True, True, False]
    assert decisions[0].deciding.key == "rl:{tenant:acme}:route:*:user:~:60s"


@pytest.mark.parametrize(
    ("limits", "expected_key"),
    [
        ((limit("tenant", 5, 1, 5),), "rl:{tenant:~}:route:*:tenant:~:1s"),
        ((limit("ip", 5, 1, 5),), "rl:{ip:10.0.0.1}:route:*:ip:10.0.0.1:1s"),
    ],
)
def test_decide__anonymous_request__owner_is_shared_tenant_or_ip(
    store, limits, expected_key
):
    # Given a default policy counting per tenant, or per IP
    limiter = limiter_for(store, policy("default", "*", *limits))
    # When a request without a tenant comes
    decision = limiter.decide(route="search", ip="10.0.0.1")
    # Then its bucket is owned by the shared anonymous tenant, or by its IP
    assert decision.deciding.key == expected_key


def test_decide__all_routes_policy__one_bucket_across_routes(store):
    # Given a per-tenant limit of 2 per minute over all routes
    limiter = limiter_for(store, policy("default", "*", limit("tenant", 2, 60, 2)))
    # When acme calls two different routes, then a third
    first = limiter.decide(method="GET", path="/v1/search", tenant="acme")
    second = limiter.decide(method="GET", path="/v1/orders/17", tenant="acme")
    third = limiter.decide(route="search", tenant="acme")
    # Then they share one bucket
    assert (first.route, second.route) == ("search", "orders.read")
    assert first.deciding.key == second.deciding.key == third.deciding.key
    assert [first.allowed, second.allowed, third.allowed] == [True, True, False]


def test_decide__route_cost_and_limit_cost__charge_that_many_tokens(store):
    # Given orders.create costs 2, and a limit that overrides the cost to 5
    limiter = limiter_for(
        store,
        policy(
            "default",
            "orders.create",
            limit("user", 10, 60, 10),
            limit("ip", 100, 60, 100, cost=5),
        ),
    )
    # When one order is created
    decision = limiter.decide(method="POST", path="/v1/orders", user="u", ip="10.0.0.1")
    # Then the user bucket lost 2 tokens and the IP bucket 5
    remaining = {s.name: s.remaining for s in decision.statuses}
    assert remaining == {"user-min": 8, "ip-min": 95}


def test_decide__unknown_route__default_policy_applies(store):
    # Given only the default policy of the factory (1000 per second per IP)
    limiter = limiter_for(store)
    # When a path matches no route
    decision = limiter.decide(method="GET", path="/nowhere", ip="10.0.0.1")
    # Then it is limited by the default all-routes policy anyway
    assert decision.allowed
    assert decision.route is None
    assert decision.policy.route == "*"
    assert decision.limit == 1000


def test_decide__path_without_method__its_one_route_or_none_when_shared(store):
    # Given orders.read alone on /v1/orders/{id}, and orders.list (GET) and
    # orders.create (POST) sharing /v1/orders
    listing = Route("orders.list", ("GET",), "/v1/orders", 1, FailureMode.OPEN)
    limiter = Limiter(
        store.client,
        snapshot(rules(routes={**ROUTES, "orders.list": listing})),
        wall=time.time,
    )
    # When requests come with a path and no method
    read = limiter.decide(path="/v1/orders/17", ip="10.0.0.1")
    shared = limiter.decide(path="/v1/orders", ip="10.0.0.1")
    # Then the path of one route names it, whatever its methods; a path that
    # two routes share names neither (the method would choose)
    assert read.route == "orders.read"
    assert shared.route is None
    assert shared.policy.route == "*"
    # and with the method, the shared path names its route as always
    assert limiter.decide(method="POST", path="/v1/orders").route == "orders.create"


def test_decide__script_flushed__reloads_and_decides(store):
    # Given a limiter that already ran its script
    limiter = limiter_for(store, policy("default", "search", limit("ip", 10, 3600, 10)))
    limiter.decide(route="search", ip="10.0.0.1")
    # When Redis forgets every script (NOSCRIPT on the next EVALSHA)
    store.flush_scripts()
    decision = limiter.decide(route="search", ip="10.0.0.1")
    # Then the script is loaded again and the decision is a normal one
    assert decision.allowed
    assert not decision.degraded
    assert decision.remaining == 8


def test_decide__scheduled_snapshot__switches_at_its_effective_time(store):
    # Given a bundle whose next snapshot takes effect 2 s from now on Redis's clock
    later = moment(int(redis_time(store)) + 2)
    active = snapshot(rules(policy("default", "search", limit("ip", 5, 60, 5))))
    scheduled = snapshot(
        rules(policy("default", "search", limit("ip", 7, 60, 7))),
        version=2,
        effective_at=later,
    )
    limiter = Limiter(store.client, Bundle(active, (scheduled,)))
    before = limiter.decide(route="search", ip="10.0.0.1")
    # When the time comes
    wait_until(
        lambda: redis_time(store) >= later.timestamp(),
        timeout=60,
        every=0.05,
        why="Redis's clock at the effective time",
    )
    after = limiter.decide(route="search", ip="10.0.0.1")
    # Then the limiter enforces the scheduled snapshot on its own
    assert (before.snapshot_version, before.limit) == (1, 5)
    assert (after.snapshot_version, after.limit) == (2, 7)
