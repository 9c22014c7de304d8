"""The clock rules are judged by in tests: the test Redis's (``LimiterCore.rules_time``)."""

from __future__ import annotations

from datetime import UTC, datetime

import redis


def redis_time(store) -> float:
    """Now on ``store``'s Redis (epoch seconds; a cluster: one node's)."""
    client = store.inspect
    if isinstance(client, redis.RedisCluster):
        seconds, micros = client.time(target_nodes=redis.RedisCluster.RANDOM)
    else:
        seconds, micros = client.time()
    return seconds + micros / 1_000_000


def moment(epoch: float) -> datetime:
    """``epoch`` seconds as an aware datetime (a snapshot's times)."""
    return datetime.fromtimestamp(epoch, UTC)
