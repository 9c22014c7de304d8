"""The Lua token bucket itself: geometry, integer storage, and Redis TIME under replication."""

from __future__ import annotations

import pytest
import redis

from sluice import Limiter
from sluice.bucket import SCRIPT, geometry
from tests.celery_fixtures import wait_until
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.servers import RedisServer


@pytest.mark.parametrize(
    ("rate", "period", "burst", "cost", "tick", "increment", "capacity"),
    [
        (10, 1, 20, 1, 100_000, 100_000, 2_000_000),
        (3, 1, 3, 1, 333_334, 333_334, 1_000_002),  # rounded up: never faster than 3/s
        (1000, 60, 100, 5, 60_000, 300_000, 6_000_000),
        (2_000_000, 1, 10, 1, 1, 1, 10),  # one token per microsecond at most
    ],
)
def test_geometry__limit__integer_microseconds_never_faster_than_the_rate(
    rate, period, burst, cost, tick, increment, capacity
):
    shape = geometry(limit("ip", rate, period, burst), cost=cost)
    assert (shape.tick, shape.increment, shape.capacity) == (tick, increment, capacity)
    assert period * 1_000_000 / shape.tick <= rate


def test_geometry__shared_by_gateways__a_share_of_rate_and_burst_but_one_request():
    shape = geometry(limit("ip", 100, 1, 10), cost=4, share=4)
    assert shape.tick == 40_000  # 25 per second
    assert shape.capacity == 4 * shape.tick  # 10 // 4 = 2 < cost 4: one request fits


def test_script__header__states_units():
    header = SCRIPT.decode().split("\n\n")[0]
    assert "MICROSECONDS" in header
    assert "TIME" in header


def test_bucket__stored_value__is_one_integer(redis_client, redis_server):
    # Given a decision on a per-IP limit
    limiter = Limiter(
        redis_server.url,
        snapshot(rules(policy("default", "*", limit("ip", 5, 1, 5)))),
        timeout=REDIS_TIMEOUT,
    )
    key = limiter.decide(route="search", ip="10.0.0.1").deciding.key
    # Then the bucket is one string key holding an integer (Redis' compact int encoding)
    assert redis_client.type(key) == b"string"
    assert redis_client.object("encoding", key) == b"int"


def test_script__with_a_replica__replicates_the_effects_of_time(redis_server):
    # Given a replica of a primary (Redis 7 replicates scripts by their effects)
    primary = RedisServer().start()
    replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(primary.port))).start()
    try:
        limiter = Limiter(
            primary.url,
            snapshot(rules(policy("default", "*", limit("ip", 5, 3600, 5)))),
            timeout=REDIS_TIMEOUT,
        )
        on_primary = redis.Redis.from_url(primary.url)
        on_replica = redis.Redis.from_url(replica.url)
        _wait_for_link(on_primary)
        # When a decision writes a bucket computed from TIME (an hour-long window, so
        # the key cannot expire while a loaded machine runs the test)
        key = limiter.decide(route="search", ip="10.0.0.1").deciding.key
        assert on_primary.wait(1, 60_000) == 1
        # Then the replica holds exactly the primary's value and expiry (replication is
        # asynchronous: a loaded machine may apply it a moment after acknowledging)
        wait_until(
            lambda: on_replica.get(key) is not None,
            timeout=60,
            every=0.05,
            why="the bucket on the replica",
        )
        assert on_replica.get(key) == on_primary.get(key)
        assert on_replica.pexpiretime(key) == on_primary.pexpiretime(key)
        on_primary.close()
        on_replica.close()
    finally:
        replica.cleanup()
        primary.cleanup()


def _wait_for_link(primary: redis.Redis) -> None:
    wait_until(
        lambda: primary.info("replication").get("slave0", {}).get("state") == "online",
        timeout=60,
        every=0.01,
        why="the replica online",
    )


def test_peek__spent_and_absent_buckets__debts_read_and_nothing_charged(redis_client):
    # Given one bucket that owes 3 s of refill and one that was never charged
    from sluice.bucket import peek

    (_, _), now = peek(redis_client, ["rl:{t}:a", "rl:{t}:b"])
    redis_client.set("rl:{t}:a", now + 3_000_000, px=60_000)
    # When peeked
    (spent, absent), later = peek(redis_client, ["rl:{t}:a", "rl:{t}:b"])
    # Then the debts are read on Redis's clock, and no key was written
    assert 0 < spent <= 3_000_000
    assert spent == now + 3_000_000 - later
    assert absent == 0
    assert redis_client.exists("rl:{t}:b") == 0
