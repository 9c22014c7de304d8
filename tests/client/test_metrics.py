"""Decision events: buffered per decision, flushed in batches to a real Redis stream."""

from __future__ import annotations

import json

import pytest

from sluice import STREAM_KEY, DecisionEvents, Limiter
from sluice.bucket import connect
from tests.client.factories import limit, policy, rules, snapshot
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


@pytest.fixture
def events(redis_server, redis_client):
    return DecisionEvents(
        connect(redis_server.url, timeout=1.0),
        gateway_id="gw-1",
        wall=lambda: 1_700_000_000.5,
    )


def test_events__decisions__flushed_as_one_entry_per_batch(
    redis_server, events, redis_client
):
    # Given a limiter that hands its decisions to the events buffer
    limiter = Limiter(redis_server.url, RULES, timeout=1.0, events=events)
    # When a tenant is admitted, then limited twice, and nothing is flushed yet
    for _ in range(3):
        limiter.decide(route="search", tenant="acme", user="u")
    assert redis_client.xlen(STREAM_KEY) == 0
    written = events.flush()
    # Then one entry carries them, identical decisions of a second counted together
    assert written == 3
    (entry,) = entries(redis_client)
    assert entry["gw"] == "gw-1"
    assert entry["dropped"] == "0"
    second, policy = 1_700_000_000_000, "tier:pro/search"
    assert json.loads(entry["events"]) == [
        [second, "acme", "search", policy, 1, "allowed", "", 1],
        [second, "acme", "search", policy, 1, "limited", "user-min", 2],
    ]


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


def test_events__redis_stopped__flush_drops_and_counts_never_raises(caplog):
    server = RedisServer().start()
    events = DecisionEvents(connect(server.url, timeout=0.2), gateway_id="gw-1")
    Limiter(server.url, RULES, events=events).decide(route="search", tenant="acme")
    server.cleanup()
    assert events.flush() == 0
    assert events.dropped == 1
    assert "decision_events.flush_failed" in caplog.text


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
