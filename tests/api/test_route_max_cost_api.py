"""A route's ``max_cost`` over the API: written, read back, and refused by field."""

from __future__ import annotations

import pytest

from limits.models import Route

pytestmark = pytest.mark.django_db

SEARCH = {"slug": "reports", "methods": ["POST"], "path_pattern": "/v1/reports"}


def test_create__route_with_max_cost__201_and_read_back(api, product_user):
    # Given a product person
    api.as_user(product_user)
    # When a route that takes declared costs up to 20 is created
    response = api.post(
        "/api/v1/routes", {**SEARCH, "cost": 5, "max_cost": 20}, format="json"
    )
    # Then it is stored and answered with it
    assert response.status_code == 201, response.content
    assert response.json()["max_cost"] == 20
    assert api.get("/api/v1/routes/reports").json()["max_cost"] == 20


def test_create__max_cost_above_a_burst__400_naming_the_policy(api, product_user):
    # Given the default policy for all routes, 20 deep per IP
    api.as_user(product_user)
    # When a route would take declared costs up to 50
    response = api.post("/api/v1/routes", {**SEARCH, "max_cost": 50}, format="json")
    # Then the field is refused, naming the policy that could never admit such a request
    assert response.status_code == 400, response.content
    assert "default · all routes" in str(response.json()["fields"]["max_cost"])


def test_create__route_without_max_cost__null(api, product_user):
    api.as_user(product_user)
    response = api.post("/api/v1/routes", SEARCH, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["max_cost"] is None


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"cost": 5, "max_cost": 4}, "below the route's cost"),
        ({"max_cost": 0}, "greater than or equal to 1"),
        ({"max_cost": "lots"}, "valid integer"),
    ],
    ids=["below cost", "zero", "not a number"],
)
def test_create__bad_max_cost__400_naming_it(api, product_user, body, words):
    api.as_user(product_user)
    response = api.post("/api/v1/routes", {**SEARCH, **body}, format="json")
    assert response.status_code == 400, response.content
    assert words in str(response.json()["fields"]["max_cost"])
    assert not Route.objects.exists()
