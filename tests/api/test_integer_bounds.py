"""Numbers beyond what the database holds (2^31 - 1 for its integer columns), in every
number field the API and the admin take: a field error before anything is stored,
never a 500 at save or publish (issue 25)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from limits.models import Limit, Route, Tier
from tests.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]

B = "/api/v1"
HUGE = [2**31, 2**63, -(2**31) - 1]


def _limit(**numbers):
    return {"dimension": "tenant", "rate": 5, "period": 1, "burst": 5, **numbers}


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (f"{B}/tiers", {"slug": "t", "name": "T", "position": "HUGE"}, "position"),
        (
            f"{B}/routes",
            {"slug": "r", "methods": ["GET"], "path_pattern": "/r", "cost": "HUGE"},
            "cost",
        ),
        *[
            (
                f"{B}/policies",
                {
                    "scope": "tier",
                    "tier": "pro",
                    "route": "search",
                    "limits": [_limit(**{member: "HUGE"})],
                },
                "limits",
            )
            for member in ("rate", "period", "burst", "cost", "shards", "lease")
        ],
    ],
)
def test_api__number_beyond_the_column__400_naming_it(
    rules, product_user, url, body, field, huge
):
    api = ApiClient(raise_request_exception=False).as_user(product_user)
    filled = _fill(body, huge)
    counts = (Tier.objects.count(), Route.objects.count(), Limit.objects.count())
    response = api.post(url, filled, format="json")
    assert response.status_code == 400, (filled, response.content)
    assert field in response.json().get("fields", {}), response.json()
    assert counts == (
        Tier.objects.count(),
        Route.objects.count(),
        Limit.objects.count(),
    )


@pytest.mark.parametrize("huge", HUGE)
def test_admin__number_beyond_the_column__form_error(client, rules, product_user, huge):
    client.raise_request_exception = False
    client.force_login(product_user)
    forms = {
        "admin:limits_tier_add": (
            {"slug": "t", "name": "T", "position": str(huge)},
            "position",
        ),
        "admin:limits_route_add": (
            {
                "slug": "r",
                "methods": "GET",
                "path_pattern": "/r",
                "cost": str(huge),
                "failure_mode": "open",
            },
            "cost",
        ),
    }
    for name, (form, field) in forms.items():
        response = client.post(reverse(name), form)
        assert response.status_code == 200, (name, response.status_code)
        assert field in response.context["adminform"].form.errors, name


def _fill(value, huge):
    if value == "HUGE":
        return huge
    if isinstance(value, dict):
        return {k: _fill(v, huge) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, huge) for v in value]
    return value
