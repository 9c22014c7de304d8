"""The memory store: exact decisions in one process, time that moves when the test says.

Its agreement with Redis is the conformance corpus' (tests/conformance/test_memory.py);
these tests cover what a test of an app leans on: refills by the clock, slots
released or expired, threads, and memory that follows active clients.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from sluice import AsyncLimiter, Limiter
from sluice.memory import MemoryStore
from sluice.testing import Clock, memory_limiter
from tests.client.factories import concurrent, limit, policy, rules, snapshot

SEARCH = rules(policy("tier:pro", "search", limit("tenant", 1, 60, 3)))
CAPPED = rules(
    policy(
        "tier:pro",
        "search",
        limit("tenant", 1000, 1, 1000),
        concurrency=(concurrent("tenant", 1, timeout=30),),
    )
)


def test_memory__burst_spent__429_until_the_clock_refills_a_token():
    # Given 1 per minute, burst 3, on a clock that stands still
    clock = Clock()
    limiter = memory_limiter(SEARCH, clock=clock)
    # When the burst is spent
    allowed = [limiter.decide(route="search", tenant="acme").allowed for _ in range(4)]
    # Then the fourth is refused for a minute, then one more fits
    assert allowed == [True, True, True, False]
    refused = limiter.decide(route="search", tenant="acme")
    assert refused.status == 429
    assert refused.retry_after == pytest.approx(60, abs=0.001)
    clock.advance(59.9)
    assert not limiter.decide(route="search", tenant="acme").allowed
    clock.advance(0.1)
    assert limiter.decide(route="search", tenant="acme").allowed


def test_memory__url__a_store_of_its_own_per_limiter():
    first = Limiter("memory://", snapshot(SEARCH))
    second = Limiter("memory://", snapshot(SEARCH))
    for _ in range(3):
        first.decide(route="search", tenant="acme")
    assert not first.decide(route="search", tenant="acme").allowed
    assert second.decide(route="search", tenant="acme").allowed
    with pytest.raises(ValueError, match="no options"):
        Limiter("memory://x", snapshot(SEARCH))


def test_memory__threads__admit_exactly_the_burst():
    # Given a burst of 3 for a minute, and 8 threads deciding at once
    limiter = Limiter(MemoryStore(), snapshot(SEARCH))
    results: list[bool] = []
    start = threading.Barrier(8)

    def decide() -> None:
        start.wait()
        for _ in range(5):
            results.append(limiter.decide(route="search", tenant="acme").allowed)

    threads = [threading.Thread(target=decide) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly 3 of 40 were admitted (each call is atomic, as a script on Redis)
    assert results.count(True) == 3


def test_memory__concurrency_slot__released_or_expired_by_the_clock():
    clock = Clock()
    limiter = memory_limiter(CAPPED, clock=clock)
    held = limiter.decide(route="search", tenant="acme")
    assert held.allowed
    assert not limiter.decide(route="search", tenant="acme").allowed
    limiter.release(held)
    again = limiter.decide(route="search", tenant="acme")
    assert again.allowed
    # never released: the slot stops counting after its timeout (30 s)
    clock.advance(30.001)
    assert limiter.decide(route="search", tenant="acme").allowed


def test_memory__idle_buckets__their_keys_expire():
    clock = Clock()
    store = MemoryStore(clock=clock)
    limiter = Limiter(store, snapshot(SEARCH), wall=clock, clock=clock)
    limiter.decide(route="search", tenant="acme")
    assert len(store.keys()) == 1
    clock.advance(61)  # the bucket is full again: nothing to remember
    assert store.keys() == {}


def test_memory__asyncio__same_decisions():
    clock = Clock()
    limiter = memory_limiter(SEARCH, clock=clock, asynchronous=True)
    assert isinstance(limiter, AsyncLimiter)

    async def run() -> list[bool]:
        found = [
            (await limiter.decide(route="search", tenant="acme")).allowed
            for _ in range(4)
        ]
        clock.advance(60)
        found.append((await limiter.decide(route="search", tenant="acme")).allowed)
        await limiter.aclose()
        return found

    assert asyncio.run(run()) == [True, True, True, False, True]
