"""Support's journey: why did initech get a 429 at T, from a rejection in three clicks;
and the tenant page quotes the limits gateways enforce, not a scheduled lowering."""

from datetime import UTC, datetime, timedelta

import pytest

from limits.core.audit import Actor
from limits.models import Limit, Rejection
from limits.publishing.services import snapshot_publish
from tests.browser.conftest import PATIENT, decide_until_limited, login, save_screenshot

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def initech_limited(redis_server, demo):
    """A gateway limited initech on search; its decisions streamed and rolled up."""
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
    assert not decisions[-1].allowed
    return decisions[-1]


@pytest.fixture
def lowering_scheduled(demo, settings):
    """Initech's tier (free) lowered on search, to take effect in 15 days."""
    settings.SLUICE_APPROVAL_LOWERING = False
    settings.SLUICE_APPROVAL_TENANTS = 10**9
    Limit.objects.filter(
        policy__tier__slug="free", policy__route__slug="search"
    ).update(rate=1, burst=2)
    return snapshot_publish(
        actor=Actor.system(),
        message="lower free search",
        effective_at=datetime.now(UTC) + timedelta(days=15),
    )


def test_support__why_initech_got_a_429__three_clicks_from_the_rejections(
    page, initech_limited, lowering_scheduled
):
    rejection = Rejection.objects.get(tenant="initech")
    at = rejection.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    # Given a support agent on the admin's home page
    login(page, "support")
    # When they open the rejections (1), pick initech (2), and click explain (3)
    page.click("a[href$='/admin/limits/rejection/']")
    page.click("#changelist-filter a:text-is('initech')")
    page.wait_for_url("**tenant=initech**")
    page.click("a:text-is('explain')")
    page.wait_for_url("**/explain/**")
    # Then the page says which limit of which policy, the version, the traffic before
    answer = page.text_content("#rejection")
    assert f"Why initech got a 429 on search at {at} UTC" in answer
    assert "version 1" in answer
    assert rejection.limit in answer
    assert "rejected it" in answer
    assert "request" in page.text_content("#rejection tr.sluice-hit")
    assert "would have admitted it" in answer
    save_screenshot(page, "support-explains-a-429")
    # And from there the tenant page quotes the limits in force, not the lowering
    page.click("#rejection a:has-text('limits in force')")
    page.wait_for_url("**/support/")
    in_force = page.text_content("#in-force")
    assert "Limits in force (version 1)" in in_force
    search = page.locator("#in-force tbody tr", has_text="search").first
    limits = search.locator("td").nth(1).text_content()
    assert "5 requests per second per account, bursts of 10" in limits
    assert "bursts of 2" not in limits
    scheduled = search.locator("td.scheduled").text_content()  # the lowering, dated
    when = lowering_scheduled.effective_at.strftime("%Y-%m-%d %H:%M")
    assert f"from {when} UTC (version 2)" in scheduled
    assert "1 request per second per account, bursts of 2" in scheduled
    assert "initech" in page.text_content("#recent-rejections")
    save_screenshot(page, "support-tenant-limits-in-force")
