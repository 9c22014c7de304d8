"""The journeys that matter, as people walk them in a real browser."""

from datetime import UTC, datetime, timedelta

import pytest

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import GatewayToken, Policy
from sluice.source import PollResult, SnapshotSource
from tests.browser.conftest import (
    PATIENT,
    decide_until_limited,
    login,
    save_screenshot,
)
from tests.signing import TEST_KEYS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.usefixtures("no_approval_rule")  # approval: tests/browser/test_workflow.py
def test_product__lowers_free_search_with_notice__changelog_shows_it(page):
    # Given a product manager / When they lower the free tier's search limit
    login(page, "product")
    policy = Policy.objects.get(tier__slug="free", route__slug="search")
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    tenant_row = page.locator("select[id$='-dimension'] >> nth=0")
    index = tenant_row.get_attribute("id").split("-")[1]
    page.fill(f"#id_limits-{index}-rate", "3")
    page.fill(f"#id_limits-{index}-burst", "6")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    # And open its change request's Publish page: the change and the notice period
    page.click("#publish-link")
    page.wait_for_url("**/publish/")
    body = page.text_content("#content-main")
    assert "lowered" in body
    assert "5 / s, burst 10 → 3 / s, burst 6" in body
    assert "notice" in body.lower()
    # And publish it to take effect in 15 days, with a note for customers
    effective = (datetime.now(UTC) + timedelta(days=15)).strftime("%Y-%m-%dT%H:%M")
    page.fill("#id_effective_at", effective)
    page.fill("#id_note", "Free search is lowered to protect paid tiers.")
    page.click("input[value=Publish]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    assert "taking effect" in page.text_content(".messagelist")
    # Then the public changelog lists it as upcoming, in words
    page.goto("/changelog/")
    changelog = page.text_content("body")
    assert "3 / s, burst 6" in changelog
    assert "upcoming" in changelog.lower()
    save_screenshot(page, "product-lowers-free-search")


def test_support__temporary_raise_for_a_tenant__explain_confirms_it(page):
    # Given a support agent / When they give initech a temporary raise on search
    login(page, "support")
    page.goto("/admin/limits/policy/add/")
    page.click(".field-tenant .select2-selection")
    page.fill(".select2-search__field", "initech")
    page.click(".select2-results__option >> text=initech")
    page.select_option("#id_route", label="search")
    page.fill("#id_reason", "Black Friday launch, ticket 4711")
    expires = datetime.now(UTC) + timedelta(days=3)
    page.fill("#id_expires_at_0", expires.strftime("%Y-%m-%d"))
    page.fill("#id_expires_at_1", "12:00:00")
    page.fill("#id_limits-0-rate", "50")
    page.fill("#id_limits-0-burst", "100")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    # And publish its change request, then use Explain on the active version
    page.click("#publish-link")
    page.click("input[value=Publish]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    page.goto(
        "/admin/limits/snapshot/explain/?source=active&tenant=initech&route=search"
    )
    # Then the override applies, over the tier's policy, until its expiry
    explanation = page.text_content("#explanation")
    assert "tenant initech · search (override)" in explanation
    assert "per tenant: 50 / s, burst 100" in explanation
    assert "tier free · search" in explanation
    save_screenshot(page, "support-temporary-raise-explained")


def test_viewer__opens_a_policy__cannot_edit(page):
    login(page, "viewer")
    policy = Policy.objects.get(tier__slug="pro", route__slug="search")
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    assert page.locator("input[name=_save]").count() == 0
    assert page.locator("#id_limits-0-rate").count() == 0  # shown as text, not inputs
    assert "per tenant: 50 / s, burst 100" in page.text_content("#content-main")
    response = page.goto("/admin/limits/policy/add/")
    assert response.status == 403
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    save_screenshot(page, "viewer-cannot-edit")


def test_fleet__demo_gateway_polls__shown_in_sync(
    page, live_server, tmp_path, settings
):
    # Given the demo gateway polling the control plane with its token (reports written
    # at once: no poll window, which would hold them up to a second)
    settings.SLUICE_POLL_WINDOW_MS = 0
    secret = token_create(token=GatewayToken(name="demo-gateway"), actor=Actor.system())
    gateway = SnapshotSource(
        f"{live_server.url}/api/v1/snapshot",
        secret,
        gateway_id="demo-gateway",
        public_keys=TEST_KEYS,
        cache_path=tmp_path / "lkg.json",
        timeout=PATIENT,
    )
    assert gateway.poll_once() == PollResult.APPLIED
    assert (
        gateway.poll_once() == PollResult.NOT_MODIFIED
    )  # reports the version it applied
    # When a product person opens the Fleet page
    login(page, "product")
    page.goto("/admin/limits/gatewaytoken/fleet/")
    # Then the gateway runs version 1, in sync
    row = page.locator("#fleet-gateways tr", has_text="demo-gateway")
    assert "in sync" in row.text_content()
    assert "1 (active)" in page.text_content("#fleet-versions")
    save_screenshot(page, "fleet-demo-gateway-in-sync")


def test_dashboard__limited_traffic__charts_render_with_data(page, redis_server):
    # Given a gateway that limited initech on search, its decisions streamed and rolled up
    from limits.traffic.stats import decision_stream_aggregate
    from limits.versions.selectors import snapshot_document, snapshot_get_active
    from sluice import Limiter, connect
    from sluice.metrics import DecisionEvents

    events = DecisionEvents(
        connect(redis_server.url, timeout=PATIENT), gateway_id="demo-gateway"
    )
    limiter = Limiter(
        redis_server.url,
        snapshot_document(snapshot_get_active()),
        timeout=PATIENT,
        events=events,
    )
    decisions = decide_until_limited(
        limiter, method="GET", path="/v1/search", tenant="initech", user="u1"
    )
    events.flush()
    decision_stream_aggregate()
    assert any(not d.allowed for d in decisions)
    # When a viewer opens the traffic dashboard
    login(page, "viewer")
    page.goto("/admin/limits/decisionminute/")
    # Then the charts are drawn, and initech is the most limited tenant
    assert page.locator("svg").count() >= 2
    assert "initech" in page.text_content("#content-main")
    assert page.locator("svg polyline, svg path").count() >= 1
    save_screenshot(page, "dashboard-charts-with-data")
