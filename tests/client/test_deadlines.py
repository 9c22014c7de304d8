"""Decisions with a deadline (the decision service's): answered in time by the
route's failure mode when Redis is late, never sent when given up while queued,
shed without Redis when already late, the breaker left to Redis's own failures.

Redis is held with ``CLIENT PAUSE … WRITE`` for far longer than any deadline
here and lifted by the test, and the limiter's own Redis timeout is seconds:
only the deadline can end a call early, however slow the machine.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from sluice import AsyncLimiter, BreakerState, CircuitBreaker, Outcome
from sluice.bucket import connect_async
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.servers import RedisServer

#: Per tenant 5 a minute, burst 5, on every route.
RULES = snapshot(rules(policy("default", "*", limit("tenant", 5, 60, 5))))
ROUTES = {  # path → (method, outcome while Redis is held)
    "/v1/search": ("GET", Outcome.FAIL_OPEN),
    "/v1/orders/1": ("GET", Outcome.FAIL_CLOSED),
    "/v1/orders": ("POST", Outcome.LOCAL),
}
DEADLINE = 0.3  #: seconds; Redis is held for 60


@pytest.fixture
def private_redis():
    server = RedisServer().start()
    yield server
    server.cleanup()


def held(url):
    """Run ``scenario(limiter, admin)`` with Redis's scripts held until it returns."""

    def run(scenario):
        admin = redis.Redis.from_url(url)

        async def main():
            limiter = AsyncLimiter(
                connect_async(url, timeout=REDIS_TIMEOUT),
                RULES,
                breaker=CircuitBreaker(min_calls=2),  # would open on two failures
                pipelining=True,
            )
            try:
                await limiter.decide(method="GET", path="/v1/search", tenant="warm")
                admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
                try:
                    return await scenario(limiter), limiter
                finally:
                    admin.execute_command("CLIENT", "UNPAUSE")
            finally:
                await limiter.aclose()

        return asyncio.run(main())

    return run


def tenants_in_redis(url) -> set[str]:
    """The tenants that have a bucket in Redis."""
    keys = redis.Redis.from_url(url).keys("rl:{tenant:*")
    return {key.decode().split("}")[0].removeprefix("rl:{tenant:") for key in keys}


def test_deadline__redis_held__each_route_answers_by_its_failure_mode_in_time(
    private_redis,
):
    # Given an asyncio limiter and Redis holding every script call
    async def scenario(limiter):
        # When 30 decisions of three routes are asked with a deadline of 0.3 s
        deadline = asyncio.get_running_loop().time() + DEADLINE
        return await asyncio.gather(
            *(
                # a tenant per route: the all-routes bucket of one tenant would
                # be shared by the three modes in whatever order they end
                limiter.decide(
                    method=method, path=path, tenant=f"t{n}{path}", deadline=deadline
                )
                for n in range(10)
                for path, (method, _) in ROUTES.items()
            )
        )

    decisions, limiter = held(private_redis.url)(scenario)
    # Then each was answered (before Redis was released) by its route's failure
    # mode, saying the deadline passed
    expected = [outcome for _ in range(10) for _, outcome in ROUTES.values()]
    assert [d.outcome for d in decisions] == expected
    assert all(d.degraded and "deadline" in d.error for d in decisions)
    # and the breaker did not count the late answers as Redis failures
    assert limiter.breaker.state is BreakerState.CLOSED


def test_deadline__calls_queued_behind_a_held_one__never_sent(private_redis):
    # Given Redis holding the one call in flight on the limiter's connection
    async def scenario(limiter):
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(
            limiter.decide(method="GET", path="/v1/orders/1", tenant="first")
        )
        await asyncio.sleep(0.05)  # sent: the lane is busy with it
        # When 10 closed-route decisions queue behind it and their deadline passes
        late = await asyncio.gather(
            *(
                limiter.decide(
                    method="GET",
                    path="/v1/orders/1",
                    tenant=f"queued{n}",
                    deadline=loop.time() + DEADLINE,
                )
                for n in range(10)
            )
        )
        first.cancel()
        return late

    late, _ = held(private_redis.url)(scenario)
    # Then they failed closed, and once Redis answers again none of them runs:
    # no bucket of theirs exists (a closed route owes Redis nothing)
    assert [d.outcome for d in late] == [Outcome.FAIL_CLOSED] * 10
    after = asyncio.run(_decide_once(private_redis.url))
    assert after.outcome is Outcome.ALLOWED
    assert not {t for t in tenants_in_redis(private_redis.url) if "queued" in t}


async def _decide_once(url):
    limiter = AsyncLimiter(connect_async(url, timeout=REDIS_TIMEOUT), RULES)
    try:
        return await limiter.decide(method="GET", path="/v1/search", tenant="after")
    finally:
        await limiter.aclose()


def test_deadline__already_passed__shed_without_asking_redis(private_redis):
    # Given a healthy Redis and an asyncio limiter
    async def scenario():
        limiter = AsyncLimiter(
            connect_async(private_redis.url, timeout=REDIS_TIMEOUT), RULES
        )
        try:
            # When a request arrives with its deadline already behind it (a backlog)
            passed = asyncio.get_running_loop().time() - 0.001
            return await limiter.decide(
                method="GET", path="/v1/search", tenant="late", deadline=passed
            ), limiter.breaker.state
        finally:
            await limiter.aclose()

    decision, breaker = asyncio.run(scenario())
    # Then its route's failure mode decided it, Redis never saw it, and the
    # breaker is as it was
    assert decision.outcome is Outcome.FAIL_OPEN
    assert decision.error.startswith("shed")
    assert "late" not in tenants_in_redis(private_redis.url)
    assert breaker is BreakerState.CLOSED


def test_deadline__none__a_held_redis_is_waited_for_up_to_the_redis_timeout(
    private_redis,
):
    # Given Redis held and a limiter whose Redis timeout is 0.5 s
    admin = redis.Redis.from_url(private_redis.url)

    async def scenario():
        limiter = AsyncLimiter(
            connect_async(private_redis.url, timeout=0.5),
            RULES,
            breaker=CircuitBreaker(min_calls=10**9),
        )
        try:
            await limiter.decide(method="GET", path="/v1/search", tenant="warm")
            admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
            try:
                # When a decision has no deadline
                return await limiter.decide(method="GET", path="/v1/search", tenant="t")
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
        finally:
            await limiter.aclose()

    decision = asyncio.run(scenario())
    # Then the Redis timeout ended it, as before deadlines existed
    assert decision.outcome is Outcome.FAIL_OPEN
    assert "Timeout" in decision.error
