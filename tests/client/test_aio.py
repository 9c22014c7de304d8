"""The asyncio limiter decides exactly like the sync one, on Redis and on Redis Cluster."""

from __future__ import annotations

import asyncio

from sluice import AsyncLimiter, Limiter, Outcome
from tests.client.factories import concurrent, limit, policy, rules, snapshot

RULES = snapshot(
    rules(policy("default", "*", limit("user", 1, 60, 1), limit("tenant", 3, 60, 3)))
)


def run(store, coroutine_function):
    async def scenario():
        limiter = AsyncLimiter(store.async_client(), RULES)
        try:
            return await coroutine_function(limiter)
        finally:
            await limiter.aclose()

    return asyncio.run(scenario())


def test_async_decide__same_requests__same_decisions_as_sync(store):
    # Given the same rules and the same requests
    requests = [
        ("acme", "1"),
        ("acme", "1"),
        ("acme", "2"),
        ("acme", "3"),
        ("acme", "4"),
    ]

    async def decide_all(limiter):
        return [
            await limiter.decide(route="search", tenant=t, user=u) for t, u in requests
        ]

    # When the asyncio limiter decides them, then the sync one on a fresh store
    async_decisions = run(store, decide_all)
    store.flush()
    sync = Limiter(store.client, RULES)
    sync_decisions = [
        sync.decide(route="search", tenant=t, user=u) for t, u in requests
    ]
    # Then the answers are the same: per user 1, per tenant 3, nothing charged on reject
    summary = [(d.allowed, d.deciding.name, d.remaining) for d in async_decisions]
    assert summary == [
        (d.allowed, d.deciding.name, d.remaining) for d in sync_decisions
    ]
    assert [d.allowed for d in async_decisions] == [True, False, True, True, False]


def test_async_decide__script_flushed__reloads_and_decides(store):
    async def flush_between(limiter):
        await limiter.decide(route="search", tenant="acme", user="1")
        store.flush_scripts()
        return await limiter.decide(route="search", tenant="acme", user="2")

    decision = run(store, flush_between)
    assert decision.outcome is Outcome.ALLOWED
    assert not decision.degraded
    assert decision.deciding.remaining == 0


def test_async_decide__lease_and_cap__same_as_sync_then_released(store):
    # Given a leased bucket and a cap of one request in flight, on the asyncio limiter
    capped = snapshot(
        rules(
            policy(
                "default",
                "search",
                limit("tenant", 100, 60, 100, lease=10),
                concurrency=(concurrent("tenant", 1),),
            )
        )
    )

    async def scenario():
        # on a clock held still: the lease (1 s) does not run out before the third
        # request, however slowly a loaded machine runs the test
        limiter = AsyncLimiter(store.async_client(), capped, clock=lambda: 1_000.0)
        try:
            first = await limiter.decide(route="search", tenant="acme")
            second = await limiter.decide(route="search", tenant="acme")
            await limiter.release(first)
            third = await limiter.decide(route="search", tenant="acme")
            return first, second, third, limiter.leases.taken
        finally:
            await limiter.aclose()

    # When two requests overlap, then the first ends and a third comes
    first, second, third, leases = asyncio.run(scenario())
    # Then the cap rejected the overlap, the release freed the slot, and one lease served all
    assert (first.allowed, second.allowed, third.allowed) == (True, False, True)
    assert [s.name for s in second.violated] == ["tenant-concurrent"]
    assert leases == 1
