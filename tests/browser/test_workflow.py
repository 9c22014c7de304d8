"""How teams change limits, walked in a real browser: change requests with approval,
rules as code from CI, and a home page that shows the state of things."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from limits.changes.publishing import change_request_publish
from limits.changes.services import (
    Proposal,
    change_request_approve,
    change_request_open,
)
from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import (
    ApiToken,
    ChangeRequest,
    GatewayToken,
    Limit,
    Policy,
    Tenant,
    Tier,
)
from limits.publishing.services import snapshot_publish
from limits.rules import services as rules
from limits.rules.documents import document_in
from limits.traffic.stats import decision_stream_aggregate
from limits.versions.selectors import (
    snapshot_document,
    snapshot_get_active,
    snapshot_rules,
    snapshot_scheduled,
)
from sluice import Limiter, connect
from sluice.metrics import DecisionEvents
from sluice.source import PollResult, SnapshotSource
from tests.browser.conftest import (
    PATIENT,
    decide_until_limited,
    login,
    save_screenshot,
    submit,
)
from tests.factories import UserFactory
from tests.signing import TEST_KEYS

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = Actor.system("test")
WIDTH = 1280


def _actor(username: str) -> Actor:
    return Actor(user=get_user_model().objects.get(username=username))


def _later(days: int = 15) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M")


def _lowered(key: str, tenant_rate: int, tenant_burst: int) -> Proposal:
    """The active version's policy ``key`` with its per-tenant bucket lowered."""
    doc = document_in(snapshot_rules(snapshot_get_active()), "policy", key)
    for limit in doc["limits"]:
        if limit["dimension"] == "tenant":
            limit.update(rate=tenant_rate, burst=tenant_burst)
    return Proposal("policy", key, doc)


def _fits(page) -> None:
    """Nothing wider than the 1,280 px window: no horizontal scrolling."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"{page.url} is {width} px wide"


def _choose_tenant(page, slug: str) -> None:
    page.click(".field-tenant .select2-selection")
    page.fill(".select2-search__field", slug)
    page.click(f".select2-results__option >> text={slug}")


def test_support__raise_published_while_an_unrelated_lowering_is_pending(page):
    # Given a lowering of free search, approved and scheduled in 15 days,
    # and another lowering (pro search) waiting for approval
    UserFactory(username="product2", password="product2", role="product")
    scheduled = change_request_open(
        actor=_actor("product"), proposals=[_lowered("tier:free/search", 3, 6)]
    )
    change_request_approve(change_request=scheduled, actor=_actor("product2"))
    change_request_publish(
        change_request=scheduled,
        actor=_actor("product"),
        effective_at=datetime.now(UTC) + timedelta(days=15),
    )
    waiting = change_request_open(
        actor=_actor("product"), proposals=[_lowered("tier:pro/search", 20, 40)]
    )
    # When support adds a temporary raise for initech on search in the admin
    login(page, "support")
    page.goto("/admin/limits/policy/add/")
    _choose_tenant(page, "initech")
    page.select_option("#id_route", label="search")
    page.fill("#id_reason", "Black Friday launch, ticket 4711")
    expires = datetime.now(UTC) + timedelta(days=3)
    page.fill("#id_expires_at_0", expires.strftime("%Y-%m-%d"))
    page.fill("#id_expires_at_1", "12:00:00")
    page.fill("#id_limits-0-rate", "50")
    page.fill("#id_limits-0-burst", "100")
    page.click("input[name=_save]")
    # Then it lands in its draft change request, which says it is not live yet
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    assert "Not live yet." in page.text_content("#not-live")
    assert "Not needed" in page.text_content("#approval")
    assert "1 tenant: initech" in page.text_content("#reach")
    # And support publishes it at once, without the lowerings
    page.click("#publish-link")
    page.click("input[value=Publish]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    said = page.text_content(".messagelist")
    assert "Published as version 3; carried into the scheduled version(s) as 4" in said
    # Then gateways enforce the raise now, over the tier's policy
    page.goto(
        "/admin/limits/snapshot/explain/?source=active&tenant=initech&route=search"
    )
    explanation = page.text_content("#explanation")
    assert "tenant initech · search (override)" in explanation
    assert "per tenant: 50 / s, burst 100" in explanation
    # And the pending lowering still comes on its day, with the raise carried in
    (coming,) = snapshot_scheduled()
    keys = {p.key: p for p in snapshot_rules(coming).policies}
    assert ("tenant:initech", "search", True) in keys
    assert keys[("tier:free", "search", False)].limits[0].rate == 3
    assert not any(
        p.key[0] == "tier:pro" and p.limits[0].rate == 20 for p in keys.values()
    )
    waiting.refresh_from_db()
    assert waiting.state == "open"
    save_screenshot(page, "support-raise-while-lowering-pending")


def test_product__lowering_reaching_30_tenants__published_after_a_second_approval(
    page, browser, live_server
):
    # Given 30 tenants on the free tier (2 in the demo, 28 more published)
    free = Tier.objects.get(slug="free")
    for n in range(28):
        rules.rule_save(
            obj=Tenant(slug=f"startup-{n:02}", name=f"Startup {n}", tier=free),
            actor=SYSTEM,
        )
    snapshot_publish(actor=SYSTEM, message="28 more free tenants")
    UserFactory(username="product2", password="product2", role="product")
    # When product lowers the free tier's limit on all routes, on its policy page
    login(page, "product")
    policy = Policy.objects.get(tier=free, route=None)
    page.goto(f"/admin/limits/policy/{policy.pk}/change/")
    _fits(page)  # the policy page fits a 1,280 px window
    save_screenshot(page, "policy-page-1280")
    assert not page.is_visible("#id_limits-0-shards")  # expert settings folded away
    page.fill("#id_limits-0-rate", "6")
    page.fill("#id_limits-0-burst", "12")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    # Then its change request says whom it reaches and that it needs approval
    assert "30 tenants" in page.text_content("#reach")
    approval = page.text_content("#approval")
    assert "it lowers limits and it reaches 30 tenants (more than 25)" in approval
    # (its answer comes back at the same URL: wait for that page, not the one before)
    submit(page, "input[name=_submit]")  # Save and submit for review
    # And product cannot publish it alone
    page.click("#publish-link")
    page.fill("#id_effective_at", _later())
    submit(page, "input[value=Publish]")
    expect(page.locator("#publish-errors")).to_contain_text(
        "needs the approval of a second person with the product role"
    )
    request = ChangeRequest.objects.get(author__username="product")
    assert (request.state, request.published_version) == ("open", None)
    # When a second product person opens it from their home page and approves it
    other = browser.new_context(
        base_url=live_server.url, viewport={"width": WIDTH, "height": 900}
    )
    reviewer = other.new_page()
    login(reviewer, "product2")
    reviewer.click(f"#home-requests a >> text=#{request.pk}")
    submit(reviewer, "input[value=Approve]")
    expect(reviewer.locator(".messagelist")).to_contain_text("Approved.")
    other.close()
    # Then the author publishes it, with the notice period
    page.goto(f"/admin/limits/changerequest/{request.pk}/publish/")
    page.fill("#id_effective_at", _later())
    page.click("input[value=Publish]")
    page.wait_for_url("**/admin/limits/changerequest/*/change/")
    assert "taking effect" in page.text_content(".messagelist")
    (coming,) = snapshot_scheduled()
    assert coming.diff["lowers"]
    assert len(coming.diff["affected"]["tenants"]) == 30
    save_screenshot(page, "product-lowering-approved-then-published")


def _api(live_server, token: str, method: str, path: str, body: dict | None = None):
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=PATIENT) as response:
        return response.read().decode()


def test_home__real_data__the_state_of_things_at_1280_px(
    page, live_server, tmp_path, redis_server, settings
):
    settings.SLUICE_POLL_WINDOW_MS = 0
    # Given a gateway polling and enforcing, and initech limited on search
    secret = token_create(token=GatewayToken(name="gw-eu-1"), actor=SYSTEM)
    gateway = SnapshotSource(
        f"{live_server.url}/api/v1/snapshot",
        secret,
        gateway_id="gw-eu-1",
        public_keys=TEST_KEYS,
        cache_path=tmp_path / "lkg.json",
        timeout=PATIENT,
    )
    assert gateway.poll_once() == PollResult.APPLIED
    events = DecisionEvents(
        connect(redis_server.url, timeout=PATIENT), gateway_id="gw-eu-1"
    )
    document = snapshot_document(snapshot_get_active())
    limiter = Limiter(redis_server.url, document, timeout=PATIENT, events=events)
    decide_until_limited(
        limiter, method="GET", path="/v1/search", tenant="initech", user="u1"
    )
    events.flush()
    decision_stream_aggregate()
    # And an override of acme expiring in 2 days, a lowering scheduled in 15
    expires = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise_acme = {
        "scope": "tenant:acme",
        "route": "search",
        "expires_at": expires,
        "reason": "Migration week",
        "limits": [
            {"dimension": "tenant", "rate": 200, "period": "second", "burst": 400}
        ],
    }
    request = change_request_open(
        actor=_actor("support"), proposals=[Proposal("policy", "", raise_acme)]
    )
    change_request_publish(change_request=request, actor=_actor("support"))
    Limit.objects.filter(policy__tier__slug="pro", policy__route__slug="search").update(
        rate=40, burst=80
    )
    snapshot_publish(
        actor=SYSTEM,
        message="Lower pro search",
        effective_at=datetime.now(UTC) + timedelta(days=15),
    )
    # And CI exports the rules, lowers free search, diffs and applies the file with a token
    token = token_create(
        token=ApiToken(user=_actor("product").user, name="ci"), actor=SYSTEM
    )
    exported = _api(live_server, token, "GET", "rules/export")
    edited = exported.replace(
        "{dimension: tenant, rate: 5, period: second, burst: 10}",
        "{dimension: tenant, rate: 4, period: second, burst: 8}",
    )
    diff = json.loads(
        _api(live_server, token, "POST", "rules/diff", {"document": edited})
    )
    assert (diff["equal"], diff["changes"]["lowers"]) == (False, True)
    applied = json.loads(
        _api(
            live_server,
            token,
            "POST",
            "rules/apply",
            {"document": edited, "title": "CI: lower free search", "publish": True},
        )
    )
    assert "approval" in applied["not_published"]
    gateway.poll_once()  # takes the version active now
    gateway.poll_once()  # and reports that it runs it
    # When a second product person opens the admin's home page
    UserFactory(username="product2", password="product2", role="product")
    login(page, "product2")
    _fits(page)
    active = snapshot_get_active()
    # Then it shows the active version, what waits for them, what is scheduled,
    # the fleet, who is limited and which override expires soon
    assert f"Version {active.version}" in page.text_content("#home-active")
    waiting = page.text_content("#home-requests")
    assert "CI: lower free search" in waiting
    assert "needs your approval" in waiting
    assert "Lower pro search" in page.text_content("#home-scheduled")
    assert "1 in sync" in page.text_content("#home-fleet")
    assert "initech" in page.text_content("#home-limited")
    assert "tenant acme · search (override)" in page.text_content("#home-overrides")
    save_screenshot(page, "home-state-of-things")
    # And the versions list fits without scrolling; the changelog says what is in effect
    page.goto("/admin/limits/snapshot/")
    save_screenshot(page, "versions-list")
    _fits(page)
    table = page.evaluate(
        "(() => { const t = document.querySelector('#result_list');"
        " return [t.scrollWidth, t.parentElement.clientWidth]; })()"
    )
    assert table[0] <= table[1], table
    page.goto("/changelog/")
    assert f"In effect now: version {active.version}" in page.text_content("#in-effect")
