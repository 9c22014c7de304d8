"""Decision events: buffered per decision, flushed in batches to a real Redis stream."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import redis

from sluice import STREAM_KEY, DecisionEvents, Limiter
from sluice.bucket import connect
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.servers import RedisServer

RULES = snapshot(
    rules(
        policy("tier:pro", "search", limit("tenant", 2, 60, 2), limit("user", 1, 60, 1))
    )
)


def entries(redis_client) -> list[dict]:
    return [
        {key.decode(): value.decode() for key, value in fields.items()}
        for _, fields in redis_client.xrange(STREAM_KEY)
    ]


def events_of(redis_client) -> list[list]:
    return [
        event
        for entry in entries(redis_client)
        for event in json.loads(entry["events"])
    ]


#: a gateway clock years off: what it says must not reach the stream
SKEWED = 1_700_000_000.5


@pytest.fixture
def events(redis_server, redis_client):
    return DecisionEvents(
        connect(redis_server.url, timeout=REDIS_TIMEOUT),
        gateway_id="gw-1",
        wall=lambda: SKEWED,
    )


def test_events__decisions__flushed_as_one_entry_per_batch(
    redis_server, events, redis_client
):
    # Given a limiter that hands its decisions to the events buffer, on a gateway
    # whose clock is years off
    limiter = Limiter(
        redis_server.url,
        RULES,
        timeout=REDIS_TIMEOUT,
        events=events,
        wall=lambda: SKEWED,
    )
    # When a tenant is admitted, then limited twice, and nothing is flushed yet
    before = redis_client.time()[0]
    for _ in range(3):
        limiter.decide(route="search", tenant="acme", user="u")
    assert redis_client.xlen(STREAM_KEY) == 0
    written = events.flush()
    after = redis_client.time()[0]
    # Then one entry carries them, identical decisions of a second counted together
    # (one record per second and kind: the decisions may straddle a second),
    # stamped with Redis's clock, not the gateway's
    assert written == 3
    (entry,) = entries(redis_client)
    assert entry["gw"] == "gw-1"
    assert entry["dropped"] == "0"
    records, policy = json.loads(entry["events"]), "tier:pro/search"
    kinds = [tuple(r[:-1]) for r in records]
    assert len(kinds) == len(set(kinds))
    counted = Counter()
    for record in records:
        counted[tuple(record[1:-1])] += record[-1]
    assert counted == {
        ("acme", "search", policy, 1, "allowed", ""): 1,
        ("acme", "search", policy, 1, "limited", "user-min"): 2,
    }
    assert all(before <= r[0] / 1000 <= after for r in records)


def test_events__more_than_a_batch__several_entries_in_one_flush(events, redis_client):
    events.batch = 3
    limiter = Limiter(events.client, RULES, events=events, reject_cache=False)
    for index in range(7):
        limiter.decide(route="search", tenant=f"t{index}")
    events.flush()
    assert [len(json.loads(e["events"])) for e in entries(redis_client)] == [3, 3, 1]


def test_events__buffer_full__dropped_counted_and_reported(events, redis_client):
    # Given a buffer of two events
    events.capacity = 2
    limiter = Limiter(events.client, RULES, events=events)
    # When five decisions are made before a flush
    for index in range(5):
        limiter.decide(route="search", tenant=f"t{index}")
    events.flush()
    # Then two were kept, three dropped without waiting, and the entry reports them
    assert events.dropped == 3
    assert len(events_of(redis_client)) == 2
    assert entries(redis_client)[0]["dropped"] == "3"
    # and the count is reported once
    limiter.decide(route="search", tenant="t9")
    events.flush()
    assert entries(redis_client)[1]["dropped"] == "0"


def test_events__redis_stopped__flush_keeps_them_never_raises(caplog):
    server = RedisServer().start()
    events = DecisionEvents(
        connect(server.url, timeout=REDIS_TIMEOUT), gateway_id="gw-1"
    )
    limiter = Limiter(server.url, RULES, timeout=REDIS_TIMEOUT, events=events)
    limiter.decide(route="search", tenant="acme")
    server.cleanup()
    assert events.flush() == 0
    assert (len(events), events.dropped) == (1, 0)
    assert "decision_events.flush_failed: 1 events kept" in caplog.text


def test_events__redis_killed_10_s_at_1000_decisions_a_second__none_lost(caplog):
    # Given a gateway's events flushed every 0.25 s to a Redis (a private one)
    server = RedisServer().start()
    try:
        # (a timeout no healthy flush reaches: one that timed out after Redis wrote
        # it would be written twice)
        events = DecisionEvents(
            connect(server.url, timeout=REDIS_TIMEOUT), gateway_id="gw-1", interval=0.25
        ).start()
        limiter = Limiter(server.url, RULES, timeout=REDIS_TIMEOUT)
        decision = limiter.decide(route="search", tenant="acme")
        # When Redis is killed while 1,000 decisions a second come, for 10.5 s,
        # then started again (empty) while they keep coming for 1.5 s
        server.kill()
        added = _add_for(events, decision, seconds=10.5)
        held_when_back = len(events)
        server.start()
        added += _add_for(events, decision, seconds=1.5)
        events.stop()
        stream = redis.Redis.from_url(server.url)
        counts = [
            record[-1]
            for _, fields in stream.xrange(STREAM_KEY)
            for record in json.loads(fields[b"events"])
        ]
    finally:
        server.cleanup()
    # Then nothing was dropped: every decision reached the restarted Redis
    assert held_when_back >= 10_000
    assert events.dropped == 0
    assert sum(counts) == added == events.written
    assert "decision_events.flushed" in caplog.text
    print(
        f"fault: decision events, Redis killed 10.5 s at 1,000 decisions/s: "
        f"{held_when_back:,} held meanwhile, all {added:,} written once it was back, 0 dropped"
    )


def _add_for(events: DecisionEvents, decision, *, seconds: float) -> int:
    """Add ``decision`` 1,000 times a second (paced by the clock) for ``seconds``."""
    began, added = time.monotonic(), 0
    while (elapsed := time.monotonic() - began) < seconds:
        while added < elapsed * 1000:
            events.add("acme", decision)
            added += 1
        time.sleep(0.005)
    return added


def test_events__degraded_decisions__outcome_recorded(events, redis_client):
    # Given a limiter whose Redis is gone, on routes failing open and closed
    limiter = Limiter("redis://127.0.0.1:1/0", RULES, timeout=0.05, events=events)
    limiter.decide(route="search", tenant="acme")
    limiter.decide(route="orders.read", tenant="acme")
    events.flush()
    assert [event[5] for event in events_of(redis_client)] == [
        "fail_open",
        "fail_closed",
    ]


def test_events__thread_stopped__last_events_flushed(events, redis_client):
    events.interval = 3600  # the thread would not wake on its own during the test
    events.start()
    Limiter(events.client, RULES, events=events).decide(route="search", tenant="acme")
    events.stop()
    assert len(events_of(redis_client)) == 1
