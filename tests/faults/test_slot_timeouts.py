"""Concurrency slots when calls time out: no slot outlives its request.

A slot is taken by the same script call that decides; if that call times out
after Redis ran it, the request id sits in the in-flight set although the
gateway decided without it. Before, it stayed for the slot's whole timeout
(120 s here): one of a tenant's two export slots gone.
"""

from __future__ import annotations

import time

import pytest
import redis

from sluice import Limiter
from sluice.bucket import connect
from tests.celery_fixtures import wait_until
from tests.client.factories import concurrent, limit, policy, rules, snapshot
from tests.faults.link import SlowLink
from tests.faults.traffic import Hammer
from tests.servers import RedisServer

INFLIGHT = "rl:{tenant:acme}:route:search:tenant:acme:inflight"
RULES = snapshot(
    rules(
        policy(
            "default",
            "search",
            limit("tenant", 10_000, 1, 10_000),
            concurrency=(concurrent("tenant", 2, timeout=120),),
        )
    )
)


@pytest.fixture
def server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_acquire_ran_but_its_reply_came_late__slot_released_in_the_background(server):
    # Given a gateway deciding through a link to Redis, 50 ms timeout
    link = SlowLink(server.port).start()
    try:
        limiter = Limiter(connect(link.url, timeout=0.05), RULES)
        limiter.release(limiter.decide(route="search", tenant="acme"))  # connected
        inspect = redis.Redis.from_url(server.url)
        # When Redis runs an acquire whose reply is held 0.5 s (the call times out,
        # the route fails open, its request ends and is released)
        zadds = _calls(inspect, "zadd")
        link.hold(0.5)
        decision = limiter.decide(route="search", tenant="acme")
        limiter.release(decision)
        took = _calls(inspect, "zadd") - zadds  # the timed-out call did take the slot
        # Then the slot it took in Redis is released in the background
        wait_until(lambda: not limiter.orphans, timeout=5, every=0.02)
        left = inspect.zcard(INFLIGHT)
        # and the tenant has both its slots again
        again = [limiter.decide(route="search", tenant="acme") for _ in range(3)]
    finally:
        link.stop()
    assert decision.degraded
    assert decision.allowed
    assert "Timeout" in decision.error
    assert took == 1
    assert left == 0
    assert [d.allowed for d in again] == [True, True, False]
    assert not any(d.degraded for d in again)


def test_redis_paused_mid_calls_under_load__no_slot_survives_its_request(server):
    # Given 2 gateways x 4 threads taking and releasing the tenant's 2 slots
    limiters = [Limiter(connect(server.url, timeout=0.02), RULES) for _ in range(2)]
    admin = redis.Redis.from_url(server.url)
    hammer = Hammer(limiters).start()
    time.sleep(0.5)
    # When Redis pauses 300 ms (CLIENT PAUSE ... WRITE: scripts wait) four times
    for _ in range(4):
        admin.execute_command("CLIENT", "PAUSE", 300, "WRITE")
        time.sleep(0.6)
    seen = hammer.stop()
    # Then, once the background releases have run, nothing is left in flight
    wait_until(lambda: admin.zcard(INFLIGHT) == 0, timeout=5, every=0.05)
    timed_out = sum("Timeout" in (s.decision.error or "") for s in seen)
    assert timed_out > 0
    admitted = [s for s in seen if s.decision.allowed and not s.decision.degraded]
    assert admitted
    print(
        f"fault: Redis paused 300 ms x4 under 8 threads on 2 slots: {timed_out} "
        f"acquires timed out, {sum(g.orphans.added for g in limiters)} request ids "
        f"released in the background, 0 left in flight"
    )


def _calls(client: redis.Redis, command: str) -> int:
    """How many times Redis ran ``command`` (scripts' calls included)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))
