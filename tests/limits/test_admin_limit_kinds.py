"""The policy form's limits by kind: each kind's settings in its words, the others
hidden, and a save that ignores what a hidden field still holds."""

import re

import pytest
from django.urls import reverse

from limits.admin.limit_form import KINDS
from limits.choices import LimitKind, ScopeKind
from limits.models import ChangeRequest
from tests.factories import PolicyFactory, TierFactory
from tests.limits.test_admin import _policy_form

pytestmark = pytest.mark.django_db

ADD = "admin:limits_policy_add"


def _box(page: str, name: str) -> str:
    """The input of ``limits-0-<name>`` and its label, as rendered."""
    field = re.search(rf'<(input|select)[^>]*name="limits-0-{name}"[^>]*>', page)
    label = re.search(
        rf'<label[^>]*for="id_limits-0-{name}"[^>]*>([^<]*)</label>', page
    )
    assert field, name
    assert label, name
    return f"{label.group(1)} {field.group(0)}"


def _shown(page: str, name: str) -> bool:
    return "data-sluice-other-kind" not in _box(page, name)


def _sent_back(client, limit: dict, **fields) -> str:
    """The form as the server renders it again after a save with ``limit`` failed."""
    tier = TierFactory(slug="free")
    form = _policy_form(ScopeKind.TIER, [limit], tier=tier.pk, **fields)
    response = client.post(reverse(ADD), form)
    assert response.status_code == 200
    return response.content.decode()


def test_limit_form__new_limit__bucket_settings_shown_others_hidden(
    client, product_user
):
    # Given a product person / When they open a new policy
    client.force_login(product_user)
    page = client.get(reverse(ADD)).content.decode()
    # Then the first limit is a bucket: rate, period and burst, nothing of the others
    assert all(_shown(page, name) for name in ("rate", "period", "burst"))
    assert not _shown(page, "max_inflight")
    assert "Per:" in _box(page, "period")
    # And the expert settings are folded, with the script that follows the kind
    assert re.search(r"<details><summary>\s*<h4[^>]*>Expert settings", page)
    assert "limits/limit_kinds.js" in page


def test_limit_form__sliding_window_sent_back__window_words_no_burst(
    client, product_user
):
    # Given a sliding window sent without its limit
    client.force_login(product_user)
    page = _sent_back(client, {"kind": "sliding_window", "period": "60", "rate": ""})
    # Then the error names the field, in the window's words, and the burst is hidden
    assert "Limit:" in _box(page, "rate")
    assert "Window:" in _box(page, "period")
    assert not _shown(page, "burst")
    assert "A sliding window needs this." in page


def test_limit_form__bucket_turned_window_with_stale_burst__saved_without_it(
    client, product_user
):
    # Given a bucket whose kind is changed to a sliding window, its burst still in
    # the (hidden) field, and a mistyped hot-key setting hidden with it
    client.force_login(product_user)
    tier = TierFactory(slug="free")
    limit = {
        "kind": "sliding_window",
        "dimension": "user",
        "rate": "100",
        "period": "60",
        "burst": "200",
        "shards": "x",
    }
    form = _policy_form(ScopeKind.TIER, [limit], tier=tier.pk)
    # When the form is saved
    response = client.post(reverse(ADD), form)
    # Then the window is proposed, without a burst or shards
    assert response.status_code == 302, response.content.decode()[:3000]
    (edit,) = ChangeRequest.objects.get(author=product_user).edits.all()
    (saved,) = edit.after["limits"]
    assert saved == {
        "kind": "sliding_window",
        "dimension": "user",
        "limit": 100,
        "window": "minute",
        "cost": None,
        "shadow": False,
    }


def test_limit_form__concurrent_without_max_inflight__field_named(client, product_user):
    # Given a concurrent limit sent from the bucket's fields (no script to switch them)
    client.force_login(product_user)
    page = _sent_back(client, {"kind": "concurrent", "rate": "5", "burst": "10"})
    # Then the form says which field it needs, now shown, and hides the bucket's
    assert "A concurrent limit needs a max in flight." in page
    assert _shown(page, "max_inflight")
    assert not _shown(page, "rate")
    assert not _shown(page, "burst")


def test_limit_form__existing_window__shown_in_its_words(client, product_user):
    # Given a tier policy with a sliding window
    client.force_login(product_user)
    policy = PolicyFactory(tier=TierFactory(slug="pro"), limit=None)
    policy.limits.create(kind="sliding_window", dimension="user", rate=100, period=60)
    # When its page is opened
    url = reverse("admin:limits_policy_change", args=[policy.pk])
    page = client.get(url).content.decode()
    # Then the limit shows the window's settings and reads as one
    assert "Limit:" in _box(page, "rate")
    assert not _shown(page, "burst")
    assert "100 requests per minute, sliding window" in page


def test_limit_form__every_kind__has_its_settings_in_the_mapping():
    # Given the kinds a limit can have / Then the form knows what each one shows
    assert set(KINDS) == set(LimitKind.values)


def test_limit_form__viewer__each_limit_read_in_its_kinds_words(client, viewer_user):
    # Given a tier policy with a sliding window
    policy = PolicyFactory(tier=TierFactory(slug="pro"), limit=None)
    policy.limits.create(kind="sliding_window", dimension="user", rate=100, period=60)
    # When a viewer opens it
    client.force_login(viewer_user)
    url = reverse("admin:limits_policy_change", args=[policy.pk])
    page = client.get(url).content.decode()
    # Then the limit reads as a window, with none of a bucket's settings beside it
    assert "per user: 100 requests per minute, sliding window" in page
    assert "field-burst" not in page
    assert "field-max_inflight" not in page
