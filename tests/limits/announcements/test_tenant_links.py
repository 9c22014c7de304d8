"""A tenant's private changelog link: its own limits and the changes coming its way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from limits.announcements.tenant_links import tenant_link_issue, tenant_link_revoke
from limits.choices import AuditAction
from limits.core.audit import Actor
from limits.models import AuditEntry
from limits.publishing.services import snapshot_publish
from tests.factories import PolicyFactory
from tests.limits.announce_fixtures import lower_pro_search

SYSTEM = Actor.system("test")


@pytest.fixture
def upcoming(rules, published):
    """Version 2, in 15 days: pro search lowered, and an override for globex only."""
    lower_pro_search(rules)
    PolicyFactory(
        override=True,
        tenant=rules["globex"],
        route=rules["orders"],
        limit__rate=7321,
        limit__burst=7321,
    )
    return snapshot_publish(
        actor=SYSTEM, message="m", effective_at=timezone.now() + timedelta(days=15)
    )


def test_tenant_page__valid_link__own_limits_and_upcoming_changes(
    client, rules, upcoming
):
    # Given acme's private link
    path = tenant_link_issue(tenant=rules["acme"], actor=SYSTEM)
    # When the holder opens it, without logging in
    response = client.get(path)
    # Then it lists acme's limits per route on the active version and its upcoming change
    html = response.content.decode()
    assert response.status_code == 200
    assert response["X-Robots-Tag"] == "noindex, nofollow"
    assert "no-store" in response["Cache-Control"]
    assert "search" in html
    assert "per tenant: 50 / s, burst 100" in html  # pro search, in effect now
    assert "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40" in html
    assert "Version 2" in html
    # And nothing of another tenant
    assert "globex" not in html
    assert "7,321" not in html


def test_tenant_json__valid_link__limits_per_route_from_the_resolver(
    client, rules, upcoming
):
    # Given globex's link (globex has its own search policy and an upcoming override)
    path = tenant_link_issue(tenant=rules["globex"], actor=SYSTEM)
    # When its JSON is read
    data = client.get(path + "limits.json").json()
    # Then the limits are the ones the resolver picks for globex, per route
    limits = {row["route"]: row for row in data["limits"]}
    assert limits["search"]["limits"] == ["per tenant: 2,000 / s, burst 4,000"]
    assert limits["search"]["policy"] == "tenant globex · search"
    assert data["version"] == 1
    # And its own upcoming override shows, but not the pro lowering (its policy shields it)
    texts = [c["text"] for entry in data["upcoming"] for c in entry["changes"]]
    assert len(texts) == 1
    assert texts[0].startswith("new policy tenant globex · orders.read (override)")


def test_tenant_link__rotated__old_link_dead_new_link_works(client, rules, published):
    # Given acme's link, then a rotation
    old = tenant_link_issue(tenant=rules["acme"], actor=SYSTEM)
    new = tenant_link_issue(tenant=rules["acme"], actor=SYSTEM)
    # When both are opened / Then only the new one works
    assert old != new
    assert client.get(old).status_code == 404
    assert client.get(new).status_code == 200
    # And issuing and rotating are audited, without the token
    entries = AuditEntry.objects.filter(action=AuditAction.TOKEN_CREATE)
    assert [e.reason for e in entries.order_by("id")] == [
        "private changelog link issued",
        "private changelog link rotated",
    ]
    assert new.split("/")[-2] not in str(list(entries.values()))


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda token: token[:-2] + "xx", id="bad-signature"),
        pytest.param(lambda token: "not-a-token", id="garbage"),
        pytest.param(lambda token: token.replace(token[2], "Q", 1), id="altered-body"),
    ],
)
def test_tenant_link__wrong_token__404(client, rules, published, mangle):
    # Given a valid link / When its token is altered / Then the page does not exist
    path = tenant_link_issue(tenant=rules["acme"], actor=SYSTEM)
    token = path.rstrip("/").rsplit("/", 1)[1]
    assert client.get(f"/changelog/tenant/{mangle(token)}/").status_code == 404


def test_tenant_link__revoked__404_and_audited(client, rules, published):
    # Given acme's link / When it is revoked
    path = tenant_link_issue(tenant=rules["acme"], actor=SYSTEM)
    tenant_link_revoke(tenant=rules["acme"], actor=SYSTEM)
    # Then it no longer opens, and the revocation is audited
    assert client.get(path).status_code == 404
    assert AuditEntry.objects.filter(action=AuditAction.TOKEN_REVOKE).count() == 1


def test_tenant_link_issue__viewer__permission_denied(rules, viewer):
    # Given a viewer / When they try to issue a link / Then it is refused
    with pytest.raises(PermissionDenied):
        tenant_link_issue(tenant=rules["acme"], actor=Actor(user=viewer))
