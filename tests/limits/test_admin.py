"""The admin as product, support and viewer people use it: pages, forms, and who may do what."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.changes.publishing import change_request_publish
from limits.choices import AuditAction, ScopeKind
from limits.core.audit import Actor, audit_record
from limits.models import AuditEntry, ChangeRequest, Policy, Tenant, Tier
from limits.publishing.services import snapshot_publish
from limits.rules import services as rules
from tests.factories import (
    PolicyFactory,
    RouteFactory,
    TenantFactory,
    TierFactory,
)

pytestmark = pytest.mark.django_db

SAVE_BUTTON = b'name="_save"'


@pytest.fixture
def objects():
    """One of each rule object, plus a support override and an audit entry."""
    tier = TierFactory(slug="pro")
    tenant = TenantFactory(slug="acme", tier=tier)
    route = RouteFactory(slug="search", cost=1)
    tier_policy = PolicyFactory(tier=tier, route=route)
    override = PolicyFactory(override=True, tenant=tenant)
    entry = audit_record(  # the one way in: the database refuses an unkeyed entry
        actor=Actor(name="x"),
        action=AuditAction.CREATE,
        object_type="tier",
        object_repr="pro",
    )
    return {
        "tier": tier,
        "tenant": tenant,
        "route": route,
        "policy": tier_policy,
        "override": override,
        "auditentry": entry,
    }


def _url(name, obj=None, action="change"):
    model = "policy" if name == "override" else name
    if obj is None:
        return reverse(f"admin:limits_{model}_{action}")
    return reverse(f"admin:limits_{model}_{action}", args=[obj.pk])


# role -> object -> (add status, may edit on its change page, delete status)
MATRIX = {
    "product": {
        "tier": (200, True, 200),
        "tenant": (200, True, 200),
        "route": (200, True, 200),
        "policy": (200, True, 200),
        "override": (200, True, 200),
        "auditentry": (403, False, 403),
    },
    "support": {
        "tier": (403, False, 403),
        "tenant": (403, False, 403),
        "route": (403, False, 403),
        "policy": (200, False, 403),
        "override": (200, True, 200),
        "auditentry": (403, False, 403),
    },
    "viewer": {
        "tier": (403, False, 403),
        "tenant": (403, False, 403),
        "route": (403, False, 403),
        "policy": (403, False, 403),
        "override": (403, False, 403),
        "auditentry": (403, False, 403),
    },
}
CASES = [(role, name) for role, row in MATRIX.items() for name in row]


@pytest.mark.parametrize(("role", "name"), CASES)
def test_admin__role_on_object__permissions_as_in_the_matrix(
    client, objects, request, role, name
):
    # Given a person of a role, signed in
    client.force_login(request.getfixturevalue(f"{role}_user"))
    add_status, may_edit, delete_status = MATRIX[role][name]
    obj = objects[name]
    # When they open the list, the add page, the object and its delete page
    listing = client.get(_url(name, action="changelist"))
    add = client.get(_url(name, action="add"))
    change = client.get(_url(name, obj))
    delete = client.get(_url(name, obj, action="delete"))
    # Then everyone reads; adding, editing and deleting follow the role
    assert listing.status_code == 200
    assert change.status_code == 200
    assert add.status_code == add_status
    assert (SAVE_BUTTON in change.content) is may_edit
    assert delete.status_code == delete_status


def test_admin__anonymous__redirected_to_login(client):
    response = client.get(reverse("admin:limits_policy_changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def _policy_form(scope, limits, **fields):
    data = {
        "scope": scope,
        "tier": "",
        "tenant": "",
        "route": "",
        "reason": "",
        "expires_at_0": "",
        "expires_at_1": "",
        "limits-TOTAL_FORMS": str(len(limits)),
        "limits-INITIAL_FORMS": "0",
        "limits-MIN_NUM_FORMS": "1",
        "limits-MAX_NUM_FORMS": "1000",
    }
    data.update(fields)
    for index, limit in enumerate(limits):
        for key, value in {
            "kind": "rate",
            "dimension": "tenant",
            "period": "1",
            "cost": "",
            # what the admin pre-fills for the hot-key and concurrency fields
            "shards": "1",
            "lease": "0",
            "lease_ms": "1000",
            "timeout": "300",
            **limit,
        }.items():
            data[f"limits-{index}-{key}"] = value
    return data


def test_policy_add__product_with_inline_limits__proposed_and_audited_with_request(
    client, product_user
):
    # Given a product person and a tier
    tier = TierFactory(slug="free")
    client.force_login(product_user)
    # When they add a tier policy with two limits in one form
    form = _policy_form(
        ScopeKind.TIER,
        [
            {"rate": "5", "burst": "10"},
            {"dimension": "user", "rate": "2", "burst": "5"},
        ],
        tier=tier.pk,
    )
    response = client.post(
        _url("policy", action="add"), form, HTTP_X_REQUEST_ID="trace-123"
    )
    # Then it is an edit of their draft change request, not live, and audited with
    # the request id; the rule tables do not change until it is published
    assert response.status_code == 302, response.content.decode()[:2000]
    request = ChangeRequest.objects.get(author=product_user, state="draft")
    assert response["Location"] == _url("changerequest", request)
    (edit,) = request.edits.all()
    assert (edit.subject, edit.key, edit.before) == ("policy", "tier:free/*", None)
    assert [limit["dimension"] for limit in edit.after["limits"]] == ["tenant", "user"]
    assert not Policy.objects.filter(tier=tier).exists()
    entry = AuditEntry.objects.get(object_type="changerequest")
    assert (entry.actor, entry.request_id, entry.source_ip) == (
        "pat-product",
        "trace-123",
        "127.0.0.1",
    )
    assert entry.after["edits"][0]["key"] == "tier:free/*"
    page = client.get(response["Location"]).content.decode()
    assert "Not live yet." in page


def test_policy_add__burst_below_route_cost__error_shown_and_nothing_saved(
    client, product_user
):
    route = RouteFactory(slug="export", cost=10)
    client.force_login(product_user)
    form = _policy_form(
        ScopeKind.DEFAULT, [{"rate": "5", "burst": "5"}], route=route.pk
    )
    response = client.post(_url("policy", action="add"), form)
    assert response.status_code == 200
    assert "below the request cost 10" in response.content.decode()
    assert not Policy.objects.filter(route=route).exists()


def test_policy_add__support_tier_policy__refused_on_the_form(client, support_user):
    tier = TierFactory(slug="free")
    client.force_login(support_user)
    form = _policy_form(ScopeKind.TIER, [{"rate": "5", "burst": "10"}], tier=tier.pk)
    response = client.post(_url("policy", action="add"), form)
    assert response.status_code == 200
    assert not Policy.objects.filter(tier=tier).exists()


def test_policy_add__support_override_without_expiry__asked_for_one(
    client, support_user
):
    tenant = TenantFactory(slug="acme")
    client.force_login(support_user)
    form = _policy_form(
        ScopeKind.TENANT,
        [{"rate": "50", "burst": "100"}],
        tenant=tenant.pk,
        reason="incident 9",
    )
    response = client.post(_url("policy", action="add"), form)
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not Policy.objects.filter(tenant=tenant).exists()


def test_policy_add__support_override_with_reason_and_expiry__proposed(
    client, support_user
):
    tenant = TenantFactory(slug="acme")
    client.force_login(support_user)
    expires = timezone.now() + timedelta(days=3)
    form = _policy_form(
        ScopeKind.TENANT,
        [{"rate": "50", "burst": "100"}],
        tenant=tenant.pk,
        reason="incident 9",
        expires_at_0=expires.strftime("%Y-%m-%d"),
        expires_at_1="12:00:00",
    )
    response = client.post(_url("policy", action="add"), form)
    assert response.status_code == 302, response.content.decode()[:3000]
    (edit,) = ChangeRequest.objects.get(author=support_user).edits.all()
    assert edit.key == "tenant:acme/*~"
    assert edit.after["reason"] == "incident 9"
    assert edit.after["expires_at"].endswith("12:00:00Z")


def test_policy_add__support_override_longer_than_the_maximum__field_error(
    client, support_user
):
    tenant = TenantFactory(slug="acme")
    client.force_login(support_user)
    far = timezone.now() + timedelta(days=5 * 365)
    form = _policy_form(
        ScopeKind.TENANT,
        [{"rate": "50", "burst": "100"}],
        tenant=tenant.pk,
        reason="temporary, they said",
        expires_at_0=far.strftime("%Y-%m-%d"),
        expires_at_1="12:00:00",
    )
    response = client.post(_url("policy", action="add"), form)
    assert response.status_code == 200
    assert "An override lasts at most 90 days" in response.content.decode()
    assert not ChangeRequest.objects.exists()


def test_default_policy__admin_delete__not_offered(client, product_user):
    client.force_login(product_user)
    default = Policy.objects.get(scope=ScopeKind.DEFAULT, route=None)
    assert client.get(_url("policy", default, action="delete")).status_code == 403


def test_tier_delete__published_tier__proposed_then_removed_audited_on_publish(
    client, product_user
):
    TierFactory(slug="unused", name="Unused")
    snapshot_publish(actor=Actor.system(), message="v1")
    tier = Tier.objects.get(slug="unused")
    client.force_login(product_user)
    response = client.post(_url("tier", tier, action="delete"), {"post": "yes"})
    assert response.status_code == 302
    request = ChangeRequest.objects.get(author=product_user)
    assert Tier.objects.filter(slug="unused").exists()  # not live yet
    change_request_publish(change_request=request, actor=Actor.system())
    assert not Tier.objects.filter(slug="unused").exists()
    entry = AuditEntry.objects.get(action=AuditAction.DELETE, object_type="tier")
    assert entry.reason == f"change request #{request.pk}: Remove tier unused"


def test_tier_delete__never_published__deleted_from_the_working_copy_audited(
    client, product_user
):
    tier = TierFactory(slug="unused")
    client.force_login(product_user)
    response = client.post(_url("tier", tier, action="delete"), {"post": "yes"})
    assert response.status_code == 302
    assert not Tier.objects.filter(slug="unused").exists()
    assert AuditEntry.objects.get(action=AuditAction.DELETE).object_repr == "Unused"
    assert not ChangeRequest.objects.exists()


def test_tenant_page__effective_limits__computed_by_the_resolver(client, viewer_user):
    # Given a pro tenant with a live override on search
    tier = TierFactory(slug="pro")
    tenant = TenantFactory(slug="acme", tier=tier)
    search = RouteFactory(slug="search")
    PolicyFactory(tier=tier, limit__rate=100, limit__burst=200)
    PolicyFactory(
        override=True, tenant=tenant, route=search, limit__rate=500, limit__burst=1000
    )
    client.force_login(viewer_user)
    # When a viewer opens the tenant
    page = client.get(_url("tenant", tenant)).content.decode()
    # Then each route shows the policy that wins, and why
    assert "per tenant: 500 / s, burst 1,000" in page
    assert "tenant acme · search (override)" in page
    assert "per tenant: 100 / s, burst 200" in page
    assert "tier · all routes" in page


def test_policy_list__limits__shown_the_way_people_say_them(client, viewer_user):
    PolicyFactory(tier=TierFactory(slug="pro"), limit__rate=100, limit__burst=200)
    client.force_login(viewer_user)
    page = client.get(_url("policy", action="changelist")).content.decode()
    assert "per tenant: 100 / s, burst 200" in page


def test_audit_log__admin__read_only_with_filters(client, product_user):
    TierFactory(slug="pro")
    client.force_login(product_user)
    rules.rule_save(obj=Tier(slug="gold", name="Gold"), actor=Actor(user=product_user))
    listing = client.get(
        _url("auditentry", action="changelist") + "?action__exact=create"
    )
    assert listing.status_code == 200
    assert "Gold" in listing.content.decode()
    entry = AuditEntry.objects.get(object_repr="Gold")
    assert (
        client.post(_url("auditentry", entry), {"actor": "mallory"}).status_code == 403
    )
    assert AuditEntry.objects.get(pk=entry.pk).actor == "pat-product"


@pytest.mark.parametrize("methods", ["%d", "GET,%(x)s"])
def test_route_add__method_not_an_http_method__form_error_nothing_saved(
    client, product_user, methods
):
    client.force_login(product_user)
    form = {
        "slug": "pct",
        "methods": methods,
        "path_pattern": "/v1/pct",
        "cost": "1",
        "failure_mode": "open",
    }
    response = client.post(_url("route", action="add"), form)
    assert response.status_code == 200
    assert "Not an HTTP method" in response.content.decode()
    assert not ChangeRequest.objects.exists()


def _tenant_form(tier, **fields):
    return {
        "slug": "hooli",
        "name": "Hooli",
        "tier": tier.pk,
        "contact_emails": "",
        "time_zone": "UTC",
        "billing_day": "1",
        **fields,
    }


def test_tenant_add__unknown_time_zone_or_billing_day__form_errors_nothing_saved(
    client, product_user
):
    # Given a product person on the add-tenant form
    tier = TierFactory(slug="pro")
    client.force_login(product_user)
    # When they send a zone zoneinfo does not know and a 32nd day
    form = _tenant_form(tier, time_zone="Mars/Olympus_Mons", billing_day="32")
    response = client.post(_url("tenant", action="add"), form)
    # Then the form says both, by field, and nothing is saved or proposed
    page = response.content.decode()
    assert response.status_code == 200
    assert "is not a known time zone" in page
    assert "Must be at most 31." in page
    assert not Tenant.objects.filter(slug="hooli").exists()
    assert not ChangeRequest.objects.exists()


def test_tenant_change__billing_anchor_date__its_day_proposed_as_billing_day(
    client, product_user
):
    # Given a published tenant billed from the 1st
    tier = TierFactory(slug="pro")
    tenant = TenantFactory(slug="hooli", name="Hooli", tier=tier)
    snapshot_publish(actor=Actor.system(), message="v1")
    client.force_login(product_user)
    # When its contract's billing start date is given instead of a day
    form = _tenant_form(tier, billing_anchor="2026-01-31")
    response = client.post(_url("tenant", tenant), form)
    # Then the edit proposes the date's day, the 31st (the last day of shorter months)
    assert response.status_code == 302, response.content.decode()[:2000]
    (edit,) = ChangeRequest.objects.get(author=product_user).edits.all()
    assert edit.after["billing_day"] == 31
    assert "billing_anchor" not in edit.after  # the date itself is not kept


def test_tenant_change__anchor_date_and_another_billing_day__refused_by_name(
    client, product_user
):
    tier = TierFactory(slug="pro")
    tenant = TenantFactory(slug="hooli", name="Hooli", tier=tier)
    client.force_login(product_user)
    form = _tenant_form(tier, billing_day="5", billing_anchor="2026-03-17")
    response = client.post(_url("tenant", tenant), form)
    assert response.status_code == 200
    assert "Its day (17) is not the billing day given (5)" in response.content.decode()
    assert not ChangeRequest.objects.exists()


def test_tenant_change__time_zone_and_billing_day__proposed_then_published_with_them(
    client, product_user
):
    # Given a published tenant
    tier = TierFactory(slug="pro")
    tenant = TenantFactory(slug="hooli", name="Hooli", tier=tier)
    snapshot_publish(actor=Actor.system(), message="v1")
    client.force_login(product_user)
    # When its time zone and billing day are changed on its admin page
    form = _tenant_form(tier, time_zone="America/New_York", billing_day="17")
    response = client.post(_url("tenant", tenant), form)
    # Then the edit proposes the calendar, and publishing it writes the row
    assert response.status_code == 302, response.content.decode()[:2000]
    request = ChangeRequest.objects.get(author=product_user, state="draft")
    (edit,) = request.edits.all()
    assert (edit.after["time_zone"], edit.after["billing_day"]) == (
        "America/New_York",
        17,
    )
    change_request_publish(change_request=request, actor=Actor.system())
    tenant.refresh_from_db()
    assert (tenant.time_zone, tenant.billing_day) == ("America/New_York", 17)
    entry = AuditEntry.objects.filter(object_type="tenant").latest("pk")
    assert (entry.before["time_zone"], entry.after["time_zone"]) == (
        "UTC",
        "America/New_York",
    )


def test_policy_add__calendar_quota__proposed_in_the_snapshot_words(
    client, product_user
):
    # Given a product person and a tier
    tier = TierFactory(slug="pro")
    client.force_login(product_user)
    # When they add a policy holding a bucket and 10,000 a month on the billing cycle
    quota = {
        "kind": "calendar_quota",
        "rate": "10000",
        "period": "",
        "quota_per": "month",
        "quota_cycle": "billing",
    }
    form = _policy_form(
        ScopeKind.TIER, [{"rate": "5", "burst": "10"}, quota], tier=tier.pk
    )
    response = client.post(_url("policy", action="add"), form)
    # Then the draft's edit holds the quota as the snapshot says it
    assert response.status_code == 302, response.content.decode()[:3000]
    (edit,) = ChangeRequest.objects.get(author=product_user).edits.all()
    assert {
        "kind": "calendar_quota",
        "dimension": "tenant",
        "limit": 10000,
        "per": "month",
        "cycle": "billing",
        "cost": None,
        "shadow": False,
    } in edit.after["limits"]


def test_policy_add__calendar_quota_with_a_burst_left_in_its_hidden_field__burst_dropped(
    client, product_user
):
    # Given a product person whose quota row still holds a burst, typed while the row
    # was a bucket (the form hides a quota's burst: limits/admin/limit_form.py)
    tier = TierFactory(slug="pro")
    client.force_login(product_user)
    quota = {"kind": "calendar_quota", "rate": "100", "burst": "5", "quota_per": "day"}
    form = _policy_form(ScopeKind.TIER, [quota], tier=tier.pk)
    # When they save
    response = client.post(_url("policy", action="add"), form)
    # Then the quota is proposed without the burst it cannot have (the model's own
    # refusal of one is tested in tests/limits/rules/)
    assert response.status_code == 302, response.content.decode()[:2000]
    (edit,) = ChangeRequest.objects.get(author=product_user).edits.all()
    (limit,) = edit.after["limits"]
    assert limit == {
        "kind": "calendar_quota",
        "dimension": "tenant",
        "limit": 100,
        "per": "day",
        "cost": None,
        "shadow": False,
    }
