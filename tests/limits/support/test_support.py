"""Support's reads of one tenant: limits in force (not the working copy), scheduled
changes beside them, usage read from Redis without charging, why a 429 happened,
and the one-click temporary raise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from limits.core.audit import Actor
from limits.models import ChangeRequest, DecisionPeak, Limit
from limits.publishing.services import snapshot_publish
from limits.support.raises import override_raise
from limits.support.rejections import rejection_explain
from limits.support.tenants import tenant_limits
from limits.versions.explain import explain
from sluice.bucket import geometry, peek
from sluice.quota import Dimension, limit_in_words
from sluice.quota import Limit as LimitValue


@pytest.fixture
def published(rules, publisher):
    return snapshot_publish(actor=publisher, message="v1")


@pytest.fixture
def lowering_scheduled(published, rules, publisher, no_notice_period, no_approval_rule):
    """Version 2 lowers the free tier (initech) from 5/s burst 10 to 3/s burst 6, in 14 days."""
    Limit.objects.filter(policy__tier=rules["free"]).update(rate=3, burst=6)
    when = timezone.now() + timedelta(days=14)
    return snapshot_publish(actor=publisher, message="lower free", effective_at=when)


@pytest.mark.parametrize(
    ("limit", "words"),
    [
        (
            LimitValue(Dimension.USER, 2, 1, 5),
            "2 requests per second per user, bursts of 5",
        ),
        (
            LimitValue(Dimension.TENANT, 1, 60, 1),
            "1 request per minute per account, bursts of 1",
        ),
        (
            LimitValue(Dimension.API_KEY, 1000, 3600, 1500, cost=3),
            "1,000 requests per hour per API key, bursts of 1,500; each request counts as 3",
        ),
    ],
)
def test_limit_in_words__a_limit__as_customers_read_it(limit, words):
    assert limit_in_words(limit) == words


def test_tenant_limits__scheduled_lowering__in_force_shows_the_active_version(
    lowering_scheduled, rules
):
    # Given a lowering of initech's tier scheduled in 14 days (and in the working copy)
    # When support reads initech's limits
    shown = tenant_limits(tenant=rules["initech"])
    # Then the limits are the active version's, the lowering beside them with its date
    assert shown.version == 1
    search = next(row for row in shown.routes if row.route == "search")
    assert search.words == ["5 requests per second per account, bursts of 10"]
    (scheduled,) = search.scheduled
    assert scheduled.version == 2
    assert scheduled.effective_at == lowering_scheduled.effective_at
    assert scheduled.words == ["3 requests per second per account, bursts of 6"]


def test_tenant_limits__bucket_partly_spent__usage_read_without_charging(
    published, rules, redis_client
):
    # Given initech's shared bucket (5/s, burst 10) charged 4 tokens by a gateway's key
    key = explain(tenant="initech", route="search").keys[0].key
    shape = geometry(LimitValue(Dimension.TENANT, 5, 1, 10), cost=1)
    (_,), now = peek(redis_client, [key])
    redis_client.set(key, now + 4 * shape.tick, px=60_000)
    # When support reads the page twice
    first = tenant_limits(tenant=rules["initech"])
    second = tenant_limits(tenant=rules["initech"])
    # Then it shows what is left (6, or 7 if a token came back meanwhile), and charged nothing
    for shown in (first, second):
        (usage,) = next(r for r in shown.routes if r.route == "search").usage
        assert usage.key == key
        assert usage.remaining in (6, 7)
        assert usage.capacity == 10
    assert int(redis_client.get(key)) == now + 4 * shape.tick


def test_tenant_limits__unknown_to_the_active_version__said(published, rules):
    from tests.factories import TenantFactory

    newcomer = TenantFactory(slug="newcomer", tier=rules["pro"])
    assert tenant_limits(tenant=newcomer).known is False
    assert tenant_limits(tenant=rules["acme"]).known is True


def _record(tenant: str, route: str, at: datetime, per_second: dict[int, int]) -> None:
    """Recorded per-second traffic of the minute of ``at``: {second: decisions}."""
    minute = at.replace(second=0, microsecond=0)
    seconds = [per_second.get(i, 0) for i in range(60)]
    DecisionPeak.objects.create(
        minute=minute,
        tenant=tenant,
        route=route,
        count=sum(seconds),
        peak=max(seconds),
        seconds=seconds,
    )


def test_rejection_explain__burst__version_policy_and_what_would_have_admitted(
    published, rules
):
    # Given initech (free: 5/s per account, burst 10, all routes) sent 30 requests in
    # the 3 seconds before a 429 at T
    at = published.effective_at.replace(second=30) + timedelta(minutes=1)
    _record("initech", "search", at, {28: 10, 29: 10, 30: 10})
    # When support explains the rejection
    why = rejection_explain(tenant="initech", route="search", at=at, limit="tenant-s")
    # Then: version 1, the free tier's policy, its limit, and the traffic before it
    assert why.version.version == 1
    assert why.tenant_known
    assert why.resolution.policy.scope == "tier:free"
    assert why.requests == 30
    (verdict,) = why.verdicts
    assert verdict.rejected
    assert verdict.name == "tenant-s"
    # 30 requests in 3 counted seconds (2 s of refill at least) against 10 + 5 x 2 = 20
    assert (verdict.busiest, verdict.busiest_window) == (30, 3)
    assert verdict.allowed_then == 20
    # 30 in 2 s of refill fits a burst of 20 at 5/s, or a rate of 10/s at a burst of 10
    assert verdict.burst_needed == 20
    assert verdict.rate_needed_words == "10 per second"


def test_rejection_explain__all_in_one_second__only_a_burst_would_have(
    published, rules
):
    # Given 12 requests of initech in one second (burst 10)
    at = published.effective_at.replace(second=30) + timedelta(minutes=1)
    _record("initech", "search", at, {30: 12})
    # When explained
    (verdict,) = rejection_explain(tenant="initech", route="search", at=at).verdicts
    # Then the burst is named, and no rate is offered: none would have admitted them
    assert verdict.rejected
    assert (verdict.busiest, verdict.allowed_then, verdict.burst_needed) == (12, 10, 12)
    assert verdict.rate_needed_words is None


def test_rejection_explain__versions_over_time__the_version_in_force_that_second(
    published, rules, publisher, no_notice_period, no_approval_rule
):
    # Given version 2, raising the free tier, takes effect in an hour
    Limit.objects.filter(policy__tier=rules["free"]).update(rate=50, burst=100)
    later = snapshot_publish(
        actor=publisher,
        message="raise free",
        effective_at=timezone.now() + timedelta(hours=1),
    )
    # When explaining a rejection a second before it and the second it takes effect
    before = rejection_explain(
        tenant="initech", route="search", at=later.effective_at - timedelta(seconds=1)
    )
    after = rejection_explain(tenant="initech", route="search", at=later.effective_at)
    # Then each is explained by the version in force at that second
    assert before.version.version == 1
    assert before.verdicts[0].words == "5 requests per second per account, bursts of 10"
    assert after.version.version == 2
    assert (
        after.verdicts[0].words == "50 requests per second per account, bursts of 100"
    )


def test_rejection_explain__unknown_tenant__said_as_such(published, rules):
    at = published.effective_at + timedelta(seconds=5)
    why = rejection_explain(tenant="initec", route="search", at=at)
    assert why.tenant_known is False


def test_rejection_explain__before_any_version__refused_with_the_field(published):
    with pytest.raises(ValidationError) as caught:
        rejection_explain(
            tenant="initech", route="search", at=datetime(2000, 1, 1, tzinfo=UTC)
        )
    assert "at" in caught.value.message_dict


def test_override_raise__one_click__change_request_with_an_end_date(
    published, rules, support
):
    # When support raises initech on search
    row = override_raise(
        tenant=rules["initech"],
        route="search",
        reason="launch week",
        actor=Actor(user=support),
    )
    # Then a change request proposes an override with twice the limits, ending in 7 days
    row = ChangeRequest.objects.get(pk=row.pk)
    (edit,) = row.edits.all()
    assert edit.key == "tenant:initech/search~"
    (limit,) = edit.after["limits"]
    assert (limit["rate"], limit["burst"]) == (10, 20)
    ends = datetime.fromisoformat(edit.after["expires_at"].replace("Z", "+00:00"))
    assert timedelta(days=6, hours=23) < ends - timezone.now() <= timedelta(days=7)
    assert row.reason == "launch week"


def test_override_raise__no_reason__refused_with_the_field(published, rules, support):
    with pytest.raises(ValidationError) as caught:
        override_raise(
            tenant=rules["initech"],
            route="search",
            reason=" ",
            actor=Actor(user=support),
        )
    assert "reason" in caught.value.message_dict


def test_override_raise__sliding_window__its_limit_raised_without_a_burst(
    published, rules, support, publisher, no_notice_period, no_approval_rule
):
    # Given initech's free tier holds 5 in any second per tenant
    Limit.objects.filter(policy__tier=rules["free"]).update(
        kind="sliding_window", burst=None
    )
    snapshot_publish(actor=publisher, message="windows")
    # When support raises initech on search
    row = override_raise(
        tenant=rules["initech"],
        route="search",
        reason="launch week",
        actor=Actor(user=support),
    )
    # Then the override proposes a window of twice the limit, still without a burst
    (edit,) = ChangeRequest.objects.get(pk=row.pk).edits.all()
    (limit,) = edit.after["limits"]
    assert (limit["kind"], limit["limit"], limit["window"]) == (
        "sliding_window",
        10,
        "second",
    )
    assert "burst" not in limit


def _windows(rules, publisher, *, limit: int, period: int):
    """The free tier's limits become sliding windows of ``limit`` per ``period`` s,
    published: the version."""
    Limit.objects.filter(policy__tier=rules["free"]).update(
        kind="sliding_window", burst=None, rate=limit, period=period
    )
    return snapshot_publish(actor=publisher, message="windows")


@pytest.mark.usefixtures("published", "no_notice_period", "no_approval_rule")
def test_tenant_limits__sliding_window_partly_used__usage_read_without_charging(
    rules, publisher, redis_client
):
    # Given initech's free tier holds 50 in any minute per tenant, 4 used this minute
    _windows(rules, publisher, limit=50, period=60)
    key = explain(tenant="initech", route="search").keys[0].key
    (_,), now = peek(redis_client, [key])
    redis_client.hset(key, str(now // 60_000_000), 4)
    redis_client.pexpire(key, 120_000)
    # When support reads the page
    shown = tenant_limits(tenant=rules["initech"])
    # Then the window is said in words, with what is left of it
    search = next(row for row in shown.routes if row.route == "search")
    assert search.words == ["50 requests in any minute per account"]
    (usage,) = search.usage
    assert (usage.key, usage.capacity, usage.window) == (key, 50, "minute")
    assert usage.full_in is None  # a window's count slides off; it does not refill
    # 46 left; more if the minute turned meanwhile (its 4 weigh less as it slides off)
    assert 46 <= usage.remaining <= 50
    assert redis_client.hgetall(key) == {str(now // 60_000_000).encode(): b"4"}


@pytest.mark.usefixtures("published", "no_notice_period", "no_approval_rule")
def test_rejection_explain__sliding_window__busiest_second_and_the_limit_it_needed(
    rules, publisher
):
    # Given initech's free tier holds 5 in any second per tenant, and 10 requests in
    # each of the two seconds before a 429
    version = _windows(rules, publisher, limit=5, period=1)
    at = version.effective_at.replace(second=30) + timedelta(minutes=1)
    _record("initech", "search", at, {29: 10, 30: 10})
    # When support explains the rejection
    why = rejection_explain(tenant="initech", route="search", at=at)
    # Then the window is judged as a window, not as a bucket
    assert why.verdicts == []
    (window,) = why.windows
    assert window.rejected
    assert (window.busiest, window.window, window.admits) == (10, 1, 5)
    assert window.limit_needed == 10


@pytest.mark.usefixtures("published", "no_notice_period", "no_approval_rule")
def test_rejection_explain__hourly_window__said_not_judged(rules, publisher):
    # Given initech's free tier holds 500 in any hour per tenant
    version = _windows(rules, publisher, limit=500, period=3600)
    at = version.effective_at.replace(second=30) + timedelta(minutes=1)
    _record("initech", "search", at, {29: 10, 30: 10})
    # When support explains a rejection
    (window,) = rejection_explain(tenant="initech", route="search", at=at).windows
    # Then a minute of traffic says nothing of an hour: not judged, not guessed
    assert window.busiest is None
    assert window.limit_needed is None
    assert not window.exceeded
