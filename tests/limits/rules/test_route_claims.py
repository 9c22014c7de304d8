"""One method and path belong to one route: refused on save (service, API, admin), and a
working copy that has such routes anyway shows the problem instead of a 500."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from limits.core.audit import Actor
from limits.models import Route
from limits.rules.services import rule_save
from tests.api.conftest import ApiClient
from tests.factories import legacy_route

pytestmark = pytest.mark.usefixtures("no_notice_period", "no_approval_rule")

B = "/api/v1"


@pytest.fixture
def api():
    return ApiClient()


def test_rule_save__route_with_another_routes_method_and_path__path_pattern_error(
    rules,
):
    # Given "search" answers GET /v1/search / When another route claims GET on it too
    copy = Route(slug="search-copy", methods=["GET", "POST"], path_pattern="/v1/search")
    with pytest.raises(ValidationError) as refused:
        rule_save(obj=copy, actor=Actor.system())
    # Then the path pattern names both routes, and nothing is saved
    message = refused.value.message_dict["path_pattern"][0]
    assert "'search'" in message
    assert "'search-copy'" in message
    assert not Route.objects.filter(slug="search-copy").exists()


def test_rule_save__same_path__other_method_accepted_renamed_parameter_refused(rules):
    rule_save(
        obj=Route(slug="search-post", methods=["POST"], path_pattern="/v1/search"),
        actor=Actor.system(),
    )
    with pytest.raises(ValidationError):  # {order} and {id} are one segment to match
        rule_save(
            obj=Route(
                slug="orders.x", methods=["GET"], path_pattern="/v1/orders/{order}"
            ),
            actor=Actor.system(),
        )


def test_api_route_create__duplicate_method_and_path__400_on_path_pattern(
    api, product_user, rules
):
    body = {"slug": "search-2", "methods": ["get"], "path_pattern": "/v1/search"}
    response = api.as_user(product_user).post(f"{B}/routes", body, format="json")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["path_pattern"]


def test_admin_route_add__duplicate_method_and_path__field_error(
    client, product_user, rules
):
    client.force_login(product_user)
    form = {
        "slug": "search-2",
        "description": "",
        "methods": "GET",
        "path_pattern": "/v1/search",
        "cost": "1",
        "failure_mode": "open",
    }
    response = client.post(reverse("admin:limits_route_add"), form)
    assert response.status_code == 200  # the form again, with its error
    assert (
        "claimed by both"
        in response.context["adminform"].form.errors["path_pattern"][0]
    )


@pytest.fixture
def claimed_twice(rules):
    """A working copy stored before duplicates were refused: two routes on GET /v1/search
    (the claims migration gave the first one the claim, the copy none)."""
    legacy_route(slug="search-copy", methods=["GET"], path_pattern="/v1/search")


@pytest.mark.parametrize(
    "url",
    [
        f"{B}/snapshots/diff?old=active&new=working",
        f"{B}/explain?tenant=acme&route=search&source=working",
    ],
)
def test_api__working_copy_with_routes_claiming_one_path__400_naming_them(
    api, product_user, claimed_twice, url
):
    response = api.as_user(product_user).get(url)
    assert response.status_code == 400, response.content
    assert "claimed by both" in str(response.json()["fields"])


@pytest.mark.parametrize(
    "page",
    [
        reverse("admin:limits_snapshot_publish"),
        reverse("admin:limits_snapshot_diff") + "?old=active&new=working",
        reverse("admin:limits_snapshot_explain")
        + "?tenant=acme&route=search&source=working",
    ],
)
def test_admin__working_copy_with_routes_claiming_one_path__page_names_them(
    client, product_user, claimed_twice, page
):
    client.force_login(product_user)
    response = client.get(page)
    assert response.status_code == 200
    assert "claimed by both" in response.content.decode()


def test_admin_tenant_page__working_copy_with_claimed_path__says_so(
    client, product_user, claimed_twice, rules
):
    client.force_login(product_user)
    page = client.get(reverse("admin:limits_tenant_change", args=[rules["acme"].pk]))
    assert page.status_code == 200
    assert "claimed by both" in page.content.decode()
