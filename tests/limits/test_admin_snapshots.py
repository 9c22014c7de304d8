"""The admin's publishing pages, used as each role would, through the test client."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from limits.choices import Role
from limits.core.audit import Actor
from limits.core.roles import role_permissions
from limits.models import Limit, Route, Snapshot
from limits.publishing.services import snapshot_publish
from tests.recorded import record

# These tests are about publishing mechanics, not the notice period.
pytestmark = pytest.mark.usefixtures("no_notice_period", "no_approval_rule")

PUBLISH = reverse("admin:limits_snapshot_publish")
VERSIONS = reverse("admin:limits_snapshot_changelist")
DIFF = reverse("admin:limits_snapshot_diff")
EXPLAIN = reverse("admin:limits_snapshot_explain")


@pytest.fixture
def published(rules, publisher):
    return snapshot_publish(actor=publisher, message="First limits")


def _as(client, user):
    client.force_login(user)
    return client


@pytest.mark.parametrize("role", [Role.PRODUCT, Role.SUPPORT, Role.VIEWER])
def test_roles__publish_permission__product_only(db, role):
    # Given the groups the roles migration creates / Then only product may publish
    group = Group.objects.get(name=role.value)
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert ("publish_snapshot" in codenames) is (role == Role.PRODUCT)
    assert "view_snapshot" in codenames
    assert "publish_snapshot" not in role_permissions(Role.VIEWER, {"publish_snapshot"})


def test_publish_page__product__diff_in_words_then_publishes(
    client, product, published, rules
):
    # Given an unpublished lowering of pro search
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    client = _as(client, product)
    # When product opens the Publish page
    page = client.get(PUBLISH)
    # Then it shows the change in words, classified, with who it reaches
    html = page.content.decode()
    assert page.status_code == 200
    assert "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40" in html
    assert "lowered" in html
    assert "acme" in html
    # When publishing with a message / Then version 2 is active and its page says so
    response = client.post(PUBLISH, {"message": "Protect search", "effective_at": ""})
    row = Snapshot.objects.get(version=2)
    assert response.status_code == 302
    assert response.url == reverse("admin:limits_snapshot_change", args=[row.pk])
    detail = client.get(response.url).content.decode()
    assert "Protect search" in detail
    assert "active" in detail
    assert "Roll back to this version" not in detail  # it is the active one


def test_publish_page__lowering__shows_whom_it_would_limit(
    client, product, published, rules
):
    # Given acme searched 30 times a second for 20 s an hour ago, and an unpublished
    # lowering of pro search to 20/s
    record("acme", "search", timezone.now() - timedelta(hours=1), [30] * 20)
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    # When product opens the Publish page
    page = _as(client, product).get(PUBLISH)
    # Then acme's searches show with the rejections the lowering would have made
    (row,) = page.context["impact"].rows
    assert (row.tenant, row.seen) == ("acme", 600)
    assert 150 <= row.rejected_new <= 200
    assert f"<strong>{row.rejected_new}</strong>" in page.content.decode()


def test_publish_page__scheduled__publishes_for_later(
    client, product, published, rules
):
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    later = (timezone.now() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    _as(client, product).post(PUBLISH, {"message": "Later", "effective_at": later})
    row = Snapshot.objects.get(version=2)
    assert row.activated_at is None
    assert row.effective_at.strftime("%Y-%m-%dT%H:%M") == later
    listing = client.get(VERSIONS).content.decode()
    assert "scheduled" in listing


def test_publish_page__invalid_rules__problem_named_and_nothing_published(
    client, product, published, rules
):
    # Given a route whose cost no bucket of free can hold
    Route.objects.filter(slug="orders.read").update(cost=500)
    client = _as(client, product)
    # When product looks, then tries to publish
    page = client.get(PUBLISH).content.decode()
    response = client.post(PUBLISH, {"message": "Broken"})
    # Then the problem names the policy and why, on the page and on the refusal
    named = "policy tier free · all routes, limit 1, burst: burst 10 is below the request cost 500"
    assert named in page
    assert named in response.content.decode()
    assert Snapshot.objects.count() == 1


def test_publish_page__unchanged__refused_with_message(client, product, published):
    response = _as(client, product).post(PUBLISH, {"message": "Again"})
    assert (
        "Nothing to publish: the rules are the same as version 1"
        in response.content.decode()
    )


@pytest.mark.parametrize("role", ["viewer", "support"])
def test_publish_and_rollback__not_product__forbidden(client, request, published, role):
    client = _as(client, request.getfixturevalue(role))
    rollback = reverse("admin:limits_snapshot_rollback", args=[1])
    assert client.get(PUBLISH).status_code == 403
    assert client.post(PUBLISH, {"message": "x"}).status_code == 403
    assert client.post(rollback, {"message": "x"}).status_code == 403
    assert Snapshot.objects.count() == 1


def test_versions_diff_explain__viewer__can_read(client, viewer, published, rules):
    # Given two versions
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    snapshot_publish(actor=Actor.system(), message="v2")
    client = _as(client, viewer)
    # When the viewer reads the versions, a diff and an explanation
    listing = client.get(VERSIONS)
    detail = client.get(reverse("admin:limits_snapshot_change", args=[published.pk]))
    diff = client.get(DIFF, {"old": "1", "new": "2"})
    explained = client.get(
        EXPLAIN, {"source": "active", "tenant": "globex", "route": "search"}
    )
    content = client.get(reverse("admin:limits_snapshot_content", args=[1]))
    # Then every page answers, read-only
    assert [r.status_code for r in (listing, detail, diff, explained, content)] == [
        200
    ] * 5
    assert "Publish the working copy" not in listing.content.decode()
    assert "Roll back" not in detail.content.decode()
    assert "50 / s, burst 100 → 20 / s, burst 40" in diff.content.decode()
    html = explained.content.decode()
    assert "tenant globex · search" in html
    assert "More general policies it beat" in html
    assert "rl:{tenant:globex}" in html
    assert content["ETag"] == published.etag
    assert bytes(content.content) == bytes(published.content)


def test_rollback_page__product__confirms_then_rolls_back(
    client, product, published, rules
):
    # Given version 2 lowering pro search, and an unpublished edit
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    client = _as(client, product)
    client.post(PUBLISH, {"message": "v2"})
    Route.objects.filter(slug="orders.read").update(cost=3)
    url = reverse("admin:limits_snapshot_rollback", args=[1])
    # When product opens the rollback page
    page = client.get(url).content.decode()
    # Then it shows what changes for gateways and the edit that will be replaced
    assert "20 / s, burst 40 → 50 / s, burst 100" in page
    assert "route orders.read: cost 2 → 3" in page
    # When confirming / Then version 3 restores version 1
    response = client.post(url, {"message": "Search broke"})
    row = Snapshot.objects.get(version=3)
    assert response.status_code == 302
    assert (row.restored_version, row.rules_digest) == (1, published.rules_digest)


def test_admin__versions__not_editable_by_anyone(client, django_user_model, published):
    admin_user = django_user_model.objects.create_superuser("root", "r@x.test", "root")
    client = _as(client, admin_user)
    change = reverse("admin:limits_snapshot_change", args=[published.pk])
    response = client.post(change, {"message": "rewritten"})
    assert response.status_code == 403
    assert client.get(reverse("admin:limits_snapshot_add")).status_code == 403
    assert Snapshot.objects.get().message == "First limits"
