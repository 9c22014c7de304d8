"""Calendar quotas in the impact estimate: recorded local days counted, a month projected
from the count gateways charge in Redis."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from django.template.loader import render_to_string

from limits.diff.diffing import rules_diff
from limits.publishing.services import publishing_lock, snapshot_store
from limits.traffic.estimate import CAVEATS, impact_estimate
from limits.versions.explain import explain
from sluice.model import Calendar, CalendarQuota, Dimension, Rules, period_bounds
from tests.client.factories import limit, policy, rules
from tests.limits.quotas.quota_fixtures import SYSTEM, charge, redis_stopped  # noqa: F401
from tests.recorded import record

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
#: pro's search: 50 a second (burst 50), far above the traffic below unless said
OLD = rules(policy("tier:pro", "search", limit("tenant", 50, 1, 50)))
KOLKATA = "IST-5:30"  #: Asia/Kolkata's POSIX rule: local midnight is 18:30 UTC


def with_quota(base: Rules, quota: CalendarQuota, **changes) -> Rules:
    """``base`` with ``quota`` added to pro's search policy."""
    policies = tuple(
        replace(p, limits=(*p.limits, quota)) if p.scope == "tier:pro" else p
        for p in base.policies
    )
    return replace(base, policies=policies, **changes)


def estimate(new: Rules, *, old: Rules = OLD, now: datetime = NOW):
    (row,) = impact_estimate(old=old, new=new, diff=rules_diff(old, new), now=now).rows
    return row


def shown(new: Rules, *, old: Rules = OLD, now: datetime = NOW) -> tuple[str, str]:
    """The estimate as staff read it (the admin's fragment) and as the tenant does
    (its private page's rows, from the JSON reminders carry)."""
    impact = impact_estimate(old=old, new=new, diff=rules_diff(old, new), now=now)
    staff = render_to_string(
        "admin/limits/snapshot/_impact.html", {"impact": impact, "caveats": CAVEATS}
    )
    (row,) = impact.rows
    tenant = render_to_string(
        "changelog/_impact_quotas.html", {"quotas": row.to_json()["quotas"]}
    )
    return " ".join(staff.split()), " ".join(tenant.split())


def test_daily_quota__each_recorded_day_counted_and_the_requests_over_it_rejected():
    # Given acme searched 300 times three days ago, 100 times two days ago, and 250
    # times this morning (5 a second: the bucket admits them all)
    record("acme", "search", NOW - timedelta(days=3), [5] * 60)
    record("acme", "search", NOW - timedelta(days=2), [5] * 20)
    record("acme", "search", NOW - timedelta(hours=2), [5] * 50)
    # When pro's search gets a daily quota of 200 requests
    row = estimate(with_quota(OLD, CalendarQuota(Dimension.TENANT, 200, "day")))
    # Then 100 are over three days ago, 50 today, none two days ago
    (daily,) = row.quotas
    assert (row.rejected_new, daily.over, daily.days_over) == (150, 150, 2)
    assert (daily.worst_day, daily.worst_day_over) == (date(2026, 11, 27), 100)
    # and the window's 7 days from noon touch 8 local days, the edges partly
    assert daily.days == 8
    assert (row.quotas_left_out, row.upper_bound) == (False, False)
    assert row.to_json()["quotas"] == [
        {
            "quota": daily.names,
            "per": "day",
            "method": "recorded",
            "days": 8,
            "days_over": 2,
            "over": 150,
            "worst_day": "2026-11-27",
            "worst_day_over": 100,
        }
    ]
    # and both pages say so, in words
    for page in shown(with_quota(OLD, CalendarQuota(Dimension.TENANT, 200, "day"))):
        assert (
            "Daily quota of 200 requests: 150 requests over it on 2 of 8 local days "
            "(most on 2026-11-27: 100), counted from the recorded traffic" in page
        )


def test_daily_quota__days_are_the_tenants_local_days_from_its_calendar():
    # Given acme, in Kolkata (UTC+5:30), searched 100 times just before its local
    # midnight (18:10 UTC) and 100 times just after it (18:35 UTC)
    evening = datetime(2026, 11, 28, 18, 10, tzinfo=UTC)
    record("acme", "search", evening, [5] * 20)
    record("acme", "search", evening + timedelta(minutes=25), [5] * 20)
    quota = CalendarQuota(Dimension.TENANT, 150, "day")
    # When a daily quota of 150 is estimated on its calendar, and on UTC's
    kolkata = with_quota(
        OLD,
        quota,
        calendars={"acme": Calendar(zone="Asia/Kolkata")},
        zones={"Asia/Kolkata": KOLKATA},
    )
    in_kolkata = estimate(kolkata)
    in_utc = estimate(with_quota(OLD, quota))
    # Then its two local days stay under the quota (the hour its midnight cuts is
    # read by the minute), while one UTC day would be 50 over
    assert in_kolkata.rejected_new == 0
    assert in_utc.rejected_new == 50
    assert in_utc.quotas[0].worst_day == date(2026, 11, 28)


def test_daily_quota__requests_the_buckets_reject_charge_nothing():
    # Given acme searched 30 times a second for a minute yesterday
    record("acme", "search", NOW - timedelta(days=1), [30] * 60)
    lowered = rules(policy("tier:pro", "search", limit("tenant", 10, 1, 10)))
    # When pro's search is lowered to 10 a second (burst 10), alone, with a daily
    # quota of 700 (more than the bucket admits in a minute), and with one of 500
    bucket_only = estimate(lowered)
    roomy = estimate(with_quota(lowered, CalendarQuota(Dimension.TENANT, 700, "day")))
    tight = estimate(with_quota(lowered, CalendarQuota(Dimension.TENANT, 500, "day")))
    # Then the bucket rejects about two thirds; those it rejects do not count against
    # the quota of 700, which rejects nothing more
    assert 1100 <= bucket_only.rejected_new <= 1250
    assert roomy.rejected_new == bucket_only.rejected_new
    assert roomy.quotas[0].over == 0
    # and with 500 a day, everything past the 500th admitted request is rejected
    assert tight.rejected_new == 1800 - 500
    assert tight.quotas[0].over == 1800 - 500 - bucket_only.rejected_new


def test_daily_quota__per_user__counted_as_one_client_an_upper_bound():
    # Given acme searched 300 times yesterday
    record("acme", "search", NOW - timedelta(days=1), [5] * 60)
    # When a daily quota of 200 per user is estimated
    row = estimate(with_quota(OLD, CalendarQuota(Dimension.USER, 200, "day")))
    # Then the tenant's traffic counts as one user's: at most 100 over
    assert (row.rejected_new, row.upper_bound) == (100, True)


def _now() -> datetime:
    """The wall clock, to the second: Redis's hash holds the real period's count."""
    return datetime.now(UTC).replace(microsecond=0)


def _monthly(old_limit: int, new_limit: int) -> tuple[Rules, Rules, str]:
    """Old rules with a monthly quota of ``old_limit`` (published: gateways charge it),
    the new ones with ``new_limit``, and the key gateways charge for acme's searches."""
    old = with_quota(OLD, CalendarQuota(Dimension.TENANT, old_limit, "month"))
    new = with_quota(OLD, CalendarQuota(Dimension.TENANT, new_limit, "month"))
    publishing_lock(rules=True)
    snapshot_store(actor=SYSTEM, rules=old, message="quota")
    (key,) = [
        k.key
        for k in explain(tenant="acme", route="search").keys
        if isinstance(k.limit, CalendarQuota)
    ]
    return old, new, key


def test_monthly_quota_lowered__projected_from_the_count_in_redis(redis_client):
    # Given acme used 900 of its 10,000 this month (the count gateways charge), and
    # searched 1,000 times a day over the last week
    old, new, key = _monthly(10_000, 1_000)
    charge(redis_client, key, 900)
    now = _now()
    for day in range(7):
        record("acme", "search", now - timedelta(days=day, hours=1), [10] * 100)
    # When the quota is lowered to 1,000 a month
    row = estimate(new, old=old, now=now)
    # Then the month is a projection: it would reach the quota once 100 more came
    # (about 2.4 hours at 1,000 a day), and be over by the rest of the period's rate
    (month,) = row.quotas
    end = period_bounds(int(now.timestamp()), "month", "calendar", "UTC0")[1]
    rate = 7000 / (7 * 86400)
    assert (month.used, month.used_from, month.limit) == (900, "redis", 1000)
    assert month.reaches is not None
    assert abs(month.reaches - (now + timedelta(seconds=100 / rate))) < timedelta(
        seconds=1
    )
    assert abs(month.over - (rate * (end - now.timestamp()) - 100)) <= 1
    assert month.period_end == datetime.fromtimestamp(end, UTC)
    # and it is beside the estimate, not in it: the row says so
    assert row.rejected_new == 0
    assert (row.quotas_left_out, row.projected_over) == (True, month.over)
    assert row.to_json()["quotas"][0]["method"] == "projection"
    for page in shown(new, old=old, now=now):
        assert (
            f"Monthly quota of 1,000 requests (a projection, not included above): "
            f"would be reached around {month.reaches:%Y-%m-%d}, ~{month.over} requests "
            f"over by the period's end ({month.period_end:%Y-%m-%d}); 900 used this "
            "period (counted)" in page
        )
    assert any("monthly quotas are a projection" in caveat for caveat in CAVEATS)


def test_monthly_quota__staying_under__zero_and_no_date(redis_client):
    # Given acme used 10 of its month, and searched 100 times in the last week
    old, new, key = _monthly(10_000, 5_000)
    charge(redis_client, key, 10)
    now = _now()
    record("acme", "search", now - timedelta(days=2), [5] * 20)
    # When the quota is lowered to 5,000
    (month,) = estimate(new, old=old, now=now).quotas
    # Then it stays under: nothing over, no date
    assert (month.used, month.reaches, month.over) == (10, None, 0)


def test_monthly_quota_new__no_count_in_redis__used_estimated_from_the_record(
    redis_client,
):
    # Given acme searched 1,000 times a day over the last week, under no quota
    now = _now()
    for day in range(7):
        record("acme", "search", now - timedelta(days=day, hours=1), [10] * 100)
    # When a monthly quota of 100,000 is added (Redis holds no count of it)
    new = with_quota(OLD, CalendarQuota(Dimension.TENANT, 100_000, "month"))
    row = estimate(new, now=now)
    # Then what the month used is estimated from the record: the days recorded this
    # month, and the week's rate over its days before the window
    (month,) = row.quotas
    start = period_bounds(int(now.timestamp()), "month", "calendar", "UTC0")[0]
    recorded_days = sum(
        1
        for day in range(7)
        if (now - timedelta(days=day, hours=1)).timestamp() >= start
    )
    before_window = max(0, (now - timedelta(days=7)).timestamp() - start)
    expected = recorded_days * 1000 + round(1000 * before_window / 86400)
    assert month.used_from == "record"
    assert abs(month.used - expected) <= 1000  # the hour the window starts in


def test_monthly_quota__redis_down__said_and_estimated_from_the_record(
    redis_stopped,  # noqa: F811
):
    # Given acme's searches over the last week, and a Redis that does not answer
    now = _now()
    record("acme", "search", now - timedelta(days=1), [10] * 100)
    # When a lowered monthly quota is estimated
    old = with_quota(OLD, CalendarQuota(Dimension.TENANT, 10_000, "month"))
    new = with_quota(OLD, CalendarQuota(Dimension.TENANT, 1_000, "month"))
    (month,) = estimate(new, old=old, now=now).quotas
    # Then the estimate still comes, and says where its used count came from
    assert month.used_from == "redis_unavailable"
    assert month.to_json()["used_from"] == "redis_unavailable"


def test_project_month__already_past_a_lowered_quota__reached_now_unless_idle():
    from limits.traffic.quotas import project_month

    # Given 900 used of a quota lowered to 500, on Nov 30 at noon (UTC)
    quota = CalendarQuota(Dimension.TENANT, 500, "month")
    now = int(NOW.timestamp())
    week = now - 7 * 86400
    args = {"cost": 1, "zone": ("UTC0", 1), "since": week, "now": now, "used": 900}
    # When projected with 7,000 requests recorded over the week, and with none
    busy = project_month([(week // 60, 60, 7000, 0)], quota, **args, used_from="redis")
    idle = project_month([], quota, **args, used_from="redis")
    # Then the busy tenant is over it at once, by the half day left at 1,000 a day;
    # the idle one sends nothing more: nothing over
    assert (busy.reaches, busy.over) == (NOW, 500)
    assert (idle.reaches, idle.over) == (None, 0)
