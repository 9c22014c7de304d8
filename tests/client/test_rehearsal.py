"""Rehearsal on real Redis and a real Redis Cluster: a scheduled version decided in shadow.

The limiter runs the next scheduled snapshot's policy beside the one in force, in
the same EVALSHA, and says in the decision what it would have answered.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import timedelta

import pytest
import redis

from sluice import (
    STREAM_KEY,
    AsyncLimiter,
    Bundle,
    DecisionEvents,
    FailureMode,
    Limiter,
    Outcome,
    Rehearsed,
    Route,
)
from sluice.bucket import connect
from sluice.headers import rate_limit_headers
from tests.celery_fixtures import wait_until
from tests.client.clock import moment, redis_time
from tests.client.factories import (
    PUBLISHED,
    REDIS_TIMEOUT,
    ROUTES,
    concurrent,
    limit,
    policy,
    rules,
    snapshot,
)
from tests.servers import RedisServer

LATER = PUBLISHED + timedelta(days=3650)  #: a scheduled version that never takes effect


def lowering(active_limit, scheduled_limit, *, scheduled_at=LATER) -> Bundle:
    """Version 1 in force with ``active_limit`` per tenant on search; version 2,
    scheduled, with ``scheduled_limit`` instead (other routes unchanged)."""
    now = snapshot(rules(policy("default", "search", active_limit)), version=1)
    later = snapshot(
        rules(policy("default", "search", scheduled_limit)),
        version=2,
        effective_at=scheduled_at,
    )
    return Bundle(now, (later,))


def test_decide__version_scheduled__rehearses_its_policy_beside(store):
    # Given search at 5 a minute per tenant, and a lowering to 2 a minute scheduled
    bundle = lowering(limit("tenant", 5, 60, 5), limit("tenant", 2, 60, 2))
    limiter = Limiter(store.client, bundle)
    # When acme calls four times
    decisions = [limiter.decide(route="search", tenant="acme") for _ in range(4)]
    # Then all four are admitted (version 1 decides), and the rehearsal says that
    # version 2 would have rejected the last two
    assert [d.allowed for d in decisions] == [True] * 4
    assert [d.snapshot_version for d in decisions] == [1] * 4
    assert [d.rehearsed for d in decisions] == [
        Rehearsed(2, False),
        Rehearsed(2, False),
        Rehearsed(2, True),
        Rehearsed(2, True),
    ]
    # And the rehearsed bucket has a key of its own, with the request's hash tag,
    # that expires like any bucket
    key = "rl:{tenant:acme}:route:search:tenant:acme:60s:r2"
    assert store.inspect.exists(key)
    assert 0 < store.inspect.pttl(key) <= 60_000


def test_decide__policy_unchanged_by_the_schedule__not_rehearsed(store):
    # Given a scheduled version that changes search only
    bundle = lowering(limit("tenant", 5, 60, 5), limit("tenant", 2, 60, 2))
    limiter = Limiter(store.client, bundle)
    # When a request to another route is decided (the default IP policy in both)
    decision = limiter.decide(route="orders.read", tenant="acme", ip="203.0.113.9")
    # Then nothing is rehearsed for it, and no rehearsal key is written
    assert decision.allowed
    assert decision.rehearsed is None
    assert not [k for k in store.inspect.scan_iter("*:r2")]


def test_decide__rehearsed__same_answer_and_headers_as_without(store):
    # Given the same requests decided with a lowering scheduled and without one
    active, scheduled = limit("user", 3, 60, 4), limit("user", 1, 60, 1)
    with_schedule = Limiter(store.client, lowering(active, scheduled))
    without = Limiter(store.client, Bundle(lowering(active, scheduled).active))

    def run(limiter):
        store.flush()
        return [
            limiter.decide(route="search", tenant="acme", user="7") for _ in range(6)
        ]

    began = time.monotonic()
    rehearsed, plain = run(with_schedule), run(without)
    # (what the times of two answers can differ by: the runs are that far apart at
    # most, and each one's times count from its own first request)
    apart = time.monotonic() - began
    # Then every answer and every header is the same, whatever the rehearsal said
    # (the fifth is rejected by Redis, the sixth by the reject cache: decided
    # without Redis, so not rehearsed), up to when they were given
    expected = [Rehearsed(2, False)] + [Rehearsed(2, True)] * 4 + [None]
    assert [d.rehearsed for d in rehearsed] == expected
    for one, other in zip(rehearsed, plain, strict=True):
        assert comparable(one) == comparable(other)
        assert timeless(headers(one)) == timeless(headers(other))
        pairs = zip(times(one), times(other), strict=True)
        assert all(abs(a - b) <= apart + 1 for a, b in pairs)  # + 1: rounded up
    assert [d.allowed for d in plain] == [True] * 4 + [False] * 2


def comparable(decision):
    """``decision`` without what depends on when it was decided."""
    return decision._replace(
        at=0.0,
        rehearsed=None,
        reset=0.0,
        retry_after=None if decision.retry_after is None else 0.0,
        deciding=None,
        statuses=tuple(
            (s.name, s.key, s.quota, s.window, s.fits, s.remaining)
            for s in decision.statuses
        ),
    )


def headers(decision):
    return rate_limit_headers(decision, github=True, wall=lambda: 0.0)


#: the numbers of header values that depend on when a decision was made
_T = re.compile(r"(?<=;t=)\d+")
_AT = "X-RateLimit-Reset"


def timeless(fields):
    """Header ``fields`` with the numbers that depend on the time left out."""
    return [(name, "" if name == _AT else _T.sub("", value)) for name, value in fields]


def times(decision):
    """What depends on when ``decision`` was made, in seconds: its reset and
    retry-after, and those numbers of its headers."""
    found = [decision.reset, decision.retry_after or 0.0]
    for name, value in headers(decision):
        found += [int(value)] if name == _AT else map(int, _T.findall(value))
    return found


def test_decide__rehearsed__one_round_trip(redis_server):
    # Given a limiter rehearsing a lowering, on a Redis whose command stats start at 0
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    bundle = lowering(limit("tenant", 100, 1, 100), limit("tenant", 10, 1, 10))
    limiter = Limiter(redis_server.url, bundle, timeout=REDIS_TIMEOUT)
    limiter.decide(route="search", tenant="acme")  # the script loaded
    client.config_resetstat()
    # When 50 requests are decided and rehearsed
    decisions = [limiter.decide(route="search", tenant="acme") for _ in range(50)]
    # Then Redis ran 50 EVALSHA and nothing else but what those scripts ran
    # (GET, SET and one TIME each): one round trip per decision
    stats = client.info("commandstats")
    assert all(d.rehearsed is not None for d in decisions)
    assert stats["cmdstat_evalsha"]["calls"] == 50
    assert stats["cmdstat_time"]["calls"] == 50
    scripted = {"cmdstat_get", "cmdstat_set", "cmdstat_time", "cmdstat_evalsha"}
    assert set(stats) - scripted == {"cmdstat_config|resetstat"}
    client.close()


@pytest.mark.cluster
def test_decide__rehearsed_on_a_cluster__one_slot(redis_cluster):
    # Given a limiter on a Redis Cluster rehearsing per-user and per-tenant limits
    # (two keys of the version in force, two of the rehearsed one), by the hour: no
    # token comes back during the test
    client = connect(redis_cluster.url, timeout=REDIS_TIMEOUT, cluster=True)
    active = policy(
        "default", "search", limit("tenant", 50, 3600, 50), limit("user", 5, 3600, 5)
    )
    scheduled = policy(
        "default", "search", limit("tenant", 5, 3600, 5), limit("user", 1, 3600, 1)
    )
    bundle = Bundle(
        snapshot(rules(active)),
        (snapshot(rules(scheduled), version=2, effective_at=LATER),),
    )
    limiter = Limiter(client, bundle)
    # When a user of acme calls twice
    decisions = [
        limiter.decide(route="search", tenant="acme", user="9") for _ in range(2)
    ]
    # Then Redis decided both (a CROSSSLOT error would have degraded them), and
    # the rehearsal saw its per-user limit of 1 reject the second
    assert [d.degraded for d in decisions] == [False, False]
    assert [d.rehearsed for d in decisions] == [Rehearsed(2, False), Rehearsed(2, True)]
    keys = [s.key for s in decisions[0].statuses] + [
        "rl:{tenant:acme}:route:search:tenant:acme:3600s:r2",
        "rl:{tenant:acme}:route:search:user:9:3600s:r2",
    ]
    assert len({client.keyslot(key) for key in keys}) == 1
    client.close()


def test_decide__redis_down__failure_mode_applies_and_rehearsal_skipped():
    # Given a rehearsing limiter whose Redis does not answer (search fails open)
    bundle = lowering(limit("tenant", 5, 60, 5), limit("tenant", 1, 60, 1))
    limiter = Limiter("redis://127.0.0.1:1/0", bundle, timeout=0.05)
    # When acme calls
    decision = limiter.decide(route="search", tenant="acme")
    # Then the route's failure mode decided, as without a rehearsal, and nothing
    # was rehearsed
    assert decision.degraded
    assert decision.outcome is Outcome.FAIL_OPEN
    assert decision.rehearsed is None


def test_decide__scheduled_version_takes_effect__rehearses_the_next_one(store):
    # Given version 2 scheduled 2 s from now on Redis's clock, and version 3 an hour later
    start = int(redis_time(store))

    def version(number, rate, at=PUBLISHED):
        search = policy("default", "search", limit("tenant", rate, 60, rate))
        return snapshot(rules(search), version=number, effective_at=at)

    bundle = Bundle(
        version(1, 9),
        (version(2, 4, at=moment(start + 2)), version(3, 1, at=moment(start + 3600))),
    )
    limiter = Limiter(store.client, bundle)
    # When a request comes before version 2 takes effect, then one after
    before = limiter.decide(route="search", tenant="acme")
    # The limiter carries Redis's clock from its last reply, which it read a moment
    # after Redis wrote it (a loaded machine, a Cluster's first call: up to seconds),
    # so its clock may lag Redis's by that much: ask once Redis is 2 s past version
    # 2's time (version 3 is an hour away).
    wait_until(
        lambda: redis_time(store) >= start + 4,
        timeout=60,
        every=0.05,
        why="Redis's clock past version 2's time",
    )
    after = limiter.decide(route="search", tenant="acme")
    # Then the first was decided by 1 and rehearsed 2, the second decided by 2 and
    # rehearsed 3
    assert (before.snapshot_version, before.rehearsed.version) == (1, 2)
    assert (after.snapshot_version, after.rehearsed.version) == (2, 3)


@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelined", "unbatched"])
def test_async_decide__version_scheduled__rehearsed_too(store, pipelining):
    # Given the asyncio limiter, with and without auto-pipelining, rehearsing a lowering
    bundle = lowering(limit("tenant", 5, 60, 5), limit("tenant", 2, 60, 2))

    async def run():
        limiter = AsyncLimiter(store.async_client(), bundle, pipelining=pipelining)
        try:  # When four requests are decided at once
            return await asyncio.gather(
                *(limiter.decide(route="search", tenant="acme") for _ in range(4))
            )
        finally:
            await limiter.aclose()

    decisions = asyncio.run(run())
    # Then all are admitted and version 2 would have rejected two of them
    assert all(d.allowed for d in decisions)
    assert sorted(d.rehearsed.rejected for d in decisions) == [False, False, True, True]


def test_events__rehearsed_decisions__records_in_a_field_of_their_own(
    redis_server, redis_client
):
    # Given decision events of a limiter rehearsing a lowering from 5 to 2 a minute
    events = DecisionEvents(
        connect(redis_server.url, timeout=REDIS_TIMEOUT), gateway_id="gw-r"
    )
    bundle = lowering(limit("tenant", 5, 60, 5), limit("tenant", 2, 60, 2))
    limiter = Limiter(events.client, bundle, events=events)
    # When acme searches 4 times and another route is called once, then they flush
    for _ in range(4):
        limiter.decide(route="search", tenant="acme")
    limiter.decide(route="orders.read", tenant="acme")
    events.flush()
    # Then the entry's events read as before (5 admitted decisions of version 1) and
    # its rehearsal records say: 4 searches rehearsed version 2, which rejects 2
    (entry,) = [fields for _, fields in redis_client.xrange(STREAM_KEY)]
    records = json.loads(entry[b"events"])
    assert sum(r[-1] for r in records) == 5
    assert {(r[4], r[5]) for r in records} == {(1, "allowed")}
    assert rehearsal_totals(json.loads(entry[b"rehearsals"])) == {
        ("acme", "search", 2): (4, 2)
    }


def rehearsal_totals(records):
    """Rehearsal records summed over their seconds (decisions may straddle one):
    (tenant, route, version) -> (requests, would reject). Each record is one
    second's (its start, in epoch ms), one per second and key."""
    assert all(r[0] % 1000 == 0 for r in records)
    assert len({tuple(r[:4]) for r in records}) == len(records)
    totals = {}
    for _, tenant, route, version, requests, rejects in records:
        before = totals.get((tenant, route, version), (0, 0))
        totals[(tenant, route, version)] = (before[0] + requests, before[1] + rejects)
    return totals


def test_events__flush_fails__rehearsal_records_kept_for_the_next():
    # Given rehearsed decisions buffered for a Redis that is down
    server = RedisServer().start()
    client = connect(server.url, timeout=REDIS_TIMEOUT)
    events = DecisionEvents(client, gateway_id="gw-r")
    bundle = lowering(limit("tenant", 5, 60, 5), limit("tenant", 1, 60, 1))
    limiter = Limiter(client, bundle, events=events)
    for _ in range(3):
        limiter.decide(route="search", tenant="acme")
    server.stop()
    try:
        # When a flush fails, then Redis comes back
        assert events.flush() == 0
        server.start()
        assert events.flush() == 3
        # Then the rehearsal records reached the stream with their events
        inspect = redis.Redis.from_url(server.url)
        (entry,) = [fields for _, fields in inspect.xrange(STREAM_KEY)]
        assert rehearsal_totals(json.loads(entry[b"rehearsals"])) == {
            ("acme", "search", 2): (3, 2)
        }
        inspect.close()
    finally:
        server.cleanup()


def test_decide__limit_shared_by_both_versions__read_from_the_real_bucket(store):
    # Given a per-tenant limit of 3 a minute in both versions, and a per-user limit
    # that the scheduled version lowers from 10 to 5 a minute
    tenant = limit("tenant", 3, 60, 3)
    bundle = Bundle(
        snapshot(rules(policy("default", "search", tenant, limit("user", 10, 60, 10)))),
        (
            snapshot(
                rules(policy("default", "search", tenant, limit("user", 5, 60, 5))),
                version=2,
                effective_at=LATER,
            ),
        ),
    )
    limiter = Limiter(store.client, bundle)
    # When a user of acme calls four times
    decisions = [
        limiter.decide(route="search", tenant="acme", user="1") for _ in range(4)
    ]
    # Then only the lowered limit has a rehearsal key; the tenant limit, shared,
    # rejects the fourth in both versions
    assert [k for k in store.inspect.scan_iter("*:r2")] == [
        "rl:{tenant:acme}:route:search:user:1:60s:r2"
    ]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.rehearsed.rejected for d in decisions] == [False, False, False, True]


def test_decide__schedule_raises_the_route_cost__rehearsed_at_the_new_cost(store):
    # Given search at 4 tokens a minute per tenant, its cost 1 now and 2 in the
    # scheduled version (the limit itself unchanged)
    search = policy("default", "search", limit("tenant", 4, 60, 4))
    routes = dict(ROUTES)
    routes["search"] = Route("search", ("GET",), "/v1/search", 2, FailureMode.OPEN)
    bundle = Bundle(
        snapshot(rules(search)),
        (snapshot(rules(search, routes=routes), version=2, effective_at=LATER),),
    )
    limiter = Limiter(store.client, bundle)
    # When acme searches three times
    decisions = [limiter.decide(route="search", tenant="acme") for _ in range(3)]
    # Then version 1 admits all three; version 2, at 2 tokens each, only two
    assert [d.allowed for d in decisions] == [True] * 3
    assert [d.rehearsed.rejected for d in decisions] == [False, False, True]


def test_decide__policy_with_leases__decided_by_the_hot_script_unrehearsed(store):
    # Given search leased 10 tokens at a time now, lowered (without a lease) later
    bundle = lowering(limit("tenant", 100, 1, 100, lease=10), limit("tenant", 1, 1, 1))
    limiter = Limiter(store.client, bundle)
    # When acme searches twice
    decisions = [limiter.decide(route="search", tenant="acme") for _ in range(2)]
    # Then the hot path decides as before, and nothing is rehearsed (docs/rehearsal.md)
    assert [d.allowed for d in decisions] == [True, True]
    assert [d.rehearsed for d in decisions] == [None, None]
    assert not [k for k in store.inspect.scan_iter("*:r2")]


def test_decide__policy_with_a_concurrency_cap__rehearsed_in_the_hot_call(store):
    # Given exports capped at 2 in flight per tenant, at 5 a minute now and 2 a
    # minute in the scheduled version
    cap = (concurrent("tenant", 2),)
    now = policy("default", "search", limit("tenant", 5, 60, 5), concurrency=cap)
    later = policy("default", "search", limit("tenant", 2, 60, 2), concurrency=cap)
    bundle = Bundle(
        snapshot(rules(now)),
        (snapshot(rules(later), version=2, effective_at=LATER),),
    )
    limiter = Limiter(store.client, bundle)
    # When acme makes three requests, each released when it ends
    decisions = []
    for _ in range(3):
        decision = limiter.decide(route="search", tenant="acme")
        decisions.append(decision)
        limiter.release(decision)
    # Then all three were admitted and held a slot, and version 2 would have
    # rejected the third (its own key, the request's hash tag)
    assert [d.allowed for d in decisions] == [True] * 3
    assert all(d.held is not None for d in decisions)
    assert [d.rehearsed for d in decisions] == [
        Rehearsed(2, False),
        Rehearsed(2, False),
        Rehearsed(2, True),
    ]
    assert store.inspect.exists("rl:{tenant:acme}:route:search:tenant:acme:60s:r2")
    assert (
        store.inspect.zcard("rl:{tenant:acme}:route:search:tenant:acme:inflight") == 0
    )
