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
from tests.faults.traffic import PATIENCE, Hammer, Seen, each_source, wait_seen
from tests.servers import RedisServer

INFLIGHT = "rl:{tenant:acme}:route:search:tenant:acme:inflight"
TIMEOUT = 1.0  #: the single gateway's Redis timeout, seconds
#: The pause is lifted by UNPAUSE; this only ends it if the test dies first.
HOLD_MS = int(PATIENCE * 2 * 1000)
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
    # Given a gateway deciding through a link to Redis (a timeout a busy machine
    # does not run out of: the held reply below makes the call time out anyway)
    link = SlowLink(server.port).start()
    try:
        limiter = Limiter(connect(link.url, timeout=TIMEOUT), RULES)
        limiter.release(limiter.decide(route="search", tenant="acme"))  # connected
        inspect = redis.Redis.from_url(server.url)
        # When Redis runs an acquire whose reply is held until the call timed out
        # (the route fails open, its request ends and is released)
        zadds = _calls(inspect, "zadd")
        link.hold()
        decision = limiter.decide(route="search", tenant="acme")
        limiter.release(decision)
        # (the link forwards the call in a thread of its own: Redis may run it late)
        wait_until(lambda: _calls(inspect, "zadd") > zadds, timeout=PATIENCE)
        took = _calls(inspect, "zadd") - zadds  # the timed-out call did take the slot
        link.lift()
        # Then the slot it took in Redis is released in the background
        wait_until(lambda: not limiter.orphans, timeout=PATIENCE, every=0.02)
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
    wait_seen(hammer, lambda seen: each_source(hammer, _in_redis(seen)))
    # When Redis pauses (CLIENT PAUSE ... WRITE: scripts wait) four times, 300 ms
    # and until acquires of both gateways have timed out in it; Redis answers
    # acquires again in between
    for _ in range(4):
        admin.execute_command("CLIENT", "PAUSE", HOLD_MS, "WRITE")
        paused, mark = time.monotonic(), len(hammer.seen)
        try:
            time.sleep(0.3)
            wait_seen(
                hammer,
                lambda seen, paused=paused: each_source(
                    hammer, [s for s in seen if s.at >= paused and s.timed_out]
                ),
                since=mark,
                why="acquires timed out in the pause",
            )
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        back, mark = time.monotonic(), len(hammer.seen)
        wait_seen(
            hammer,
            lambda seen, back=back: each_source(
                hammer, _in_redis(s for s in seen if s.at >= back)
            ),
            since=mark,
            why="acquires in Redis again",
        )
    seen = hammer.stop()
    # Then, once the background releases have run, nothing is left in flight
    wait_until(
        lambda: admin.zcard(INFLIGHT) == 0 and not any(g.orphans for g in limiters),
        timeout=PATIENCE,
        every=0.05,
        why="every slot released",
    )
    timed_out = sum(s.timed_out for s in seen)
    assert timed_out > 0
    assert _in_redis(seen)
    print(
        f"fault: Redis paused 300 ms x4 under 8 threads on 2 slots: {timed_out} "
        f"acquires timed out, {sum(g.orphans.added for g in limiters)} request ids "
        f"released in the background, 0 left in flight"
    )


def _in_redis(seen) -> list[Seen]:
    """Decisions admitted by Redis (a slot taken there)."""
    return [s for s in seen if s.decision.allowed and not s.decision.degraded]


def _calls(client: redis.Redis, command: str) -> int:
    """How many times Redis ran ``command`` (scripts' calls included)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))
