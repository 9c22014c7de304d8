"""GET /api/v1/tenants/{slug}/usage: a tenant's calendar quotas this period; and the
tenant's opt-in to quota reminders, read and written like its other fields."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from limits.models import AuditEntry
from limits.versions.explain import explain
from sluice.model import CalendarQuota
from tests.api.conftest import ApiClient
from tests.limits.quotas.quota_fixtures import (
    charge,
    publish_quota,
    redis_stopped,  # noqa: F401  (fixture)
)


@pytest.fixture
def monthly(rules):
    """initech (free tier) has 1,000 requests per calendar month, UTC."""
    return publish_quota(limit=1000)


def _key() -> str:
    (key,) = [
        k.key
        for k in explain(tenant="initech", route="search").keys
        if isinstance(k.limit, CalendarQuota)
    ]
    return key


@pytest.mark.parametrize("user", ["support_user", "viewer_user", "product_user"])
def test_tenant_usage__any_role__quota_used_remaining_and_period(
    monthly, redis_client, request, user
):
    # Given initech's quota charged 420 this month
    start = charge(redis_client, _key(), 420)
    # When a person of any role reads its usage
    api = ApiClient().as_user(request.getfixturevalue(user))
    response = api.get("/api/v1/tenants/initech/usage")
    # Then the quota says what is used, what is left, and when it resets
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["tenant"], body["version"]) == ("initech", monthly.version)
    (quota,) = body["quotas"]
    assert (quota["limit"], quota["used"], quota["remaining"]) == (1000, 420, 580)
    assert quota["percent"] == 42.0
    assert quota["words"] == "1,000 requests per month per account"
    assert datetime.fromisoformat(quota["period_start"]) == datetime.fromtimestamp(
        start, UTC
    )
    assert datetime.fromisoformat(quota["period_end"]) > datetime.now(UTC)


def test_tenant_usage__no_quota__empty_list(monthly, redis_client, support_user):
    response = ApiClient().as_user(support_user).get("/api/v1/tenants/acme/usage")
    assert response.status_code == 200
    assert response.json()["quotas"] == []


def test_tenant_usage__unknown_tenant__404_problem(monthly, support_user):
    response = ApiClient().as_user(support_user).get("/api/v1/tenants/nobody/usage")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"


def test_tenant_usage__anonymous__refused(monthly):
    response = ApiClient().get("/api/v1/tenants/initech/usage")
    assert response.status_code in (401, 403)
    assert response["Content-Type"] == "application/problem+json"


@pytest.mark.usefixtures("redis_stopped")
def test_tenant_usage__redis_stopped__503_problem_never_a_zero(monthly, support_user):
    # Given the Redis gateways charge is down / When support reads initech's usage
    response = ApiClient().as_user(support_user).get("/api/v1/tenants/initech/usage")
    # Then a problem document says usage is unavailable, and when to retry
    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["error"] == "redis_unavailable"
    assert "usage unknown" in response.json()["detail"]
    assert int(response["Retry-After"]) > 0


def test_tenant_quota_reminders__product_opts_in__saved_audited_and_shown(
    rules, product_user
):
    # Given initech, without reminders
    api = ApiClient().as_user(product_user)
    assert api.get("/api/v1/tenants/initech").json()["quota_reminders"] is False
    # When product turns them on
    response = api.patch(
        "/api/v1/tenants/initech", {"quota_reminders": True}, format="json"
    )
    # Then the tenant has them, and the change is audited
    assert response.status_code == 200, response.content
    assert response.json()["quota_reminders"] is True
    rules["initech"].refresh_from_db()
    assert rules["initech"].quota_reminders is True
    entry = AuditEntry.objects.filter(object_type="tenant").latest("id")
    assert entry.after["quota_reminders"] is True


def test_tenant_quota_reminders__not_a_boolean__400_naming_the_field(
    rules, product_user
):
    response = (
        ApiClient()
        .as_user(product_user)
        .patch("/api/v1/tenants/initech", {"quota_reminders": "often"}, format="json")
    )
    assert response.status_code == 400
    assert "quota_reminders" in response.json()["fields"]
