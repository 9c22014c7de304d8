"""A calendar quota, walked end to end: product sets a tenant's calendar and adds a
daily quota in the admin, gateways charge it, support and the tenant read its usage,
a 429 says when it resets, and the tenant is told at 100 %."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import standardwebhooks
from playwright.sync_api import Page, expect

from limits.announcements.tasks import delivery_send_task, quota_reminders_send_task
from limits.choices import DeliveryChannel, DeliveryKind
from limits.models import Delivery, Policy, Tenant
from limits.versions.selectors import (
    snapshot_document,
    snapshot_get_active,
    snapshot_rules,
)
from sluice import Limiter
from sluice.headers import error_response
from sluice.model import CalendarQuota
from tests.browser.conftest import PATIENT, login, save_screenshot, submit
from tests.limits.announce_fixtures import endpoint_for

pytestmark = pytest.mark.django_db(transaction=True)

#: Nine hours ahead of UTC all year (no daylight saving time): its midnight is not
#: UTC's, so a quota that reset at UTC midnight would be caught.
ZONE = "Asia/Tokyo"
QUOTA = 5


@pytest.fixture
def quotas_now(settings, no_approval_rule):
    """A deployment where a new limit may take effect at once (no notice period)."""
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0


def _local_midnight_after(instant: float) -> datetime:
    """The first midnight in ZONE after ``instant`` (epoch seconds), in UTC."""
    local = datetime.fromtimestamp(instant, ZoneInfo(ZONE))
    midnight = datetime.combine(local.date() + timedelta(days=1), datetime.min.time())
    return midnight.replace(tzinfo=ZoneInfo(ZONE)).astimezone(UTC)


def _set_calendar(page: Page, tenant: Tenant) -> None:
    """Product gives ``tenant`` a time zone and a billing day (a proposed edit)."""
    page.goto(f"/admin/limits/tenant/{tenant.pk}/change/")
    page.fill("#id_time_zone", ZONE)
    page.fill("#id_billing_day", "17")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")


def _add_daily_quota(page: Page, policy: Policy) -> None:
    """Product adds a per-tenant quota of QUOTA a day to ``policy``, checking that the
    form says the quota's settings in its words and hides the bucket's."""
    row = policy.limits.count()  # the new row's index, after the existing ones
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    page.click(".add-row a")
    page.select_option(f"#id_limits-{row}-kind", "calendar_quota")
    expect(page.locator(f"label[for=id_limits-{row}-rate]")).to_have_text("Limit:")
    expect(page.locator(f"label[for=id_limits-{row}-quota_per]")).to_have_text("Per:")
    expect(page.locator(f"label[for=id_limits-{row}-quota_cycle]")).to_have_text(
        "Cycle:"
    )
    for bucket_only in ("period", "burst", "max_inflight", "shards"):
        expect(page.locator(f"#id_limits-{row}-{bucket_only}")).to_be_hidden()
    expect(
        page.locator("#id_limits-0-burst")
    ).to_be_visible()  # the bucket keeps its own
    save_screenshot(page, "policy-form-calendar-quota")
    page.select_option(f"#id_limits-{row}-dimension", "tenant")
    page.fill(f"#id_limits-{row}-rate", str(QUOTA))
    page.select_option(f"#id_limits-{row}-quota_per", "day")
    page.select_option(f"#id_limits-{row}-quota_cycle", "calendar")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")


def _tenant_action(page: Page, tenant: Tenant, action: str) -> None:
    """Run an admin action of the tenant list on ``tenant`` alone."""
    page.goto("/admin/limits/tenant/")
    page.check(f"input[name=_selected_action][value='{tenant.pk}']")
    page.select_option("select[name=action]", action)
    submit(page, "button[name=index]")


@pytest.mark.usefixtures("quotas_now")
def test_calendar_quota__set_in_admin__charged_shown_enforced_and_reminded(
    page, redis_server, receiver, settings
):
    initech = Tenant.objects.get(slug="initech")
    policy = Policy.objects.get(tier__slug="free", route__slug="search")
    # Given product sets initech's calendar and adds 5 a day per tenant to its tier's
    # search policy, in one change request
    login(page, "product")
    _set_calendar(page, initech)
    _add_daily_quota(page, policy)
    # When they publish it
    page.click("#publish-link")
    page.wait_for_url("**/publish/")
    edits = page.text_content("#content-main")
    assert "new limit per tenant: daily quota of 5 requests" in edits
    assert "time zone UTC → Asia/Tokyo, billing day 1 → 17" in edits
    page.click("input[value=Publish]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    # Then the active version holds the quota and initech's calendar
    active = snapshot_get_active()
    calendar = snapshot_rules(active).calendar("initech")
    assert (calendar.zone, calendar.billing_day) == (ZONE, 17)

    # When a gateway on that version decides initech's searches until the quota is used
    limiter = Limiter(redis_server.url, snapshot_document(active), timeout=PATIENT)
    search = {"method": "GET", "path": "/v1/search", "tenant": "initech", "user": "u1"}
    admitted = [limiter.decide(**search) for _ in range(QUOTA)]
    rejected = limiter.decide(**search)
    # Then the first 5 are admitted (the bucket holds 10) and the 6th is a 429 whose
    # Retry-After points at the next midnight in Tokyo
    assert all(d.allowed for d in admitted)
    assert not rejected.allowed
    assert isinstance(rejected.deciding.limit, CalendarQuota)  # not the bucket
    answer = error_response(rejected)
    assert answer.status == 429
    retry_after = int(dict(answer.headers)["Retry-After"])
    midnight = _local_midnight_after(rejected.at).timestamp()
    assert rejected.at + retry_after - 1 < midnight <= rejected.at + retry_after

    # When support opens initech's support page
    page.context.clear_cookies()
    login(page, "support")
    page.goto(f"/admin/limits/tenant/{initech.pk}/support/")
    # Then "Quotas this period" shows the quota used up, with the period's end
    quotas = page.locator("#quotas")
    expect(quotas).to_contain_text("Quotas this period")
    expect(quotas).to_contain_text("5 requests per day per account")
    expect(quotas).to_contain_text(f"{QUOTA} of {QUOTA} (100.0 %)")
    save_screenshot(page, "support-quota-used")
    # When support issues initech's private link and follows it
    _tenant_action(page, initech, "issue_changelog_link")
    with page.expect_navigation():
        page.click(".messagelist a")
    # Then the tenant reads the same usage on its private page
    expect(page.locator("#quotas")).to_have_text("Your quotas this period")
    mine = page.locator("#quotas + table")
    expect(mine).to_contain_text(f"{QUOTA} of {QUOTA} (100.0 %)")
    resets = datetime.fromtimestamp(midnight, UTC).strftime("%Y-%m-%d %H:%M")
    expect(mine).to_contain_text(resets)  # Tokyo's midnight, said in UTC
    save_screenshot(page, "tenant-quota-used")

    # Given initech has a webhook endpoint (a receiver on loopback)
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = True
    _, secret = endpoint_for(initech, receiver.url)
    # When support turns its quota reminders on and beat's task runs
    _tenant_action(page, initech, "quota_reminders_on")
    expect(page.locator(".messagelist")).to_contain_text("Quota reminders on")
    quota_reminders_send_task.apply()
    webhook = Delivery.objects.get(
        kind=DeliveryKind.QUOTA, channel=DeliveryChannel.WEBHOOK
    )
    delivery_send_task.apply(args=[webhook.pk])
    # Then the receiver gets the signed 100 % event, with the period's end
    (request,) = receiver.requests
    event = standardwebhooks.Webhook(secret).verify(request.body, dict(request.headers))
    assert (event["type"], event["tenant"], event["threshold"]) == (
        "quota.threshold",
        "initech",
        100,
    )
    quota = event["quota"]
    assert (quota["used"], quota["limit"], quota["remaining"]) == (QUOTA, QUOTA, 0)
    assert datetime.fromisoformat(quota["period_end"]).timestamp() == midnight
