"""Auto-pipelining of the asyncio limiter, on a real Redis and a real Redis Cluster.

Decisions that meet a round trip in flight share the next one; each keeps its own
reply, order and failure.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import redis

from sluice import AsyncLimiter, CircuitBreaker, Outcome
from sluice.bucket import connect_async
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.servers import RedisServer

#: Per tenant 5 a minute, burst 5: a tenant's sixth request is rejected.
RULES = snapshot(rules(policy("default", "*", limit("tenant", 5, 60, 5))))
TENANTS = [f"t{number}" for number in range(40)]


def decide_together(
    url, requests, *, cluster=False, timeout=REDIS_TIMEOUT, pipelining=True, **options
):
    """Decide ``requests`` (method, path, tenant) as concurrent tasks; return the
    decisions in request order and the pipeline's stats.

    The timeout bounds each connect as well as each call: without pipelining, the
    requests open tens of connections at once, which a loaded machine may take
    more than a second to set up.
    """

    async def scenario():
        limiter = AsyncLimiter(
            connect_async(url, timeout=timeout, cluster=cluster),
            RULES,
            pipelining=pipelining,
            **options,
        )
        try:
            # a first decision maps the cluster (redis-py's asyncio cluster client
            # fails some calls of a burst it meets before that)
            await limiter.decide(method="GET", path="/v1/search", tenant="warm-up")
            decisions = await asyncio.gather(
                *(
                    limiter.decide(method=method, path=path, tenant=tenant)
                    for method, path, tenant in requests
                )
            )
            stats = limiter.pipeline.stats() if limiter.pipeline else {}
            return decisions, stats
        finally:
            await limiter.aclose()

    return asyncio.run(scenario())


def _requests(repeats=7):
    return [("GET", "/v1/search", t) for t in TENANTS for _ in range(repeats)]


def test_pipelining__many_at_once__sent_in_batches_each_its_own_answer(store):
    # Given 40 tenants each sending 7 requests at once (5 fit their bucket)
    requests = _requests()
    # When an asyncio limiter decides all 280 concurrently
    decisions, stats = decide_together(store.url, requests, cluster=store.cluster)
    # Then fewer round trips than decisions were made, and each tenant got exactly
    # its 5 admissions: no decision was given another's reply
    assert sum(s.batches for s in stats.values()) < len(requests)
    assert max(s.largest for s in stats.values()) > 1
    admitted = Counter(
        r[2] for r, d in zip(requests, decisions, strict=True) if d.allowed
    )
    assert admitted == dict.fromkeys(TENANTS, 5)
    assert all(d.outcome in (Outcome.ALLOWED, Outcome.LIMITED) for d in decisions)


@pytest.mark.cluster
def test_pipelining__cluster__batches_split_by_master(redis_cluster):
    # Given a 3-master cluster whose evalsha counters start from zero
    masters = [redis.Redis(port=node.port) for node in redis_cluster.nodes]
    for master in masters:
        master.config_resetstat()
    requests = _requests(repeats=3)
    # When 120 decisions for 40 tenants (their slots spread over the masters) run at once
    decisions, stats = decide_together(redis_cluster.url, requests, cluster=True)
    # Then each master received exactly the calls for the slots it holds (a decision's
    # keys share its tenant's hash tag), through a lane of its own
    mapping = redis.RedisCluster.from_url(redis_cluster.url)
    expected = Counter(
        mapping.get_node_from_key(f"{{tenant:{tenant}}}").port
        for tenant in [*(r[2] for r in requests), "warm-up"]
    )
    served = {
        master.connection_pool.connection_kwargs["port"]: master.info("commandstats")[
            "cmdstat_evalsha"
        ]["calls"]
        for master in masters
    }
    assert served == dict(expected)
    assert len(stats) == 3
    assert all(s.calls > 0 and s.batches < s.calls for s in stats.values())
    assert all(d.allowed for d in decisions)


def test_pipelining__scripts_flushed__the_batch_reloads_and_decides(store):
    # Given a limiter that has run its script once, then Redis forgets every script
    async def scenario():
        limiter = AsyncLimiter(store.async_client(), RULES, pipelining=True)
        try:
            await limiter.decide(method="GET", path="/v1/search", tenant="warm")
            store.flush_scripts()
            # When 30 decisions arrive at once
            return await asyncio.gather(
                *(
                    limiter.decide(method="GET", path="/v1/search", tenant=t)
                    for t in TENANTS[:30]
                )
            )
        finally:
            await limiter.aclose()

    decisions = asyncio.run(scenario())
    # Then every one of them was decided by Redis, not by a failure mode
    assert [d.outcome for d in decisions] == [Outcome.ALLOWED] * 30


@pytest.fixture
def private_redis():
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_pipelining__redis_stalls_mid_batch__each_decision_takes_its_route_failure_mode(
    private_redis,
):
    # Given an asyncio limiter (with a timeout no healthy call reaches) and routes
    # that fail open, closed and local
    routes = [("GET", "/v1/search"), ("GET", "/v1/orders/1"), ("POST", "/v1/orders")]
    # (local may refuse: the tenant's all-routes bucket also holds what its
    # search was admitted with while failing open)
    expected = {
        "/v1/search": {Outcome.FAIL_OPEN},
        "/v1/orders/1": {Outcome.FAIL_CLOSED},
        "/v1/orders": {Outcome.LOCAL, Outcome.LIMITED},
    }
    admin = redis.Redis.from_url(private_redis.url)

    async def scenario():
        limiter = AsyncLimiter(
            connect_async(private_redis.url, timeout=REDIS_TIMEOUT),
            RULES,
            breaker=CircuitBreaker(min_calls=10**9),  # every call reaches Redis
            pipelining=True,
        )
        try:
            await limiter.decide(method="GET", path="/v1/search", tenant="warm")
            # When Redis stalls while 30 decisions are in one batch or queued (the
            # scripts are paused until UNPAUSE, far past the timeout however slow
            # the machine), then answers again
            admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
            try:
                stalled = await asyncio.gather(
                    *(
                        limiter.decide(method=m, path=p, tenant=t)
                        for t in TENANTS[:10]
                        for m, p in routes
                    )
                )
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
            after = await asyncio.gather(
                *(
                    limiter.decide(method="GET", path="/v1/search", tenant=t)
                    for t in TENANTS[10:20]
                )
            )
            return stalled, after
        finally:
            await limiter.aclose()

    stalled, after = asyncio.run(scenario())
    # Then each stalled decision took the failure mode of its own route
    requests = [(m, p) for _ in TENANTS[:10] for m, p in routes]
    assert all(
        d.outcome in expected[p] for d, (_, p) in zip(stalled, requests, strict=True)
    )
    assert all(d.degraded for d in stalled)
    assert all("Timeout" in d.error for d in stalled)
    # and once Redis answers, decisions are Redis's again, each with its own reply
    assert [d.outcome for d in after] == [Outcome.ALLOWED] * 10
    assert [d.remaining for d in after] == [4] * 10


def test_pipelining__a_caller_cancelled__the_others_are_decided(store):
    # Given 20 concurrent decisions, one of which is cancelled while in flight
    async def scenario():
        limiter = AsyncLimiter(store.async_client(), RULES, pipelining=True)
        try:
            tasks = [
                asyncio.create_task(
                    limiter.decide(method="GET", path="/v1/search", tenant=t)
                )
                for t in TENANTS[:20]
            ]
            await asyncio.sleep(0)  # every task has queued its call
            tasks[3].cancel()
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await limiter.aclose()

    results = asyncio.run(scenario())
    # Then the cancelled one is cancelled, and every other one is Redis's decision
    assert isinstance(results[3], asyncio.CancelledError)
    others = [r for i, r in enumerate(results) if i != 3]
    assert [d.outcome for d in others] == [Outcome.ALLOWED] * 19


def test_pipelining__off__one_call_each_same_decisions(store):
    # Given 40 tenants each sending 2 requests at once (fewer than the client's 100
    # connections per node: without pipelining each call in flight holds one)
    requests = _requests(repeats=2)
    # When decided with auto-pipelining off
    decisions, stats = decide_together(
        store.url, requests, cluster=store.cluster, pipelining=False
    )
    # Then there is no pipeline, and the decisions are the same
    assert stats == {}
    assert [d.outcome for d in decisions] == [Outcome.ALLOWED] * len(requests)
    assert [d.remaining for d in decisions].count(4) == len(TENANTS)
