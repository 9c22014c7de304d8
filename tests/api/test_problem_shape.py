"""Every error under /api/ is one RFC 9457 problem document, whoever answered it (DRF,
the input guard, Django's URL resolver or its handlers); the admin keeps its pages."""

import pytest

pytestmark = pytest.mark.django_db

B = "/api/v1"
MEMBERS = {"type", "title", "status", "detail", "error"}


def _problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert set(body) >= MEMBERS
    assert (body["type"], body["status"]) == ("about:blank", status)
    return body


@pytest.mark.parametrize(
    "path",
    [
        f"{B}/nothing-here",
        f"{B}/tiers/%C2%84",
        f"{B}/snapshots/abc/rollback",
        f"{B}/snapshots/99999999999999999999",
        f"{B}/limits/123456789012345678901234",
        "/api/v2/tiers",
    ],
)
def test_api__unknown_path_or_bad_path_parameter__404_problem(api, viewer_user, path):
    response = api.as_user(viewer_user).get(path)
    assert _problem(response, 404)["error"] == "not_found"


def test_api__validation_error__problem_with_fields(api, product_user, rules):
    response = api.as_user(product_user).post(
        f"{B}/tiers", {"slug": "Not A Slug"}, format="json"
    )
    body = _problem(response, 400)
    assert body["error"] == "invalid"
    assert set(body["fields"]) == {"slug", "name"}


def test_api__method_not_allowed__405_problem_with_allow(api, product_user):
    response = api.as_user(product_user).delete(f"{B}/snapshots")
    assert _problem(response, 405)["error"] == "method_not_allowed"
    assert "GET" in response["Allow"]


def test_api__url_too_long__414_problem(api, viewer_user):
    response = api.as_user(viewer_user).get(f"{B}/tiers?search={'x' * 5000}")
    assert _problem(response, 414)["error"] == "url_too_long"


def test_api__no_credentials__401_problem(api):
    assert _problem(api.get(f"{B}/tiers"), 401)["error"] == "not_authenticated"


def test_api__bad_host__400_problem_before_any_view(api):
    # Django refuses the Host before DRF runs (its handler400)
    response = api.get(f"{B}/tiers", HTTP_HOST="evil.example")
    assert _problem(response, 400)["error"] == "bad_request"


def test_api__body_not_json__415_problem(api, product_user):
    response = api.as_user(product_user).generic(
        "POST", f"{B}/tiers", "slug=x", "application/x-www-form-urlencoded"
    )
    assert _problem(response, 415)["error"] == "unsupported_media_type"


def test_api__malformed_json__400_problem(api, product_user):
    response = api.as_user(product_user).generic(
        "POST", f"{B}/tiers", "{", "application/json"
    )
    assert _problem(response, 400)["error"] == "parse_error"


def test_admin__unknown_page__html_404(client, product_user):
    client.force_login(product_user)
    response = client.get("/admin/limits/nothing-here/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_schema__error_responses__documented_as_problem_json(api, viewer_user):
    schema = api.as_user(viewer_user).get("/api/schema/?format=json").json()
    responses = schema["paths"]["/api/v1/tiers/{slug}"]["patch"]["responses"]
    for status in ("400", "401", "403", "404", "412", "413", "414"):
        content = responses[status]["content"]
        assert list(content) == ["application/problem+json"], status
    problem = schema["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == MEMBERS
