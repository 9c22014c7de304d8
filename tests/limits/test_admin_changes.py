"""Change requests in the admin: their page, the publish form, the home page's renewal."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.changes.publishing import change_request_publish
from limits.changes.services import (
    Proposal,
    change_request_approve,
    change_request_open,
)
from limits.core.audit import Actor
from limits.models import ChangeRequest, Policy
from limits.publishing.services import snapshot_publish
from limits.rules.documents import document_in
from limits.versions.selectors import snapshot_rules
from tests.factories import PolicyFactory, UserFactory
from tests.recorded import record

pytestmark = pytest.mark.django_db


def _lowering(product_user, active) -> ChangeRequest:
    doc = document_in(snapshot_rules(active), "policy", "tier:pro/search")
    doc["limits"][0].update(rate=20, burst=40)
    return change_request_open(
        actor=Actor(user=product_user),
        proposals=[Proposal("policy", "tier:pro/search", doc)],
    )


@pytest.fixture
def active(rules):
    return snapshot_publish(actor=Actor.system(), message="v1")


def test_publish_form__lowering_too_soon__error_on_the_effective_time(
    client, active, product_user
):
    request = _lowering(product_user, active)
    other = UserFactory(username="quinn", role="product")
    change_request_approve(change_request=request, actor=Actor(user=other))
    client.force_login(product_user)
    url = reverse("admin:limits_changerequest_publish", args=[request.pk])
    soon = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    response = client.post(url, {"effective_at": soon})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "cannot take effect before" in errors["effective_at"][0]
    request.refresh_from_db()
    assert request.state == "open"


def test_request_page__blank_title__field_error(client, active, product_user):
    request = _lowering(product_user, active)
    client.force_login(product_user)
    url = reverse("admin:limits_changerequest_change", args=[request.pk])
    response = client.post(url, {"title": "", "reason": "x"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["title"]


def test_request_page__viewer__reads_it_without_buttons(
    client, active, product_user, viewer_user
):
    request = _lowering(product_user, active)
    client.force_login(viewer_user)
    page = client.get(reverse("admin:limits_changerequest_change", args=[request.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "Not live yet." in html
    assert "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40" in html
    assert 'value="Approve"' not in html
    assert 'id="publish-link"' not in html


def test_request_page__lowering__whom_it_would_limit_from_recorded_traffic(
    client, active, product_user
):
    # Given acme (pro) searched 30 times a second for 20 s an hour ago, and a
    # request lowering pro's search from 50/s to 20/s
    record("acme", "search", timezone.now() - timedelta(hours=1), [30] * 20)
    request = _lowering(product_user, active)
    client.force_login(product_user)
    # When its page and its publish page are read
    page = client.get(reverse("admin:limits_changerequest_change", args=[request.pk]))
    publish = client.get(
        reverse("admin:limits_changerequest_publish", args=[request.pk])
    )
    # Then both show acme's searches and the rejections the new limit would have made
    for response in (page, publish):
        rows = response.context["impact"].rows
        assert [(r.tenant, r.route, r.seen) for r in rows] == [("acme", "search", 600)]
        html = response.content.decode()
        assert 'id="impact-rows"' in html
        assert f"<strong>{rows[0].rejected_new}</strong>" in html
        assert "How this estimate can err" in html
    assert 150 <= rows[0].rejected_new <= 200


def test_home_renew__support__one_click_opens_a_request_ready_to_publish(
    client, rules, support_user, settings
):
    settings.SLUICE_OVERRIDE_REMINDER = [3 * 86400]
    override = PolicyFactory(
        override=True,
        tenant=rules["initech"],
        route=rules["search"],
        expires_at=timezone.now() + timedelta(days=2),
    )
    snapshot_publish(actor=Actor.system(), message="v1")
    client.force_login(support_user)
    home = client.get(reverse("admin:index")).content.decode()
    assert "tenant initech · search (override)" in home
    response = client.post(
        reverse("admin:limits_changerequest_renew", args=[override.pk])
    )
    request = ChangeRequest.objects.get(origin="renewal")
    assert response["Location"] == reverse(
        "admin:limits_changerequest_change", args=[request.pk]
    )
    page = client.get(response["Location"]).content.decode()
    assert 'id="publish-link"' in page  # support publishes its own renewal
    assert (
        Policy.objects.get(pk=override.pk).expires_at == override.expires_at
    )  # not live yet


def _route_request(product_user, slug: str) -> ChangeRequest:
    route = {"methods": ["GET"], "path": "/v1/reports"}
    return change_request_open(
        actor=Actor(user=product_user), proposals=[Proposal("route", slug, route)]
    )


def test_two_requests_claim_one_route__second_page_shows_conflict_publish_refused(
    client, active, product_user
):
    # Given two requests adding a route for one method and path, the first published
    first = _route_request(product_user, "reports")
    second = _route_request(product_user, "rep2")
    change_request_publish(change_request=first, actor=Actor(user=product_user))
    client.force_login(product_user)
    # When the second's page is read / Then it shows the collision, not a 500
    page = client.get(reverse("admin:limits_changerequest_change", args=[second.pk]))
    assert page.status_code == 200
    assert "claimed by both &#x27;reports&#x27; and &#x27;rep2&#x27;" in (
        page.content.decode()
    )
    # And publishing it from its form is refused with the route named
    url = reverse("admin:limits_changerequest_publish", args=[second.pk])
    assert client.get(url).status_code == 200
    response = client.post(url, {})
    assert response.status_code == 200
    assert "GET /v1/reports is claimed by both" in response.content.decode()
    second.refresh_from_db()
    assert second.state == "open"
