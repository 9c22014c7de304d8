"""Change requests and rules as code over HTTP, the way a CI job drives them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, ChangeEdit, ChangeRequest, Policy, Snapshot
from limits.publishing.services import snapshot_publish
from tests.factories import PolicyFactory, UserFactory
from tests.hostile_input import BILLION_LAUGHS

pytestmark = pytest.mark.django_db

B = "/api/v1"


@pytest.fixture
def active(rules, redis_client):
    return snapshot_publish(actor=Actor.system(), message="v1")


def _token_client(api, user):
    secret = token_create(token=ApiToken(user=user, name="ci"), actor=Actor.system())
    return api.bearer(secret)


def _override(route="search", **change):
    expires = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    doc = {
        "scope": "tenant:initech",
        "route": route,
        "expires_at": expires.isoformat(),
        "reason": "ticket 4711",
        "limits": [
            {"dimension": "tenant", "rate": 50, "period": "second", "burst": 100}
        ],
    }
    return {**doc, **change}


def test_create__bad_edit__400_by_edit_and_member(api, active, support_user):
    api.as_user(support_user)
    bad = _override(
        limits=[{"dimension": "tenant", "rate": 5, "period": "second", "burst": 0}]
    )
    response = api.post(
        f"{B}/change-requests",
        {
            "edits": [
                {"object": "policy", "value": _override("orders.read")},
                {"object": "policy", "value": bad},
            ]
        },
        format="json",
    )
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert fields == {
        "edits": {"1": {"limits[0].burst": ["0 is less than the minimum of 1"]}}
    }


def test_support__override_over_the_api__opened_then_published_by_support(
    api, active, support_user
):
    api.as_user(support_user)
    opened = api.post(
        f"{B}/change-requests",
        {"title": "Launch week", "edits": [{"object": "policy", "value": _override()}]},
        format="json",
    )
    assert opened.status_code == 201, opened.content
    body = opened.json()
    assert (body["state"], body["preview"]["approval"]["needed"]) == ("open", False)
    assert body["edits"][0]["key"] == "tenant:initech/search~"
    published = api.post(f"{B}/change-requests/{body['id']}/publish", {}, format="json")
    assert published.status_code == 201, published.content
    assert published.json()["version"] == 2


def test_ci__export_edit_diff_apply_publish__with_an_api_token(
    api, active, product_user
):
    client = _token_client(api, product_user)
    # Given the rules exported as YAML
    exported = client.get(f"{B}/rules/export")
    assert exported["Content-Type"].startswith("application/yaml")
    text = exported.content.decode()
    edited = text.replace(
        "rate: 50, period: second, burst: 100", "rate: 80, period: second, burst: 160"
    )
    # When CI diffs the edited file: the change in words, with the tenants it reaches
    diff = client.post(f"{B}/rules/diff", {"document": edited}, format="json").json()
    assert diff["equal"] is False
    assert (
        "tier pro · search: per tenant: 50 / s, burst 100 → 80 / s, burst 160"
        in diff["text"]
    )
    assert diff["changes"]["affected"]["tenants"] == ["acme"]
    # And applies it, published (a raise for one tenant needs no approval)
    applied = client.post(
        f"{B}/rules/apply",
        {"document": edited, "title": "Raise pro search", "publish": True},
        format="json",
    )
    assert applied.status_code == 201, applied.content
    assert (applied.json()["published_version"], applied.json()["not_published"]) == (
        2,
        "",
    )
    # Then the export is the file, byte for byte, and the diff is empty
    assert client.get(f"{B}/rules/export").content.decode() == edited
    again = client.post(f"{B}/rules/diff", {"document": edited}, format="json").json()
    assert again["equal"] is True


def test_ci__lowering__opened_not_published_until_a_second_product_person_approves(
    api, active, product_user, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    client = _token_client(api, product_user)
    text = client.get(f"{B}/rules/export").content.decode()
    lowered = text.replace(
        "rate: 50, period: second, burst: 100", "rate: 20, period: second, burst: 40"
    )
    applied = client.post(
        f"{B}/rules/apply", {"document": lowered, "publish": True}, format="json"
    ).json()
    assert applied["published_version"] is None
    assert (
        "approval of a second person with the product role" in applied["not_published"]
    )
    pk = applied["change_request"]["id"]
    # The author cannot approve it; a second product person can
    assert client.post(f"{B}/change-requests/{pk}/approve").status_code == 403
    other = UserFactory(username="quinn", role="product")
    reviewer = _token_client(type(api)(), other)
    assert reviewer.post(f"{B}/change-requests/{pk}/approve").status_code == 200
    published = client.post(f"{B}/change-requests/{pk}/publish", {}, format="json")
    assert published.status_code == 201, published.content


def test_rules_diff__bad_yaml__400_with_line(api, active, viewer_user):
    api.as_user(viewer_user)
    response = api.post(
        f"{B}/rules/diff",
        {"document": "format: 1\ntiers: [\n", "name": "ci.yaml"},
        format="json",
    )
    assert response.status_code == 400
    (message,) = response.json()["fields"]["document"]
    assert message.startswith("ci.yaml:3: (the file): not valid YAML")


def test_rules_diff_and_apply__aliases__400_naming_the_problem_and_its_line(
    api, active, product_user
):
    api.as_user(product_user)
    # Given the billion laughs, When a user diffs or applies it
    for operation in ("diff", "apply"):
        response = api.post(
            f"{B}/rules/{operation}",
            {"document": BILLION_LAUGHS, "name": "laughs.yaml"},
            format="json",
        )
        # Then it is refused as a problem at its first anchor, nothing expanded
        assert response.status_code == 400, response.content
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["fields"]["document"] == [
            "laughs.yaml:2: (the file): not valid YAML: "
            "anchors and aliases (&name, *name) are not allowed in a rules file"
        ]
    # And a rules file without aliases is still read
    text = api.get(f"{B}/rules/export").content.decode()
    same = api.post(f"{B}/rules/diff", {"document": text}, format="json")
    assert (same.status_code, same.json()["equal"]) == (200, True)


def test_renew__support__opens_a_request_extending_the_override(
    api, rules, redis_client, support_user
):
    override = PolicyFactory(
        override=True, tenant=rules["initech"], route=rules["search"]
    )
    snapshot_publish(actor=Actor.system(), message="v1")
    api.as_user(support_user)
    response = api.post(f"{B}/overrides/{override.pk}/renew")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["origin"] == "renewal"
    (edit,) = body["edits"]
    assert edit["after"]["expires_at"] > edit["before"]["expires_at"]
    assert body["preview"]["changes"]["lowers"] is False


@pytest.mark.parametrize(
    ("limit", "member"),
    [
        ({"rate": 2**31, "burst": 100}, "limits[0].rate"),
        ({"rate": 50, "burst": 2**31}, "limits[0].burst"),
        ({"rate": 50, "burst": 100, "cost": 2**40}, "limits[0].cost"),
    ],
)
def test_create__number_beyond_what_the_database_holds__400_naming_it(
    api, active, product_user, limit, member
):
    # When a change request sets a limit the database column cannot hold
    value = _override(limits=[{"dimension": "tenant", "period": "second", **limit}])
    response = api.as_user(product_user).post(
        f"{B}/change-requests",
        {"edits": [{"object": "policy", "value": value}]},
        format="json",
    )
    # Then it is refused with the member named, not stored for a publish to trip on
    assert response.status_code == 400, response.content
    (message,) = response.json()["fields"]["edits"]["0"][member]
    assert "maximum of 2147483647" in message
    assert not ChangeRequest.objects.exists()


def test_publish__stored_before_the_bound__400_naming_the_edit_nothing_written(
    api, active, support_user
):
    # Given an override request stored before rates were bounded: its rate is 2^31
    api.as_user(support_user)
    opened = api.post(
        f"{B}/change-requests",
        {"edits": [{"object": "policy", "value": _override()}]},
        format="json",
    )
    assert opened.status_code == 201, opened.content
    edit = ChangeEdit.objects.get(change_request_id=opened.json()["id"])
    edit.after["limits"][0]["rate"] = 2**31
    edit.save()
    # When it is read, then published
    shown = api.get(f"{B}/change-requests/{opened.json()['id']}")
    published = api.post(
        f"{B}/change-requests/{opened.json()['id']}/publish", {}, format="json"
    )
    # Then the publish is refused naming the edit and the number, and nothing changed
    assert shown.status_code == 200, shown.content
    assert published.status_code == 400, published.content
    said = str(published.json()["fields"]["edits"])
    assert "edit 1" in said
    assert "2147483648 is greater than the maximum of 2147483647" in said
    assert Snapshot.objects.count() == 1
    assert not Policy.objects.filter(
        tenant__slug="initech", route__slug="search", expires_at__isnull=False
    ).exists()


@pytest.mark.parametrize("endpoint", ["diff", "apply"])
def test_rules_file__rate_beyond_what_the_database_holds__400_naming_it(
    api, active, product_user, endpoint
):
    client = _token_client(api, product_user)
    text = client.get(f"{B}/rules/export").content.decode()
    huge = text.replace(
        "rate: 50, period: second, burst: 100",
        f"rate: {2**31}, period: second, burst: {2**31}",
    )
    body = {"document": huge, **({"publish": True} if endpoint == "apply" else {})}
    response = client.post(f"{B}/rules/{endpoint}", body, format="json")
    assert response.status_code == 400, response.content
    said = " ".join(response.json()["fields"]["document"])
    assert ".rate: 2147483648 is greater than the maximum of 2147483647" in said
    assert not ChangeRequest.objects.exists()


def _route_request(client, slug: str) -> int:
    route = {"methods": ["GET"], "path": "/v1/reports"}
    response = client.post(
        f"{B}/change-requests",
        {"edits": [{"object": "route", "key": slug, "value": route}]},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_two_requests_claim_one_route__second_shown_conflicting_publish_refused(
    api, active, product_user
):
    # Given two change requests adding a route for the same method and path
    client = api.as_user(product_user)
    first, second = _route_request(client, "reports"), _route_request(client, "rep2")
    # When the first is published
    assert client.post(f"{B}/change-requests/{first}/publish").status_code == 201
    # Then the second reads with the collision as a conflict, not publishable
    shown = client.get(f"{B}/change-requests/{second}")
    assert shown.status_code == 200, shown.content
    preview = shown.json()["preview"]
    assert preview["publishable"] is False
    (said,) = preview["conflicts"]
    assert said.startswith("Route collision with version 2: GET /v1/reports is")
    assert "claimed by both 'reports' and 'rep2'" in said
    assert client.get(f"{B}/change-requests/{second}/impact").status_code == 400
    # And publishing it is refused in the problem shape, naming the route
    refused = client.post(f"{B}/change-requests/{second}/publish")
    assert refused.status_code == 409, refused.content
    assert refused["Content-Type"].startswith("application/problem+json")
    assert "GET /v1/reports" in refused.content.decode()
    assert client.get(f"{B}/rules/export").content.decode().count("/v1/reports") == 1


def test_rules_diff_and_apply__yaml_body__read_like_the_json_document(
    api, active, product_user, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    api.as_user(product_user)
    text = api.get(f"{B}/rules/export").content.decode()
    # Given the export posted as it is, with YAML's media type
    same = api.post(f"{B}/rules/diff", text, content_type="application/yaml")
    # Then it is read like {"document": ...}: the file matches
    assert (same.status_code, same.json()["equal"]) == (200, True), same.content
    # And a bad line is named the same way, with ?name= for the file's name
    bad = text.replace("tier: pro", "tier: [pro", 1)
    refused = api.post(
        f"{B}/rules/diff?name=ci.yaml", bad, content_type="application/yaml"
    )
    assert refused.status_code == 400
    (message,) = refused.json()["fields"]["document"]
    as_json = api.post(
        f"{B}/rules/diff", {"document": bad, "name": "ci.yaml"}, format="json"
    )
    assert as_json.json()["fields"]["document"] == [message]
    line = int(message.split(":")[1])
    assert message.startswith(f"ci.yaml:{line}: (the file): not valid YAML")
    # And aliases stay refused
    laughs = api.post(
        f"{B}/rules/apply", BILLION_LAUGHS, content_type="application/yaml"
    )
    assert laughs.status_code == 400
    assert "anchors and aliases" in laughs.json()["fields"]["document"][0]
    # When a new tenant is applied with ?publish=true
    added = text.replace(
        "\nroutes:\n", "\n  hooli:\n    name: Hooli\n    tier: free\nroutes:\n", 1
    )
    applied = api.post(
        f"{B}/rules/apply?publish=true&title=Onboard+Hooli",
        added,
        content_type="application/yaml",
    )
    # Then it is opened and published like the JSON request
    assert applied.status_code == 201, applied.content
    body = applied.json()
    assert body["change_request"]["title"] == "Onboard Hooli"
    assert body["published_version"] == active.version + 1
