"""The impact estimate of a rule change, from traffic counted by the real tally."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from limits.diff.diffing import rules_diff
from limits.traffic.estimate import impact_estimate
from tests.client.factories import limit, policy, rules
from tests.recorded import record

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD = rules(
    policy("tier:pro", "search", limit("tenant", 50, 1, 50)),
    policy("tier:free", "*", limit("tenant", 5, 1, 5)),
)
LOWERED = rules(
    policy("tier:pro", "search", limit("tenant", 10, 1, 10)),
    policy("tier:free", "*", limit("tenant", 5, 1, 5)),
)


def test_estimate__lowering__reports_the_reached_series_with_would_be_rejections():
    # Given a day ago acme (pro) searched 30 times a second for 20 s (5 of them
    # rejected then), read orders, and globex (free) searched too
    start = NOW - timedelta(days=1)
    record("acme", "search", start, [30] * 20)
    record("acme", "search", start + timedelta(seconds=30), [5], outcome="limited")
    record("acme", "orders.read", start, [3] * 20)
    record("globex", "search", start, [4] * 20)
    # When pro's search limit is lowered from 50/s to 10/s (burst 10)
    impact = impact_estimate(
        old=OLD, new=LOWERED, diff=rules_diff(OLD, LOWERED), now=NOW
    )
    # Then only acme's searches are reported: its other route and globex keep their limits
    (row,) = impact.rows
    assert (row.tenant, row.route, row.seen, row.rejected_now) == (
        "acme",
        "search",
        605,
        5,
    )
    # and about 10 a second of the 30 would have passed (the bucket's 10, then its refill)
    assert 380 <= row.rejected_new <= 400
    assert row.worst_minute == start.replace(second=0)
    assert row.worst_minute_rejected == row.rejected_new
    assert not row.upper_bound
    assert impact.by_tenant() == [("acme", 605, 5, row.rejected_new)]


def test_estimate__traffic_older_than_the_window__not_replayed(settings):
    # Given acme's burst 8 days ago, and a 7-day window
    settings.SLUICE_IMPACT_DAYS = 7
    record("acme", "search", NOW - timedelta(days=8), [30] * 20)
    # When the lowering is estimated
    impact = impact_estimate(
        old=OLD, new=LOWERED, diff=rules_diff(OLD, LOWERED), now=NOW
    )
    # Then nothing is seen
    assert impact.rows == ()


def test_estimate__under_the_new_limit__reported_unhurt_without_a_replay():
    # Given acme searching 4 times a second
    record("acme", "search", NOW - timedelta(hours=1), [4] * 50)
    # When the lowering is estimated, narrowed to acme
    impact = impact_estimate(
        old=OLD, new=LOWERED, diff=rules_diff(OLD, LOWERED), now=NOW, tenants=["acme"]
    )
    # Then acme shows, unhurt, and the filter spared the replay
    (row,) = impact.rows
    assert (row.seen, row.rejected_new, row.worst_minute) == (200, 0, None)
    assert (impact.replayed, impact.hit) == (0, ())
