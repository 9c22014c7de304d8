"""Support's reads of a tenant whose policy holds a calendar quota: the quota said in
words, its usage and "what would have admitted it" left out rather than read as a
bucket's, and the one-click raise doubling the quota's limit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from limits.core.audit import Actor
from limits.models import ChangeRequest, DecisionPeak, Limit
from limits.publishing.services import snapshot_publish
from limits.support.raises import override_raise
from limits.support.rejections import rejection_explain
from limits.support.tenants import tenant_limits

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("no_notice_period", "no_approval_rule"),
]


@pytest.fixture
def quota_published(rules, publisher):
    """initech's free tier holds 5 a day per tenant (a calendar quota), all routes."""
    Limit.objects.filter(policy__tier=rules["free"]).update(
        kind="calendar_quota",
        burst=None,
        period=None,
        quota_per="day",
        quota_cycle="calendar",
    )
    return snapshot_publish(actor=publisher, message="quotas")


def test_support_pages__calendar_quota__words_kept_usage_and_verdicts_left_out(
    quota_published, rules, redis_client
):
    # Given traffic recorded before a 429
    at = quota_published.effective_at.replace(second=30) + timedelta(minutes=1)
    seconds = [0] * 60
    seconds[29] = seconds[30] = 10
    DecisionPeak.objects.create(
        minute=at.replace(second=0, microsecond=0),
        tenant="initech",
        route="search",
        count=20,
        peak=10,
        seconds=seconds,
    )
    # When support reads the tenant's page and explains the rejection
    shown = tenant_limits(tenant=rules["initech"])
    why = rejection_explain(tenant="initech", route="search", at=at)
    # Then the quota is said in words; its usage and verdict are not a bucket's guess
    search = next(row for row in shown.routes if row.route == "search")
    assert search.words == ["5 requests per day per account"]
    assert search.usage == []
    assert why.verdicts == []


def test_override_raise__calendar_quota__its_limit_doubled_still_a_quota(
    quota_published, rules, support
):
    row = override_raise(
        tenant=rules["initech"],
        route="search",
        reason="launch week",
        actor=Actor(user=support),
    )
    (edit,) = ChangeRequest.objects.get(pk=row.pk).edits.all()
    (limit,) = edit.after["limits"]
    assert (limit["kind"], limit["limit"], limit["per"]) == (
        "calendar_quota",
        10,
        "day",
    )
    assert "burst" not in limit
