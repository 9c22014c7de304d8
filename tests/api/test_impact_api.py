"""The impact estimate over HTTP: a change request's, the working copy's, a scheduled version's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import Dimension, LimitKind
from limits.core.audit import Actor
from limits.models import Limit, Policy
from limits.publishing.services import snapshot_publish
from tests.recorded import record

pytestmark = pytest.mark.django_db

B = "/api/v1"


@pytest.fixture
def active(rules, redis_client):
    """Version 1 of the suite's rules; acme (pro) searched 30 a second for 20 s an hour ago."""
    row = snapshot_publish(actor=Actor.system(), message="v1")
    record("acme", "search", timezone.now() - timedelta(hours=1), [30] * 20)
    return row


def _lowering(rate: int = 10, burst: int = 10) -> dict:
    return {
        "scope": "tier:pro",
        "route": "search",
        "limits": [
            {"dimension": "tenant", "rate": rate, "period": "second", "burst": burst}
        ],
    }


def test_change_request_impact__lowering__acme_would_be_limited(
    api, active, product_user, viewer_user
):
    # Given a request lowering pro's search from 50/s to 10/s
    api.as_user(product_user)
    opened = api.post(
        f"{B}/change-requests",
        {"edits": [{"object": "policy", "value": _lowering()}]},
        format="json",
    )
    assert opened.status_code == 201, opened.content
    # When a viewer asks for its impact
    api.as_user(viewer_user)
    response = api.get(f"{B}/change-requests/{opened.json()['id']}/impact")
    # Then acme's searches show, about 20 of each second's 30 rejected
    assert response.status_code == 200
    body = response.json()
    (row,) = body["rows"]
    assert (row["tenant"], row["route"], row["requests"]) == ("acme", "search", 600)
    assert 380 <= row["rejected_new"] <= 400
    assert body["rejected_new"] == row["rejected_new"]
    assert body["caveats"]


def test_working_copy_impact__raised_limit__nobody_rejected(api, active, product_user):
    # Given the working copy raises pro's search to 100/s
    limit = Limit.objects.get(policy__tier__slug="pro", policy__route__slug="search")
    limit.rate, limit.burst = 100, 200
    limit.save()
    api.as_user(product_user)
    # When its impact is asked
    response = api.get(f"{B}/working-copy/impact")
    # Then acme's traffic is seen and nothing of it would be rejected
    assert response.status_code == 200
    (row,) = response.json()["rows"]
    assert (row["tenant"], row["requests"], row["rejected_new"]) == ("acme", 600, 0)


def test_snapshot_impact__scheduled_lowering__estimated(
    api, active, product_user, no_notice_period
):
    # Given a lowering published to take effect tomorrow
    limit = Limit.objects.get(policy__tier__slug="pro", policy__route__slug="search")
    limit.rate, limit.burst = 10, 10
    limit.save()
    later = timezone.now() + timedelta(days=1)
    scheduled = snapshot_publish(
        actor=Actor.system(), message="lower", effective_at=later
    )
    api.as_user(product_user)
    # When its impact is asked, and that of the active version
    response = api.get(f"{B}/snapshots/{scheduled.version}/impact")
    not_scheduled = api.get(f"{B}/snapshots/{active.version}/impact")
    # Then the scheduled one has acme's figures; the active one is not scheduled
    assert response.status_code == 200
    assert response.json()["rows"][0]["rejected_new"] > 300
    assert not_scheduled.status_code == 404


def test_working_copy_impact__daily_quota_added__the_requests_over_it_counted(
    api, active, product_user
):
    # Given the working copy adds a daily quota of 500 to pro's search, whose bucket
    # (50/s) admits acme's 600 searches of an hour ago
    policy = Policy.objects.get(tier__slug="pro", route__slug="search")
    Limit.objects.create(
        policy=policy,
        kind=LimitKind.CALENDAR_QUOTA,
        dimension=Dimension.TENANT,
        rate=500,
        period=None,
        burst=None,
        quota_per="day",
        quota_cycle="calendar",
    )
    api.as_user(product_user)
    # When its impact is asked
    response = api.get(f"{B}/working-copy/impact")
    # Then the 100 past the 500th are rejected, and the row says it was counted
    assert response.status_code == 200
    (row,) = response.json()["rows"]
    assert row["rejected_new"] == 100
    (quota,) = row["quotas"]
    assert (quota["per"], quota["method"], quota["over"]) == ("day", "recorded", 100)
    assert row["quotas_left_out"] is False
