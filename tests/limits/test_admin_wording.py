"""The words of the version pages and the changelog, as people read them."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from limits.core.audit import Actor
from limits.models import Limit
from limits.publishing.services import snapshot_publish
from tests.factories import TierFactory

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("test")


def _text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_version_page__new_tier_and_default_policy__said_once_without_dangling_separators(
    client, rules, viewer_user
):
    TierFactory(slug="enterprise", name="Enterprise")
    first = snapshot_publish(actor=SYSTEM, message="First")
    client.force_login(viewer_user)
    text = _text(client.get(reverse("admin:limits_snapshot_change", args=[first.pk])))
    # the badge says "new", then the words, without saying it twice
    assert "new tier enterprise (Enterprise)" in text
    assert "new new" not in text
    assert not re.search(r"reaches:\s*;", text)
    assert "reaches: anonymous traffic" in text or "; anonymous traffic" in text


def test_versions_list__long_note__cut_at_a_word_with_an_ellipsis(
    client, rules, viewer_user, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    snapshot_publish(actor=SYSTEM, message="First")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=60, burst=120)
    note = "Pro search is raised for everyone on the pro tier from today onwards, enjoy"
    snapshot_publish(actor=SYSTEM, message="Raise pro search", note=note)
    client.force_login(viewer_user)
    text = _text(client.get(reverse("admin:limits_snapshot_changelist")))
    assert "Pro search is raised for everyone on the pro tier from… " in text


def test_changelog__says_which_version_is_in_effect_now(client, rules, settings):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    first = snapshot_publish(actor=SYSTEM, message="First")
    text = _text(client.get("/changelog/"))
    assert f"In effect now: version {first.version}" in text
    assert "in effect now" in text  # the entry's badge
