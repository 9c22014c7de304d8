"""Rehearsal records of the decision stream, rolled up per version, minute, tenant and route."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from limits.models import RehearsalMinute, StatCounter
from limits.traffic.rehearsal import RehearsalFigure, rehearsal_figures
from limits.traffic.stats import decision_stream_aggregate
from sluice import STREAM_KEY

pytestmark = pytest.mark.django_db

MINUTE = 1_767_225_600_000  #: 2026-01-01 00:00 UTC, epoch ms
START = datetime.fromtimestamp(MINUTE / 1000, UTC)


def entry(redis_client, rehearsals) -> None:
    """One gateway stream entry with no decision records and these rehearsal records."""
    redis_client.xadd(
        STREAM_KEY,
        {"v": "1", "gw": "g", "events": "[]", "rehearsals": json.dumps(rehearsals)},
    )


def test_aggregate__rehearsal_records__counted_once_per_version_minute_tenant_route(
    redis_client,
):
    # Given two entries of rehearsal records: acme twice in one minute, globex in
    # the next, and another version
    entry(
        redis_client,
        [
            [MINUTE + 1000, "acme", "search", 2, 10, 4],
            [MINUTE + 2000, "acme", "search", 2, 5, 5],
        ],
    )
    entry(
        redis_client,
        [
            [MINUTE + 61_000, "globex", "search", 2, 3, 0],
            [MINUTE + 1000, "acme", "search", 3, 7, 1],
        ],
    )
    # When the stream is aggregated, twice
    decision_stream_aggregate()
    decision_stream_aggregate()
    # Then each record counted once, per version, minute, tenant and route
    rows = {
        (r.version, r.minute, r.tenant): (r.requests, r.would_reject)
        for r in RehearsalMinute.objects.all()
    }
    assert rows == {
        (2, START, "acme"): (15, 9),
        (2, START + timedelta(minutes=1), "globex"): (3, 0),
        (3, START, "acme"): (7, 1),
    }


def test_aggregate__malformed_rehearsal_records__skipped_and_counted(redis_client):
    # Given records that do not read as the format (more rejections than requests,
    # a version 0, a string count) beside a good one, and a field that is not JSON
    entry(
        redis_client,
        [
            [MINUTE, "acme", "search", 2, 1, 2],
            [MINUTE, "acme", "search", 0, 1, 0],
            [MINUTE, "acme", "search", 2, "1", 0],
            [MINUTE, "acme", "search", 2, 1, 1],
        ],
    )
    redis_client.xadd(STREAM_KEY, {"v": "1", "events": "[]", "rehearsals": "{"})
    # When the stream is aggregated
    decision_stream_aggregate()
    # Then the good record counts and the four bad ones are counted as malformed
    assert list(RehearsalMinute.objects.values_list("requests", "would_reject")) == [
        (1, 1)
    ]
    assert StatCounter.objects.get(name="rehearsals_malformed").value == 4


def test_rehearsal_figures__per_tenant_and_route__most_rejected_first():
    # Given rehearsal counts of version 2 over two hours, and of version 3
    def row(minutes_ago, tenant, route, requests, would_reject, version=2):
        RehearsalMinute.objects.create(
            version=version,
            minute=START - timedelta(minutes=minutes_ago),
            tenant=tenant,
            route=route,
            requests=requests,
            would_reject=would_reject,
        )

    row(0, "acme", "search", 100, 10)
    row(5, "acme", "search", 50, 5)
    row(5, "globex", "search", 40, 30)
    row(5, "acme", "orders.read", 20, 0)
    row(90, "globex", "search", 1000, 900)
    row(0, "acme", "search", 100, 100, version=3)
    # When the figures of version 2 since an hour ago are read
    hour = rehearsal_figures(version=2, since=START - timedelta(hours=1))
    # Then each tenant and route is summed over that hour, most rejected first
    assert hour == [
        RehearsalFigure("globex", "search", 40, 30),
        RehearsalFigure("acme", "search", 150, 15),
        RehearsalFigure("acme", "orders.read", 20, 0),
    ]
    # and one tenant's figures, over the day, are that tenant's only
    day = rehearsal_figures(version=2, since=START - timedelta(days=1), tenant="globex")
    assert day == [RehearsalFigure("globex", "search", 1040, 930)]
