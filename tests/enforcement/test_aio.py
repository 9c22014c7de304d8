"""The asyncio limiter decides exactly like the sync one, on Redis and on Redis Cluster."""

from __future__ import annotations

import asyncio

from limits.enforcement import AsyncLimiter, Limiter, Outcome
from tests.enforcement.factories import limit, policy, rules, snapshot

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
