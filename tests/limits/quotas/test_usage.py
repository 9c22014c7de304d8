"""A tenant's calendar quotas this period, read from the Redis gateways charge: the
one read, and the pages that show it (support's tenant page, the tenant's own)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse

from limits.announcements.tenant_links import tenant_link_issue
from limits.quotas.usage import tenant_quotas
from limits.versions.explain import explain
from sluice.model import Calendar, CalendarQuota
from tests.limits.quotas.quota_fixtures import (
    SYSTEM,
    ZONES,
    charge,
    publish_quota,
)


@pytest.fixture
def monthly(rules):
    """initech (free tier) has 1,000 requests per calendar month, UTC."""
    return publish_quota(limit=1000, name="Monthly calls")


def _quota_key(tenant: str, route: str = "search") -> str:
    """The key a gateway charges for the tenant's quota (its engine, through explain)."""
    (key,) = [
        k.key
        for k in explain(tenant=tenant, route=route).keys
        if isinstance(k.limit, CalendarQuota)
    ]
    return key


def test_tenant_quotas__month_partly_used__used_remaining_and_period_from_redis(
    monthly, redis_client
):
    # Given initech's quota charged 250 this month, on the key gateways charge
    key = _quota_key("initech")
    start = charge(redis_client, key, 250)
    # When its usage is read
    report = tenant_quotas(tenant="initech")
    # Then the quota says 250 of 1,000 used, 750 left, in this calendar month (UTC)
    (quota,) = report.quotas
    assert (quota.name, quota.words) == (
        "Monthly calls",
        "1,000 requests per month per account",
    )
    assert (quota.limit, quota.used, quota.remaining, quota.percent) == (
        1000,
        250,
        750,
        25.0,
    )
    now = datetime.now(UTC)
    assert quota.period_start == datetime(now.year, now.month, 1, tzinfo=UTC)
    assert quota.period_start.timestamp() == start
    next_month = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    assert quota.period_end == next_month
    # And it is one quota for every route (the tier's policy for all routes holds it)
    assert quota.key == key == _quota_key("initech", route="orders.read")
    assert quota.routes == ("orders.read", "search", "other routes")
    assert (report.version, report.unavailable) == (monthly.version, None)


def test_tenant_quotas__hash_of_an_earlier_period__nothing_used_this_one(
    monthly, redis_client
):
    # Given initech's quota used 990 last month, and not charged since
    charge(redis_client, _quota_key("initech"), 990, periods_ago=1)
    # When its usage is read
    (quota,) = tenant_quotas(tenant="initech").quotas
    # Then nothing is used this month: the hash's period is not this one
    assert (quota.used, quota.remaining, quota.percent) == (0, 1000, 0.0)


def test_tenant_quotas__never_charged__zero_used(monthly, redis_client):
    (quota,) = tenant_quotas(tenant="initech").quotas
    assert (quota.used, quota.remaining) == (0, 1000)


def test_tenant_quotas__billing_cycle_in_paris__period_from_the_tenants_calendar(
    rules, redis_client
):
    # Given initech's billing month starts on the 17th, in Paris
    publish_quota(
        limit=5000,
        cycle="billing",
        calendars={"initech": Calendar("Europe/Paris", 17)},
    )
    key = _quota_key("initech")
    charge(
        redis_client,
        key,
        4000,
        cycle="billing",
        zone_rule=ZONES["Europe/Paris"],
        billing_day=17,
    )
    # When its usage is read
    (quota,) = tenant_quotas(tenant="initech").quotas
    # Then the period runs from midnight of a 17th in Paris to midnight of the next 17th
    paris = ZoneInfo("Europe/Paris")
    start, end = (
        quota.period_start.astimezone(paris),
        quota.period_end.astimezone(paris),
    )
    assert (start.day, start.hour, start.minute, end.day, end.hour) == (17, 0, 0, 17, 0)
    assert start <= datetime.now(UTC) < end
    assert (quota.used, quota.percent) == (4000, 80.0)
    assert key.endswith(":month-billing:calendar_quota")
    assert quota.words == "5,000 requests per billing month per account"


def test_tenant_quotas__tenant_without_a_quota__none(monthly, redis_client):
    # acme is on the pro tier, which has no quota
    report = tenant_quotas(tenant="acme")
    assert (report.quotas, report.unavailable) == ([], None)


def test_tenant_quotas__nothing_published__none(rules, redis_client):
    assert tenant_quotas(tenant="initech").version is None


def test_tenant_quotas__redis_stopped__quotas_listed_usage_unavailable(
    monthly, redis_stopped
):
    # Given the Redis gateways charge is down / When initech's usage is read
    report = tenant_quotas(tenant="initech")
    # Then the quota is listed, its usage unknown (never a 0), and the reason said
    (quota,) = report.quotas
    assert (quota.used, quota.remaining, quota.percent) == (None, None, None)
    assert quota.limit == 1000
    assert "Redis did not answer" in report.unavailable


def test_support_page__quota_partly_used__used_and_reset_shown(
    client, support_user, rules, monthly, redis_client
):
    # Given initech's quota charged 250 this month
    charge(redis_client, _quota_key("initech"), 250)
    # When support opens initech's page
    client.force_login(support_user)
    url = reverse("admin:limits_tenant_support", args=[rules["initech"].pk])
    html = client.get(url).content.decode()
    # Then the quota's usage and the end of its period are shown
    quotas = html[html.index('id="quotas"') :]
    assert "Monthly calls" in quotas
    assert "250 of 1000 (25.0 %)" in quotas
    (quota,) = tenant_quotas(tenant="initech").quotas
    assert quota.period_end.strftime("%Y-%m-%d 00:00") in quotas
    assert "has not asked to be told at 80 % and 100 %" in quotas


def test_support_page__redis_stopped__page_says_usage_unavailable(
    client, support_user, rules, monthly, redis_stopped
):
    client.force_login(support_user)
    url = reverse("admin:limits_tenant_support", args=[rules["initech"].pk])
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    quotas = html[html.index('id="quotas"') :]
    assert "usage unavailable" in quotas
    assert "Redis did not answer" in quotas


def test_tenant_page__quota_partly_used__shown_on_its_private_page_and_json(
    client, rules, monthly, redis_client
):
    # Given initech's quota charged 900 this month, and its private link
    charge(redis_client, _quota_key("initech"), 900)
    path = tenant_link_issue(tenant=rules["initech"], actor=SYSTEM)
    # When the tenant opens its page and its JSON
    html = client.get(path).content.decode()
    data = client.get(path + "limits.json").json()
    # Then both say 900 of 1,000 used, 100 left, and when the quota resets
    assert "900 of 1000 (90.0 %)" in html[html.index('id="quotas"') :]
    (quota,) = data["quotas"]
    assert (quota["used"], quota["remaining"], quota["limit"]) == (900, 100, 1000)
    assert datetime.fromisoformat(quota["period_end"]).day == 1
    assert data["quotas_unavailable"] is None


def test_pages__shadow_quota__say_it_is_not_enforced(
    client, support_user, rules, redis_client
):
    # Given initech's quota is a shadow one (reported, never enforced), used past it
    publish_quota(limit=1000, name="Monthly calls", shadow=True)
    charge(redis_client, _quota_key("initech"), 1200)
    path = tenant_link_issue(tenant=rules["initech"], actor=SYSTEM)
    # When the tenant opens its page and JSON, and support opens its page
    mine = client.get(path).content.decode()
    data = client.get(path + "limits.json").json()
    client.force_login(support_user)
    url = reverse("admin:limits_tenant_support", args=[rules["initech"].pk])
    theirs = client.get(url).content.decode()
    # Then each says the quota is not enforced, with what it counted past its limit
    assert "Monthly calls</strong> (not enforced)" in mine
    assert "1200 of 1000 (120.0 %)" in mine
    (quota,) = data["quotas"]
    assert (quota["shadow"], quota["remaining"]) == (True, 0)
    assert "Monthly calls</strong> (shadow: not enforced)" in theirs
