"""One clock for the rules: override expiry and scheduled versions judged by Redis's clock.

Gateways whose own clocks disagree by an hour must enforce the same rules at the
same moment, as their buckets already do. Each gateway here is a real limiter on
real Redis with its wall clock pushed an hour ahead or behind (its ``wall``
seam); the rules' times are set around the Redis server's own time.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from sluice import AsyncLimiter, Bundle, Limiter
from sluice.bucket import connect_async
from sluice.bundle import SignedBundle, write_bundle_file
from sluice.signing import sign
from sluice.source import SnapshotSource
from tests.client.clock import moment, redis_time
from tests.client.factories import limit, policy, rules, snapshot
from tests.signing import TEST_KEYS, TEST_SIGNING_KEY

#: a gateway whose clock is an hour ahead, and one an hour behind
SKEWS = [
    pytest.param(3600, id="an_hour_ahead"),
    pytest.param(-3600, id="an_hour_behind"),
]
HALF_HOUR = 1800


def overrides(now: float):
    """acme's override ends in half an hour, globex's ended half an hour ago (Redis time)."""
    return snapshot(
        rules(
            policy(
                "tenant:acme",
                "search",
                limit("tenant", 1000, 1, 1000),
                expires_at=moment(int(now) + HALF_HOUR),
            ),
            policy(
                "tenant:globex",
                "search",
                limit("tenant", 1000, 1, 1000),
                expires_at=moment(int(now) - HALF_HOUR),
            ),
            policy("default", "search", limit("tenant", 5, 1, 5)),
        )
    )


def scheduled(now: float) -> Bundle:
    """Version 2 took effect half an hour ago, version 3 takes effect in half an hour."""

    def version(number: int, rate: int, at: float) -> object:
        search = policy("default", "search", limit("tenant", rate, 60, rate))
        return snapshot(rules(search), version=number, effective_at=moment(at))

    return Bundle(
        version(1, 9, 0),
        (version(2, 4, int(now) - HALF_HOUR), version(3, 1, int(now) + HALF_HOUR)),
    )


@pytest.mark.parametrize("skew", SKEWS)
def test_overrides__gateway_clock_an_hour_off__judged_by_redis_time(store, skew):
    # Given a gateway whose clock is an hour off, acme's override live on Redis's
    # clock and globex's expired
    limiter = Limiter(
        store.client, overrides(redis_time(store)), wall=lambda: time.time() + skew
    )
    # When its very first requests are decided
    acme = limiter.decide(route="search", tenant="acme")
    globex = limiter.decide(route="search", tenant="globex")
    # Then acme gets its override and globex the default, whatever the gateway's clock
    assert (acme.policy.is_override, acme.limit) == (True, 1000)
    assert (globex.policy.scope, globex.limit) == ("default", 5)


@pytest.mark.parametrize("skew", SKEWS)
def test_scheduled_versions__gateway_clock_an_hour_off__judged_by_redis_time(
    store, skew
):
    # Given a gateway an hour off, holding version 1, version 2 (in effect on
    # Redis's clock) and version 3 (due in half an hour)
    limiter = Limiter(
        store.client, scheduled(redis_time(store)), wall=lambda: time.time() + skew
    )
    # When it decides
    decision = limiter.decide(route="search", tenant="acme")
    # Then version 2 is in force and version 3 rehearsed
    assert (decision.snapshot_version, decision.limit) == (2, 4)
    assert decision.rehearsed.version == 3


@pytest.mark.parametrize("skew", SKEWS)
def test_snapshot_source__gateway_clock_an_hour_off__the_limiters_clock_wins(
    store, tmp_path, skew
):
    # Given a gateway's source, its clock an hour off, that read its last good
    # bundle (versions 1, 2 in effect, 3 due) at start, by its own clock
    cache = tmp_path / "rules.json"
    bundle = scheduled(redis_time(store))
    body = json.dumps(bundle.to_json(), sort_keys=True).encode()
    signed = SignedBundle(bundle, body, sign(TEST_SIGNING_KEY, body), None)
    write_bundle_file(cache, signed)
    source = SnapshotSource(
        "http://127.0.0.1:1/api/v1/snapshot",
        "token",
        gateway_id="skewed",
        public_keys=TEST_KEYS,
        cache_path=cache,
        wall=lambda: time.time() + skew,
    )
    # When its limiter decides by Redis's clock
    decision = Limiter(store.client, source, wall=lambda: time.time() + skew).decide(
        route="search", tenant="acme"
    )
    # Then version 2 is in force, not what the source worked out by its own clock
    assert decision.snapshot_version == 2


@pytest.mark.parametrize("skew", SKEWS)
def test_async_limiter__gateway_clock_an_hour_off__judged_by_redis_time(
    redis_server, skew
):
    # Given the asyncio limiter (the decision service's) on a gateway an hour off
    async def decide():
        client = connect_async(redis_server.url, timeout=5.0)
        seconds, micros = await client.time()
        limiter = AsyncLimiter(
            client, overrides(seconds + micros / 1e6), wall=lambda: time.time() + skew
        )
        try:
            # When its first requests are decided, at once
            return await asyncio.gather(
                limiter.decide(route="search", tenant="acme"),
                limiter.decide(route="search", tenant="globex"),
            )
        finally:
            await limiter.aclose()

    acme, globex = asyncio.run(decide())
    # Then the override applies by Redis's clock, the expired one does not
    assert (acme.policy.is_override, acme.limit) == (True, 1000)
    assert (globex.policy.scope, globex.limit) == ("default", 5)
