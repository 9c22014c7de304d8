"""Input no view can answer sensibly is a 4xx in the API's error shape, never a 500 or
silently ignored: numbers out of range, deep or huge bodies, NUL bytes, unknown
or contradictory fields, versions a gateway cannot run."""

import json

import pytest
from django.urls import reverse

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import AuditEntry, GatewayToken, Limit, Policy, Route, Tier
from limits.publishing.services import snapshot_publish

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]

B = "/api/v1"
LISTS = ["tiers", "tenants", "policies", "limits", "audit", "snapshots", "deliveries"]


def _problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status
    return body


@pytest.mark.parametrize("endpoint", LISTS)
@pytest.mark.parametrize(
    "query",
    [
        "limit=279924996891467579392",
        "limit=abc",
        "limit=-1",
        "limit=0",
        "limit=1001",
        "offset=279924996891467579392",
        "offset=-5",
    ],
)
def test_list__pagination_out_of_range_or_not_a_number__400_naming_it(
    api, viewer_user, rules, endpoint, query
):
    # Given a viewer / When a list is asked for a page it cannot have
    response = api.as_user(viewer_user).get(f"{B}/{endpoint}?{query}")
    # Then the answer is a 400 naming the parameter, not a 500 nor the default page
    body = _problem(response, 400)
    assert list(body["fields"]) == [query.split("=")[0]]


def test_list__pagination_in_range__that_page(api, viewer_user, rules):
    response = api.as_user(viewer_user).get(f"{B}/tiers?limit=1&offset=1")
    assert response.status_code == 200
    assert response.json()["count"] == 2
    assert [tier["slug"] for tier in response.json()["results"]] == ["pro"]


def test_write__json_nested_5000_deep__400(api, product_user, rules):
    # When a body nests lists 5000 deep (a RecursionError in Python's json)
    response = api.as_user(product_user).generic(
        "POST", f"{B}/tiers", "[" * 5000 + "]" * 5000, "application/json"
    )
    # Then it is refused as malformed
    assert "nested deeper" in _problem(response, 400)["detail"]


def test_write__body_20_mb__413_problem(api, product_user, rules):
    body = json.dumps({"slug": "big", "name": "x" * (20 * 1024 * 1024)})
    response = api.as_user(product_user).generic(
        "POST", f"{B}/tiers", body, "application/json"
    )
    assert _problem(response, 413)["error"] == "body_too_large"


def test_write__nul_in_a_json_string__400_nothing_saved(api, product_user, rules):
    response = api.as_user(product_user).post(
        f"{B}/tiers", {"slug": "nul", "name": "a\x00b"}, format="json"
    )
    assert "NUL" in _problem(response, 400)["detail"]
    assert not Tier.objects.filter(slug="nul").exists()


@pytest.mark.parametrize(
    "url",
    [
        "/admin/limits/decisionminute/?tenant=%00",
        "/admin/limits/tenant/%00/change/",
        f"{B}/tiers?search=%00",
        f"{B}/tiers/a%00b",
    ],
)
def test_url__nul_byte__400(client, product_user, rules, url):
    # Given a signed-in person / When a URL carries a NUL byte (Postgres refuses it)
    client.force_login(product_user)
    response = client.get(url)
    # Then it is a 400: a problem document under /api/, a page elsewhere
    assert response.status_code == 400
    is_api = url.startswith("/api/")
    assert response["Content-Type"].startswith(
        "application/problem+json" if is_api else "text/html"
    )


def test_patch__unknown_field__400_naming_it_nothing_changed(api, product_user, rules):
    # Given a limit at revision 1
    limit = Limit.objects.filter(policy=rules["pro_search"]).get()
    entries = AuditEntry.objects.count()
    # When a PATCH misspells rate
    response = api.as_user(product_user).patch(
        f"{B}/limits/{limit.pk}", {"rtae": 7}, format="json"
    )
    # Then it is refused naming the member, and nothing is written or audited
    assert _problem(response, 400)["fields"] == {"rtae": ["Unknown field."]}
    limit.refresh_from_db()
    assert (limit.revision, limit.rate) == (1, 50)
    assert AuditEntry.objects.count() == entries


def test_put__read_only_members_sent_back__accepted(api, product_user, rules):
    # Given a tier read with GET / When it is sent back whole with a new name
    tier = api.as_user(product_user).get(f"{B}/tiers/pro").json()
    response = api.put(f"{B}/tiers/pro", {**tier, "name": "Pro plus"}, format="json")
    # Then read-only members (id, revision, times) are no reason to refuse it
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "Pro plus"


def test_policy_create__tier_scope_with_a_tenant__400_naming_tenant(
    api, product_user, rules
):
    body = {
        "scope": "tier",
        "tier": "free",
        "tenant": "acme",
        "route": "search",
        "limits": [{"dimension": "tenant", "rate": 1, "period": 1, "burst": 5}],
    }
    response = api.as_user(product_user).post(f"{B}/policies", body, format="json")
    assert list(_problem(response, 400)["fields"]) == ["tenant"]
    assert not Policy.objects.filter(tier=rules["free"], route=rules["search"]).exists()


@pytest.fixture
def polled(rules, redis_client, django_capture_on_commit_callbacks):
    """Version 1 published, and a gateway token."""
    with django_capture_on_commit_callbacks(execute=True):
        snapshot_publish(actor=Actor.system(), message="first")
    return token_create(token=GatewayToken(name="gw"), actor=Actor.system())


@pytest.mark.parametrize("applied", ["1" * 30, "2", "0", "-1", "1e3"])
def test_snapshot_poll__applied_version_not_published__400_fleet_not_in_sync(
    client, polled, viewer_user, applied
):
    # Given version 1 is the latest / When a gateway says it runs another one
    response = client.get(
        f"{B}/snapshot",
        HTTP_AUTHORIZATION=f"Bearer {polled}",
        HTTP_SLUICE_GATEWAY_ID="gw-1",
        HTTP_SLUICE_APPLIED_VERSION=applied,
    )
    # Then the poll is refused naming the header, and the fleet never shows it in sync
    assert list(_problem(response, 400)["fields"]) == ["Sluice-Applied-Version"]
    client.force_login(viewer_user)
    assert client.get(f"{B}/fleet").json()["gateways"] == []


def test_snapshot_poll__applied_version_published__200(client, polled):
    response = client.get(
        f"{B}/snapshot",
        HTTP_AUTHORIZATION=f"Bearer {polled}",
        HTTP_SLUICE_GATEWAY_ID="gw-1",
        HTTP_SLUICE_APPLIED_VERSION="1",
    )
    assert response.status_code == 200


def test_admin_dashboard__plain_query__still_answers(client, product_user, rules):
    client.force_login(product_user)
    response = client.get(reverse("admin:limits_decisionminute_changelist"))
    assert response.status_code == 200


@pytest.mark.parametrize(
    "query", ["policies?all_routes=0.5", "limits?shadow=maybe", "policies?override=2"]
)
def test_list__boolean_filter_neither_true_nor_false__400_naming_it(
    api, viewer_user, rules, query
):
    response = api.as_user(viewer_user).get(f"{B}/{query}")
    assert list(_problem(response, 400)["fields"]) == [
        query.split("?")[1].split("=")[0]
    ]


def test_list__boolean_filter_true__filters(api, viewer_user, rules):
    response = api.as_user(viewer_user).get(f"{B}/policies?all_routes=true")
    assert response.status_code == 200
    assert {p["route"] for p in response.json()["results"]} == {None}


@pytest.mark.parametrize("method", ["%d", "%(x)s", "GE T", "%"])
def test_route_create__method_not_an_http_token__400_naming_methods(
    api, product_user, rules, method
):
    # When a route is sent with a method that is no HTTP method (text with %, a space)
    response = api.as_user(product_user).post(
        f"{B}/routes",
        {"slug": "pct", "methods": [method], "path_pattern": "/v1/pct"},
        format="json",
    )
    # Then the answer is a 400 naming methods and the method, and nothing is saved
    body = _problem(response, 400)
    assert list(body["fields"]) == ["methods"]
    assert method.upper() in " ".join(body["fields"]["methods"])
    assert not Route.objects.filter(slug="pct").exists()


@pytest.mark.parametrize("member", ["rate", "burst"])
def test_patch_limit__beyond_what_the_database_holds__400_naming_it(
    api, product_user, rules, member
):
    # Given a limit at revision 1 / When a PATCH sets a number above 2^31 - 1
    limit = Limit.objects.filter(policy=rules["pro_search"]).get()
    response = api.as_user(product_user).patch(
        f"{B}/limits/{limit.pk}", {member: 2**31}, format="json"
    )
    # Then it is refused naming the member, and nothing is written
    assert list(_problem(response, 400)["fields"]) == [member]
    limit.refresh_from_db()
    assert (limit.revision, limit.rate, limit.burst) == (1, 50, 100)
