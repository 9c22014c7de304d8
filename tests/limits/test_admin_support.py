"""The admin pages support uses: the tenant's limits in force, the rejections list
filtered to the second, and explain answering for a rejection at a given time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.core.audit import Actor
from limits.models import ChangeRequest, Limit, Rejection
from limits.publishing.services import snapshot_publish

EXPLAIN = reverse("admin:limits_snapshot_explain")
REJECTIONS = reverse("admin:limits_rejection_changelist")


@pytest.fixture
def published(rules):
    return snapshot_publish(actor=Actor.system(), message="v1")


@pytest.fixture
def scheduled_lowering(published, rules, no_notice_period, no_approval_rule):
    Limit.objects.filter(policy__tier=rules["free"]).update(rate=3, burst=6)
    return snapshot_publish(
        actor=Actor.system(),
        message="lower free",
        effective_at=timezone.now() + timedelta(days=14),
    )


def _rejection(at, tenant="initech", route="search", limit="tenant-s"):
    return Rejection.objects.create(
        at=at,
        tenant=tenant,
        route=route,
        policy="tier:free/*",
        limit=limit,
        dimension="tenant",
        snapshot_version=1,
        gateway="gw-1",
    )


def test_tenant_support_page__scheduled_lowering__in_force_then_scheduled_with_date(
    client, support_user, rules, scheduled_lowering
):
    client.force_login(support_user)
    url = reverse("admin:limits_tenant_support", args=[rules["initech"].pk])
    html = client.get(url).content.decode()
    assert "Limits in force (version 1)" in html
    assert "5 requests per second per account, bursts of 10" in html
    when = scheduled_lowering.effective_at.strftime("%Y-%m-%d %H:%M")
    assert f"from <strong>{when} UTC</strong> (version 2)" in html
    assert "Raise x2 for 7 days" in html


def test_tenant_change_form__working_copy__says_it_is_not_enforced(
    client, support_user, rules, scheduled_lowering
):
    client.force_login(support_user)
    html = client.get(
        reverse("admin:limits_tenant_change", args=[rules["initech"].pk])
    ).content.decode()
    assert "not what gateways enforce" in html
    assert "they enforce version 1" in html


def test_tenant_raise__support_posts_reason__change_request_opened(
    client, support_user, rules, published
):
    client.force_login(support_user)
    url = reverse("admin:limits_tenant_raise", args=[rules["initech"].pk])
    response = client.post(url, {"route": "search", "reason": "launch week"})
    row = ChangeRequest.objects.get()
    assert response["Location"] == reverse(
        "admin:limits_changerequest_change", args=[row.pk]
    )
    assert row.edits.get().after["expires_at"] is not None


def test_tenant_raise__viewer__refused_nothing_opened(
    client, viewer_user, rules, published
):
    client.force_login(viewer_user)
    url = reverse("admin:limits_tenant_raise", args=[rules["initech"].pk])
    client.post(url, {"route": "search", "reason": "launch week"})
    assert not ChangeRequest.objects.exists()


def test_rejections__filtered_by_tenant_route_and_range__to_the_second(
    client, viewer_user, published
):
    # Given rejections one second apart, and one of another tenant
    t = published.effective_at.replace(microsecond=0) + timedelta(seconds=10)
    for seconds in (0, 1, 2):
        _rejection(t + timedelta(seconds=seconds))
    _rejection(t + timedelta(seconds=1), tenant="acme")
    client.force_login(viewer_user)
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    # When filtering initech's on search from t+1 to t+2, with empty boxes left over
    response = client.get(
        REJECTIONS,
        {
            "tenant": "initech",
            "route": "search",
            "since": (t + timedelta(seconds=1)).strftime(stamp),
            "until": (t + timedelta(seconds=2)).strftime(stamp),
            "limit": "",
        },
        follow=True,
    )
    # Then exactly those two rows, with times to the second and explain links
    rows = list(response.context["cl"].result_list)
    assert [r.at for r in rows] == [t + timedelta(seconds=2), t + timedelta(seconds=1)]
    html = response.content.decode()
    assert (t + timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S") in html
    assert (
        "at=" + (t + timedelta(seconds=1)).strftime("%Y-%m-%dT%H%%3A%M%%3A%SZ") in html
    )


def test_rejections__bad_time__said_on_the_list(client, viewer_user, published):
    client.force_login(viewer_user)
    response = client.get(REJECTIONS, {"since": "yesterday-ish"}, follow=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert "is not a time" in html
    assert "2026-12-03T14:03:07Z" in html


def test_explain__rejection_link__answers_why_at_that_second(
    client, viewer_user, rules, published
):
    at = published.effective_at + timedelta(seconds=3)
    client.force_login(viewer_user)
    html = client.get(
        EXPLAIN,
        {
            "tenant": "initech",
            "route": "search",
            "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "limit": "tenant-s",
        },
    ).content.decode()
    assert "Why initech got a 429 on search at" in html
    assert "<strong>version 1</strong>" in html
    assert "rejected it" in html
    assert '<datalist id="tenant-slugs">' in html


def test_explain__unknown_tenant__said_as_such(client, viewer_user, rules, published):
    client.force_login(viewer_user)
    html = client.get(EXPLAIN, {"tenant": "initec", "route": "search"}).content.decode()
    assert "Unknown tenant initec" in html


def test_policy_pages__working_copy__say_which_version_gateways_enforce(
    client, viewer_user, rules, published
):
    client.force_login(viewer_user)
    listing = client.get(reverse("admin:limits_policy_changelist")).content.decode()
    form = client.get(
        reverse("admin:limits_policy_change", args=[rules["pro_search"].pk])
    ).content.decode()
    for html in (listing, form):
        assert "working copy" in html
        assert "gateways enforce" in html
        assert "version 1</a>" in html


@pytest.mark.usefixtures("published", "no_notice_period", "no_approval_rule")
def test_support_pages__sliding_window__said_as_a_window_not_a_bucket(
    client, support_user, rules, redis_client
):
    # Given initech's free tier holds 50 in any minute per tenant
    Limit.objects.filter(policy__tier=rules["free"]).update(
        kind="sliding_window", burst=None, rate=50, period=60
    )
    version = snapshot_publish(actor=Actor.system(), message="windows")
    client.force_login(support_user)
    # When support opens the tenant's page and explains a 429
    page = client.get(
        reverse("admin:limits_tenant_support", args=[rules["initech"].pk])
    )
    at = version.effective_at + timedelta(seconds=3)
    why = client.get(
        EXPLAIN,
        {
            "tenant": "initech",
            "route": "search",
            "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    # Then the window's usage and verdict are a window's: no burst, no bucket
    html = page.content.decode()
    assert "50 requests in any minute per account" in html
    assert "50 of 50 left in the last minute (sliding window)" in html
    explained = why.content.decode()
    assert 'id="sliding-windows"' in explained
    assert "50 in any 60 s" in explained
    assert "a burst of" not in explained
