"""Limits of every kind, walked in a real browser: the policy form shows the chosen
kind's settings in its words, and the changelog says the limit in them."""

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from limits.models import Policy
from tests.browser.conftest import login, save_screenshot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.usefixtures("no_approval_rule")  # approval: tests/browser/test_workflow.py
def test_product__adds_a_sliding_window__form_and_changelog_say_it_in_its_words(page):
    # Given a product manager on the pro tier's search policy (one bucket per tenant)
    login(page, "product")
    policy = Policy.objects.get(tier__slug="pro", route__slug="search")
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    # When they add a limit and make it a sliding window
    page.click(".add-row a")
    page.select_option("#id_limits-1-kind", "sliding_window")
    # Then the form shows the window's settings in its words, not the bucket's
    expect(page.locator("label[for=id_limits-1-rate]")).to_have_text("Limit:")
    expect(page.locator("label[for=id_limits-1-period]")).to_have_text("Window:")
    expect(page.locator("#id_limits-1-burst")).to_be_hidden()
    expect(page.locator("#id_limits-1-max_inflight")).to_be_hidden()
    expect(page.locator("#id_limits-1-shards")).to_be_hidden()
    # and the bucket beside it keeps its own
    expect(page.locator("#id_limits-0-burst")).to_be_visible()
    expect(page.locator("label[for=id_limits-0-rate]")).to_have_text("Rate:")
    save_screenshot(page, "policy-form-sliding-window")
    # When they set 100 per minute per user, a burst typed before the switch still in
    # its hidden field, and save
    page.select_option("#id_limits-1-kind", "rate")
    page.fill("#id_limits-1-burst", "500")
    page.select_option("#id_limits-1-kind", "sliding_window")
    page.select_option("#id_limits-1-dimension", "user")
    page.fill("#id_limits-1-rate", "100")
    page.select_option("#id_limits-1-period", "60")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    # And publish its change request, with the notice a new limit needs
    page.click("#publish-link")
    page.wait_for_url("**/publish/")
    assert "per user: 100 requests per minute, sliding window" in page.text_content(
        "#content-main"
    )
    effective = (datetime.now(UTC) + timedelta(days=15)).strftime("%Y-%m-%dT%H:%M")
    page.fill("#id_effective_at", effective)
    page.click("input[value=Publish]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    # Then the public changelog says the window in its words, with no burst
    page.goto("/changelog/")
    change = page.locator("ul.changes li", has_text="sliding window")
    expect(change).to_contain_text("per user: 100 requests per minute, sliding window")
    expect(change).not_to_contain_text("burst 500")
    save_screenshot(page, "product-adds-sliding-window")


def test_policy_form__without_javascript__each_limit_shows_its_kinds_settings(
    browser, live_server, demo
):
    # Given a browser without JavaScript, signed in as product
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    page = context.new_page()
    login(page, "product")
    # When it opens the exports policy: a bucket and a concurrency cap per tenant
    policy = Policy.objects.get(scope="default", route__slug="reports.export")
    kinds = [limit.kind for limit in policy.limits.all()]  # the form's order
    cap, bucket = kinds.index("concurrent"), kinds.index("rate")
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    # Then the cap shows its own settings and none of the bucket's, and the other way
    expect(page.locator(f"#id_limits-{cap}-max_inflight")).to_be_visible()
    for name in ("rate", "period", "burst"):
        expect(page.locator(f"#id_limits-{cap}-{name}")).to_be_hidden()
        expect(page.locator(f"#id_limits-{bucket}-{name}")).to_be_visible()
    expect(page.locator(f"#id_limits-{bucket}-max_inflight")).to_be_hidden()
    save_screenshot(page, "policy-form-without-javascript")
    context.close()
