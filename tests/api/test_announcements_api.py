"""Announcements, webhook endpoints and deliveries through the API, black box."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import AuditAction
from limits.core.audit import Actor
from limits.models import AuditEntry, Delivery, Limit
from limits.publishing.services import snapshot_publish
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db
ENDPOINTS = "/api/v1/webhook-endpoints"


@pytest.fixture
def acme():
    return TenantFactory(slug="acme")


@pytest.mark.parametrize(
    ("role", "status"), [("product", 201), ("support", 201), ("viewer", 403)]
)
def test_webhook_endpoint_create__roles__product_and_support_manage(
    api, acme, product_user, support_user, viewer_user, role, status
):
    # Given a person of each role
    user = {"product": product_user, "support": support_user, "viewer": viewer_user}
    # When they register an endpoint for acme
    response = api.as_user(user[role]).post(
        ENDPOINTS, {"tenant": "acme", "url": "https://hooks.acme.test/x"}, format="json"
    )
    # Then product and support may, and the secret comes back this once
    assert response.status_code == status
    if status == 201:
        assert response.json()["secret"].startswith(response.json()["secret_prefix"])


def test_webhook_endpoint__read_back__secret_never_shown_again(
    api, acme, support_user, viewer_user
):
    # Given an endpoint registered by support
    created = (
        api.as_user(support_user)
        .post(
            ENDPOINTS,
            {"tenant": "acme", "url": "https://hooks.acme.test/x"},
            format="json",
        )
        .json()
    )
    # When a viewer lists and reads endpoints
    listed = api.as_user(viewer_user).get(f"{ENDPOINTS}?tenant=acme").json()
    one = api.get(f"{ENDPOINTS}/{created['id']}")
    # Then the secret is in neither, and the ETag follows the revision
    assert [e["url"] for e in listed["results"]] == ["https://hooks.acme.test/x"]
    assert "secret" not in one.json()
    assert created["secret"] not in one.content.decode()
    assert one["ETag"] == '"r1"'
    # And a new endpoint's deliveries are Standard Webhooks only
    assert one.json()["legacy_signature"] is False


def test_webhook_endpoint__bad_url__400_with_field(api, acme, product_user):
    response = api.as_user(product_user).post(
        ENDPOINTS, {"tenant": "acme", "url": "ftp://nope"}, format="json"
    )
    assert response.status_code == 400
    assert "url" in response.json()["fields"]


def test_webhook_endpoint__private_address_in_production__400_naming_url(
    api, acme, product_user, settings
):
    # Given production settings (limits.core.egress: public addresses only)
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = False
    # When product registers a cloud metadata address as an endpoint
    response = api.as_user(product_user).post(
        ENDPOINTS, {"tenant": "acme", "url": "http://169.254.169.254/"}, format="json"
    )
    # Then the URL field says why
    assert response.status_code == 400
    assert "public addresses only" in response.json()["fields"]["url"][0]


def test_webhook_endpoint_update_rotate_test_delete__support__audited(
    api, acme, support_user
):
    # Given an endpoint
    api.as_user(support_user)
    created = api.post(
        ENDPOINTS, {"tenant": "acme", "url": "https://a.test/x"}, format="json"
    ).json()
    url = f"{ENDPOINTS}/{created['id']}"
    # When support edits it with If-Match, rotates its secret, sends a test, deletes it
    patched = api.patch(url, {"is_active": True}, format="json", HTTP_IF_MATCH='"r1"')
    stale = api.patch(url, {"description": "x"}, format="json", HTTP_IF_MATCH='"r1"')
    rotated = api.post(f"{url}/rotate-secret")
    tested = api.post(f"{url}/test")
    deleted = api.delete(url)
    # Then each answered as documented and left an audit entry
    assert (patched.status_code, stale.status_code) == (200, 412)
    assert rotated.json()["secret"] != created["secret"]
    assert tested.status_code == 202
    assert tested.json()["kind"] == "test"
    assert deleted.status_code == 204
    actions = list(
        AuditEntry.objects.filter(object_type="webhookendpoint")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["create", "update", "token_create", "delete"]
    # And the test delivery stays in the log, without its endpoint
    assert Delivery.objects.get().endpoint is None


def test_announcement__note__product_edits_while_upcoming(
    api,
    rules,
    product_user,
    support_user,
):
    # Given a lowering scheduled in 15 days
    actor = Actor.system("test")
    snapshot_publish(actor=actor, message="v1")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    snapshot_publish(
        actor=actor, message="v2", effective_at=timezone.now() + timedelta(days=15)
    )
    # When support, then product, change its note
    body = {"note": "Search moves to 20 / s."}
    denied = api.as_user(support_user).patch("/api/v1/announcements/2", body)
    response = api.as_user(product_user).patch(
        "/api/v1/announcements/2", body, format="json"
    )
    # Then only product may; the announcement says upcoming, lowers, no emergency
    assert denied.status_code == 403
    data = response.json()
    assert (data["status"], data["lowers"], data["emergency"]) == (
        "upcoming",
        True,
        False,
    )
    assert data["note"] == "Search moves to 20 / s."
    # And the note of a version in effect is final
    final = api.patch("/api/v1/announcements/1", body, format="json")
    assert final.status_code == 400
    assert "note" in final.json()["fields"]


def test_delivery_resend__viewer_forbidden_support_allowed(
    api, acme, support_user, viewer_user
):
    # Given a failed test delivery
    api.as_user(support_user)
    created = api.post(
        ENDPOINTS, {"tenant": "acme", "url": "https://a.test/x"}, format="json"
    ).json()
    delivery_id = api.post(f"{ENDPOINTS}/{created['id']}/test").json()["id"]
    Delivery.objects.filter(pk=delivery_id).update(state="failed")
    # When a viewer, then support, ask for a resend
    viewer = api.as_user(viewer_user).post(f"/api/v1/deliveries/{delivery_id}/resend")
    support = api.as_user(support_user).post(f"/api/v1/deliveries/{delivery_id}/resend")
    # Then only support may; the delivery is pending again, and audited
    assert (viewer.status_code, support.status_code) == (403, 202)
    assert support.json()["state"] == "pending"
    assert AuditEntry.objects.filter(action=AuditAction.RESEND).count() == 1
    listed = api.get("/api/v1/deliveries?tenant=acme&state=pending").json()
    assert [d["id"] for d in listed["results"]] == [delivery_id]
