"""The decision stream rolled up into Postgres: counts, idempotency, crashes, bounds, pruning."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis

from limits.models import (
    DecisionHour,
    DecisionMinute,
    DecisionPeak,
    RehearsalMinute,
    Rejection,
    StatCounter,
    StreamEntry,
)
from limits.traffic.stats import (
    CONSUMER,
    GROUP,
    decision_stream_aggregate,
    stats_apply,
    stats_prune,
)
from sluice import STREAM_KEY, DecisionEvents, Limiter
from sluice.bucket import connect
from tests.client.factories import limit, policy, rules, snapshot
from tests.conftest import PATIENT_REDIS_TIMEOUT

pytestmark = pytest.mark.django_db

NOW = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
RULES = snapshot(
    rules(
        policy("tier:pro", "search", limit("tenant", 2, 60, 2)),
        policy("tier:pro", "*", limit("user", 100, 60, 100)),
    )
)


@pytest.fixture
def events(redis_server, redis_client):
    return DecisionEvents(
        connect(redis_server.url, timeout=PATIENT_REDIS_TIMEOUT),
        gateway_id="gw-1",
        wall=lambda: NOW + 5,
    )


class InOneSecond:
    """A gateway's decision events, each stamped with the first one's time (Redis's).

    Six decisions take milliseconds, or on a loaded machine long enough to straddle a
    second or a minute of Redis's clock, which would split the rows these tests count
    (one per minute, one rejection row per second): here they fall in one second.
    """

    def __init__(self, events: DecisionEvents) -> None:
        self.events, self.at = events, None

    def add(self, tenant, decision) -> None:
        self.at = self.at or decision.at
        self.events.add(tenant, decision._replace(at=self.at))


@pytest.fixture
def traffic(events):
    """Acme searches 5 times (2 admitted, 3 limited) and globex once, in one second of
    Redis's clock; flushed to the stream."""
    limiter = Limiter(events.client, RULES, events=InOneSecond(events))
    for _ in range(5):
        limiter.decide(route="search", tenant="acme", user="u1")
    limiter.decide(route="orders.read", tenant="globex", user="u2")
    events.flush()
    return limiter


def counts() -> dict[tuple[str, str, str], int]:
    return {
        (row.tenant, row.route, row.outcome): row.count
        for row in DecisionMinute.objects.all()
    }


def totals() -> dict[str, int]:
    return dict(StatCounter.objects.values_list("name", "value"))


def redis_minute(client) -> datetime:
    """Now on Redis's clock, to the minute: what decision events are stamped with."""
    seconds, _ = client.time()
    return datetime.fromtimestamp(seconds - seconds % 60, UTC)


@pytest.fixture
def minute_before(events) -> datetime:
    """Redis's minute before the traffic is decided (ask for it ahead of ``traffic``)."""
    return redis_minute(events.client)


def read_without_ack(redis_client) -> list[tuple[str, dict]]:
    """What a run reads before it dies: entries delivered to the group, not acknowledged."""
    with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: it exists already
        redis_client.xgroup_create(STREAM_KEY, GROUP, id="0", mkstream=True)
    reply = redis_client.xreadgroup(GROUP, CONSUMER, {STREAM_KEY: ">"})
    return [(entry_id.decode(), fields) for entry_id, fields in reply[0][1]]


def test_aggregate__stream_of_decisions__counted_per_minute_tenant_route_outcome(
    minute_before, traffic, events
):
    # When the aggregation runs over the stream
    rollup = decision_stream_aggregate()
    # Then each minute x tenant x route x outcome has its count
    assert (rollup.entries, rollup.counted, rollup.events) == (1, 1, 6)
    assert counts() == {
        ("acme", "search", "allowed"): 2,
        ("acme", "search", "limited"): 3,
        ("globex", "orders.read", "allowed"): 1,
    }
    # (the minute of Redis's clock, not the gateway's: its wall clock says NOW), between
    # Redis's minutes before and after, however long deciding took
    (minute,) = {row.minute for row in DecisionMinute.objects.all()}
    assert minute_before <= minute <= redis_minute(events.client)
    assert totals() == {"decisions_allowed": 3, "decisions_limited": 3}
    # and the rejections of acme say which limit of which policy, per what
    rejection = Rejection.objects.filter(tenant="acme").first()
    assert (rejection.limit, rejection.dimension, rejection.policy) == (
        "tenant-min",
        "tenant",
        "tier:pro/search",
    )
    assert rejection.gateway == "gw-1"
    assert rejection.count == 3  # the three of that second, in one row


def _entry(entry_id: str, gateway: str, events: list) -> tuple[str, dict]:
    return entry_id, {
        b"v": b"1",
        b"gw": gateway.encode(),
        b"events": json.dumps(events).encode(),
    }


def test_aggregate__one_second_in_several_batches__per_second_counts_added(db):
    # Given one minute of acme's searches: second 5 decided by two gateways whose
    # entries come in two batches, and second 7 by one
    minute_ms = int(NOW) * 1000
    sec = lambda n: minute_ms + n * 1000  # noqa: E731
    first = [
        _entry(
            "1-0",
            "gw-1",
            [[sec(5), "acme", "search", "tier:pro/search", 1, "allowed", "", 30]],
        ),
        _entry(
            "1-1",
            "gw-1",
            [
                [
                    sec(7),
                    "acme",
                    "search",
                    "tier:pro/search",
                    1,
                    "limited",
                    "tenant-min",
                    4,
                ]
            ],
        ),
    ]
    second = [
        _entry(
            "2-0",
            "gw-2",
            [[sec(5), "acme", "search", "tier:pro/search", 1, "allowed", "", 12]],
        ),
    ]
    # When the two batches are counted
    stats_apply(entries=first)
    stats_apply(entries=second)
    # Then the minute's row holds every second's count, the two gateways' added up,
    # its total over every outcome, and the busiest second
    (row,) = DecisionPeak.objects.all()
    assert (row.tenant, row.route, row.count, row.peak) == ("acme", "search", 46, 42)
    assert row.limited == 4
    # and its hour the same figures, as the estimate reads them
    (hour,) = DecisionHour.objects.all()
    assert (hour.count, hour.limited, hour.busiest_minute, hour.peak) == (46, 4, 46, 42)
    assert (row.seconds[5], row.seconds[7]) == (42, 4)
    assert (sum(row.seconds), len(row.seconds)) == (46, 60)


def test_aggregate__run_twice__nothing_counted_twice(traffic):
    decision_stream_aggregate()
    again = decision_stream_aggregate()
    assert (again.entries, again.counted) == (0, 0)
    assert counts()[("acme", "search", "limited")] == 3


def test_aggregate__killed_between_commit_and_ack__next_run_counts_nothing_again(
    traffic, redis_client
):
    # Given a run that read the entries, committed their counts, and died before XACK
    entries = read_without_ack(redis_client)
    stats_apply(entries=entries)
    assert redis_client.xpending(STREAM_KEY, GROUP)["pending"] == 1
    # When the next run comes
    rollup = decision_stream_aggregate()
    # Then it finds the entry already counted, acknowledges it, and counts nothing twice
    assert (rollup.entries, rollup.counted, rollup.skipped) == (1, 0, 1)
    assert redis_client.xpending(STREAM_KEY, GROUP)["pending"] == 0
    assert counts()[("acme", "search", "allowed")] == 2


def test_aggregate__killed_before_commit__next_run_counts_it(traffic, redis_client):
    # Given a run that read the entries and died before committing
    read_without_ack(redis_client)
    # When the next run comes
    rollup = decision_stream_aggregate()
    # Then the pending entry is counted: nothing is lost
    assert (rollup.counted, rollup.events) == (1, 6)
    assert counts()[("acme", "search", "limited")] == 3


def test_aggregate__pending_entry_trimmed__counted_as_lost(traffic, redis_client):
    read_without_ack(redis_client)
    redis_client.xtrim(STREAM_KEY, maxlen=0, approximate=False)
    rollup = decision_stream_aggregate()
    assert (rollup.counted, rollup.lost, rollup.events) == (1, 1, 0)
    assert totals() == {"entries_lost": 1}


def test_aggregate__malformed_events__skipped_and_counted(redis_client):
    good = [int(NOW * 1000), "acme", "search", "default/*", 1, "allowed", "", 3]
    redis_client.xadd(
        STREAM_KEY,
        {
            "v": "1",
            "gw": "gw-x",
            "dropped": "4",
            "events": json.dumps(
                [good, ["short"], [*good[:5], "exploded", "", 1], [*good[:7], 0]]
            ),
        },
    )
    redis_client.xadd(STREAM_KEY, {"v": "1", "events": "{not json"})
    rollup = decision_stream_aggregate()
    assert rollup.events == 3
    assert totals() == {
        "decisions_allowed": 3,
        "events_dropped": 4,
        "events_malformed": 4,
    }


def test_aggregate__flood_of_rejections__log_bounded_per_tenant(settings, redis_client):
    # Given room for 5 rejections per tenant, and 12 rejections of acme in two entries
    settings.SLUICE_STATS_REJECTIONS_PER_TENANT = 5
    for batch in (range(6), range(6, 12)):
        events = [
            [
                int(NOW * 1000) + i,
                "acme",
                "search",
                "default/*",
                1,
                "limited",
                "ip-s",
                1,
            ]
            for i in batch
        ]
        redis_client.xadd(
            STREAM_KEY, {"v": "1", "gw": "g", "events": json.dumps(events)}
        )
    # When they are aggregated
    decision_stream_aggregate(batch=1)
    # Then the newest 5 are kept
    kept = list(Rejection.objects.filter(tenant="acme").values_list("at", flat=True))
    assert len(kept) == 5
    assert kept[0] == datetime.fromtimestamp(NOW + 0.011, UTC)


def test_prune__old_rows__deleted_and_pending_ledger_kept(
    traffic, redis_client, settings
):
    # Given counts, rehearsal counts, rejections and ledger rows, one entry still pending
    decision_stream_aggregate()
    RehearsalMinute.objects.create(
        version=2, minute=redis_minute(redis_client), tenant="acme", requests=1
    )
    redis_client.xadd(STREAM_KEY, {"v": "1", "events": "[]"})
    entries = read_without_ack(redis_client)
    stats_apply(entries=entries)
    # When prune runs 40 days later
    later = redis_minute(redis_client) + timedelta(days=40)
    StreamEntry.objects.update(processed_at=later - timedelta(days=10))
    removed = stats_prune(now=later)
    # Then counts and rejections are gone, and only the pending entry's id remains
    assert removed == {
        "minutes": 3,
        "peaks": 2,
        "hours": 2,
        "rehearsals": 1,
        "rejections": 1,
        "ledger": 1,
    }
    assert list(StreamEntry.objects.values_list("entry_id", flat=True)) == [
        entries[0][0]
    ]
