"""The API and calendar quotas: tenants' calendars (time zone, billing day) and
limits of kind calendar_quota, with field-named 400s for what cannot be."""

import pytest

from limits.choices import AuditAction
from limits.models import AuditEntry, Policy, Tenant
from tests.factories import RouteFactory, TenantFactory, TierFactory

pytestmark = pytest.mark.django_db

QUOTA = {"kind": "calendar_quota", "dimension": "tenant", "rate": 10000}


@pytest.fixture
def pro_and_search():
    return TierFactory(slug="pro"), RouteFactory(slug="search", cost=1)


def _policy_body(limits):
    return {"scope": "tier", "tier": "pro", "route": "search", "limits": limits}


def _fields(response) -> dict:
    """The problem document's fields, as the API names them."""
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    return response.json()["fields"]


def test_create_tenant__time_zone_and_billing_day__201_read_back_and_audited(
    api, product_user, pro_and_search
):
    # Given a product person
    api.as_user(product_user)
    # When they create a tenant in Paris billed on the 17th
    body = {
        "slug": "acme",
        "name": "Acme",
        "tier": "pro",
        "time_zone": "Europe/Paris",
        "billing_day": 17,
    }
    response = api.post("/api/v1/tenants", body, format="json")
    # Then it is saved, read back with its calendar, and the audit entry holds it
    assert response.status_code == 201, response.json()
    read = api.get("/api/v1/tenants/acme").json()
    assert (read["time_zone"], read["billing_day"]) == ("Europe/Paris", 17)
    entry = AuditEntry.objects.get(object_type="tenant", action=AuditAction.CREATE)
    assert (entry.after["time_zone"], entry.after["billing_day"]) == (
        "Europe/Paris",
        17,
    )


def test_create_tenant__no_calendar__utc_and_billing_day_1(
    api, product_user, pro_and_search
):
    api.as_user(product_user)
    body = {"slug": "acme", "name": "Acme", "tier": "pro"}
    read = api.post("/api/v1/tenants", body, format="json").json()
    assert (read["time_zone"], read["billing_day"]) == ("UTC", 1)


@pytest.mark.parametrize(
    ("member", "value", "words"),
    [
        ("time_zone", "Mars/Olympus_Mons", "not a known time zone"),
        ("time_zone", "../../etc/passwd", "not a known time zone"),
        ("time_zone", "", "may not be blank"),
        ("billing_day", 0, "greater than or equal to 1"),
        ("billing_day", 32, "less than or equal to 31"),
    ],
    ids=["unknown zone", "a path", "blank", "day 0", "day 32"],
)
def test_update_tenant__bad_calendar__400_naming_the_field(
    api, product_user, pro_and_search, member, value, words
):
    # Given a tenant
    tenant = TenantFactory(slug="acme", tier=pro_and_search[0])
    api.as_user(product_user)
    # When a bad time zone or billing day is sent
    response = api.patch(
        f"/api/v1/tenants/{tenant.slug}", {member: value}, format="json"
    )
    # Then the problem names the field, and nothing changed
    fields = _fields(response)
    assert list(fields) == [member]
    assert words in str(fields[member])
    tenant.refresh_from_db()
    assert (tenant.time_zone, tenant.billing_day) == ("UTC", 1)


def test_create__policy_with_a_calendar_quota__201_and_read_back(
    api, product_user, pro_and_search
):
    # Given a product person
    api.as_user(product_user)
    quota = {**QUOTA, "quota_per": "month", "quota_cycle": "billing", "cost": 2}
    # When they create a policy of 10,000 a month per tenant, on the billing cycle
    response = api.post("/api/v1/policies", _policy_body([quota]), format="json")
    # Then it is saved as a calendar quota and read back with its kind
    assert response.status_code == 201, response.json()
    read = api.get(f"/api/v1/policies/{response.json()['id']}").json()
    (limit,) = read["limits"]
    assert {name: limit[name] for name in quota} == quota
    assert (limit["period"], limit["burst"]) == (None, None)


def test_create__calendar_quota_without_a_cycle__the_calendar_one(
    api, product_user, pro_and_search
):
    api.as_user(product_user)
    quota = {**QUOTA, "quota_per": "day"}
    response = api.post("/api/v1/policies", _policy_body([quota]), format="json")
    assert response.status_code == 201, response.json()
    (limit,) = response.json()["limits"]
    assert (limit["quota_per"], limit["quota_cycle"]) == ("day", "calendar")


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"burst": 200}, "burst", "A calendar quota has no burst"),
        ({"period": 60}, "period", "A calendar quota has no period"),
        ({"shards": 2}, "shards", "Shards are for rate limits"),
        ({"lease": 10}, "lease", "Leases are for rate limits"),
        ({"rate": None}, "rate", "A calendar quota needs this"),
        ({"quota_per": ""}, "quota_per", "A calendar quota needs this"),
        ({"quota_per": "week"}, "quota_per", "not a valid choice"),
        ({"quota_cycle": "fiscal"}, "quota_cycle", "not a valid choice"),
        (
            {"quota_per": "day", "quota_cycle": "billing"},
            "quota_cycle",
            "A billing cycle is a month",
        ),
    ],
    ids=[
        "burst",
        "period",
        "shards",
        "lease",
        "no limit",
        "no per",
        "a week",
        "bad cycle",
        "daily billing",
    ],
)
def test_create__calendar_quota_with_a_bad_member__400_naming_the_row_and_field(
    api, product_user, pro_and_search, extra, field, message
):
    api.as_user(product_user)
    quota = {**QUOTA, "quota_per": "month", **extra}
    response = api.post("/api/v1/policies", _policy_body([quota]), format="json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert message in str(response.json())
    assert field in str(response.json())
    assert not Policy.objects.filter(tier__slug="pro").exists()


def test_tenants__hundred_thousand_default_calendars__nothing_to_store():
    # A tenant created without a calendar holds the defaults the snapshot leaves out
    tenant = TenantFactory()
    assert (Tenant.objects.get(pk=tenant.pk).time_zone, tenant.billing_day) == (
        "UTC",
        1,
    )
