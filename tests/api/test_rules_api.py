"""The management API, black box: CRUD, field errors, ETags, roles, tokens, filters."""

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import AuditAction
from limits.models import AuditEntry, Policy, Tier
from tests.factories import (
    PolicyFactory,
    RouteFactory,
    TenantFactory,
    TierFactory,
)

pytestmark = pytest.mark.django_db


def _policy_body(**fields):
    return {
        "scope": "tier",
        "tier": "pro",
        "route": "search",
        "limits": [{"dimension": "tenant", "rate": 50, "period": 1, "burst": 100}],
        **fields,
    }


@pytest.fixture
def pro_and_search():
    return TierFactory(slug="pro"), RouteFactory(slug="search", cost=1)


def test_create__tier_tenant_route_policy__201_and_audited_with_request_id(
    api, product_user
):
    # Given a product person / When they build a small rule set through the API
    api.as_user(product_user)
    assert (
        api.post(
            "/api/v1/tiers", {"slug": "pro", "name": "Pro"}, format="json"
        ).status_code
        == 201
    )
    tenant = api.post(
        "/api/v1/tenants",
        {
            "slug": "acme",
            "name": "Acme",
            "tier": "pro",
            "contact_emails": ["ops@acme.example"],
        },
        format="json",
    )
    route = api.post(
        "/api/v1/routes",
        {"slug": "search", "methods": ["get"], "path_pattern": "/v1/search"},
        format="json",
        HTTP_X_REQUEST_ID="ci-run-7",
    )
    policy = api.post("/api/v1/policies", _policy_body(), format="json")
    # Then each is created, answered with its ETag, and audited
    assert tenant.status_code == route.status_code == policy.status_code == 201
    assert route.json()["methods"] == ["GET"]
    assert policy["ETag"] == '"r1"'
    assert policy.json()["limits"][0]["description"] == "per tenant: 50 / s, burst 100"
    assert AuditEntry.objects.get(object_type="route").request_id == "ci-run-7"
    assert AuditEntry.objects.filter(action=AuditAction.CREATE).count() == 4


@pytest.mark.parametrize(
    ("url", "body", "field", "words"),
    [
        (
            "/api/v1/routes",
            {"slug": "x", "methods": ["GET"], "path_pattern": "/v1/{id"},
            "path_pattern",
            "not a parameter",
        ),
        (
            "/api/v1/routes",
            {"slug": "x", "methods": [], "path_pattern": "/v1/x"},
            "methods",
            "at least one",
        ),
        (
            "/api/v1/tenants",
            {"slug": "acme", "name": "A", "tier": "gold"},
            "tier",
            "does not exist",
        ),
        (
            "/api/v1/tenants",
            {"slug": "Acme!", "name": "A", "tier": "pro"},
            "slug",
            "lower-case",
        ),
        (
            "/api/v1/policies",
            _policy_body(limits=[{"rate": 5, "burst": 0}]),
            "limits",
            "greater than or equal to 1",
        ),
        (
            "/api/v1/policies",
            _policy_body(limits=[{"rate": 5, "burst": 5, "cost": 9}]),
            "limits",
            "burst",
        ),
        ("/api/v1/policies", _policy_body(limits=[]), "limits", "at least 1"),
        (
            "/api/v1/policies",
            _policy_body(scope="galaxy"),
            "scope",
            "not a valid choice",
        ),
        (
            "/api/v1/policies",
            _policy_body(scope="tenant", tier=None, tenant=None),
            "tenant",
            "Choose the tenant",
        ),
        (
            "/api/v1/policies",
            _policy_body(expires_at="2020-01-01T00:00:00Z"),
            "expires_at",
            "Only tenant",
        ),
    ],
)
def test_create__bad_input__400_naming_the_field(
    api, product_user, pro_and_search, url, body, field, words
):
    api.as_user(product_user)
    response = api.post(url, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid"
    assert words in str(response.json()["fields"][field])


def test_create__duplicate_policy__400_and_nothing_written(
    api, product_user, pro_and_search
):
    api.as_user(product_user)
    assert (
        api.post("/api/v1/policies", _policy_body(), format="json").status_code == 201
    )
    response = api.post("/api/v1/policies", _policy_body(), format="json")
    assert response.status_code == 400
    assert "already a policy" in str(response.json()["fields"])
    assert Policy.objects.filter(tier__slug="pro").count() == 1


def test_update__if_match_current__200_with_next_etag(api, product_user):
    TierFactory(slug="pro", name="Pro")
    api.as_user(product_user)
    etag = api.get("/api/v1/tiers/pro")["ETag"]
    response = api.patch(
        "/api/v1/tiers/pro", {"name": "Professional"}, format="json", HTTP_IF_MATCH=etag
    )
    assert response.status_code == 200
    assert response["ETag"] == '"r2"'


def test_update__stale_if_match__412_with_current_etag_and_nothing_written(
    api, product_user
):
    # Given a tier that someone changed after we read it
    TierFactory(slug="pro", name="Pro")
    api.as_user(product_user)
    etag = api.get("/api/v1/tiers/pro")["ETag"]
    api.patch("/api/v1/tiers/pro", {"name": "Pro 2"}, format="json")
    # When writing with the old ETag
    response = api.patch(
        "/api/v1/tiers/pro", {"name": "Mine"}, format="json", HTTP_IF_MATCH=etag
    )
    # Then the write is refused with the current ETag, and the other change stays
    assert response.status_code == 412
    assert response["ETag"] == '"r2"'
    assert Tier.objects.get(slug="pro").name == "Pro 2"


def test_delete__stale_if_match__412(api, product_user):
    RouteFactory(slug="search")
    api.as_user(product_user)
    assert api.delete("/api/v1/routes/search", HTTP_IF_MATCH='"r7"').status_code == 412
    assert api.delete("/api/v1/routes/search", HTTP_IF_MATCH='"r1"').status_code == 204


def test_update__malformed_if_match__400(api, product_user):
    TierFactory(slug="pro")
    api.as_user(product_user)
    response = api.patch(
        "/api/v1/tiers/pro", {"name": "X"}, format="json", HTTP_IF_MATCH="yesterday"
    )
    assert response.status_code == 400
    assert "If-Match" in response.json()["fields"]


def test_policy_update__limits_by_id__kept_changed_added_and_removed(
    api, product_user, pro_and_search
):
    api.as_user(product_user)
    created = api.post(
        "/api/v1/policies",
        _policy_body(
            limits=[
                {"dimension": "tenant", "rate": 50, "burst": 100},
                {"dimension": "user", "rate": 5, "burst": 10},
            ]
        ),
        format="json",
    ).json()
    tenant_limit = next(
        limit for limit in created["limits"] if limit["dimension"] == "tenant"
    )
    body = {
        "limits": [
            {"id": tenant_limit["id"], "dimension": "tenant", "rate": 20, "burst": 40},
            {"dimension": "ip", "rate": 100, "burst": 100},
        ]
    }
    response = api.patch(
        f"/api/v1/policies/{created['id']}", body, format="json", HTTP_IF_MATCH='"r1"'
    )
    assert response.status_code == 200, response.content
    limits = {limit["dimension"]: limit for limit in response.json()["limits"]}
    assert set(limits) == {"tenant", "ip"}
    assert limits["tenant"]["id"] == tenant_limit["id"]
    assert limits["tenant"]["description"] == "per tenant: 20 / s, burst 40"


def test_limit_delete__last_enforcing_limit__400_policy_kept_whole(api, product_user):
    limit = PolicyFactory(tier=TierFactory(slug="pro")).limits.get()
    api.as_user(product_user)
    response = api.delete(f"/api/v1/limits/{limit.pk}")
    assert response.status_code == 400
    assert "unlimited" in str(response.json()["fields"])


def test_default_policy__delete__400_it_stays(api, product_user):
    default = Policy.objects.get(scope="default", route=None)
    api.as_user(product_user)
    response = api.delete(f"/api/v1/policies/{default.pk}")
    assert response.status_code == 400
    assert "cannot be deleted" in response.json()["fields"]["non_field_errors"][0]


class TestRoles:
    def test_support__tenant_override_with_expiry__201(
        self, api, support_user, pro_and_search
    ):
        TenantFactory(slug="acme", tier=pro_and_search[0])
        api.as_user(support_user)
        expires = (timezone.now() + timedelta(days=2)).isoformat()
        body = _policy_body(
            scope="tenant",
            tier=None,
            tenant="acme",
            reason="incident 12",
            expires_at=expires,
        )
        response = api.post("/api/v1/policies", body, format="json")
        assert response.status_code == 201, response.content

    def test_support__override_without_expiry__400_on_expires_at(
        self, api, support_user, pro_and_search
    ):
        TenantFactory(slug="acme", tier=pro_and_search[0])
        api.as_user(support_user)
        body = _policy_body(
            scope="tenant", tier=None, tenant="acme", reason="incident 12"
        )
        response = api.post("/api/v1/policies", body, format="json")
        assert response.status_code == 400
        assert "expiry" in response.json()["fields"]["expires_at"][0]

    def test_support__tier_policy__403(self, api, support_user, pro_and_search):
        api.as_user(support_user)
        response = api.post("/api/v1/policies", _policy_body(), format="json")
        assert response.status_code == 403
        assert response.json()["error"] == "permission_denied"

    @pytest.mark.parametrize("role", ["support", "viewer"])
    def test_non_product__tier_write__403(self, api, request, role):
        api.as_user(request.getfixturevalue(f"{role}_user"))
        assert (
            api.post(
                "/api/v1/tiers", {"slug": "x", "name": "X"}, format="json"
            ).status_code
            == 403
        )
        assert api.get("/api/v1/tiers").status_code == 200

    def test_anonymous__401_json(self, api):
        response = api.get("/api/v1/policies")
        assert response.status_code == 401
        assert response.json()["error"] == "not_authenticated"


class TestTokens:
    def test_api_token__created_once_then_authenticates_as_its_user(
        self, api, product_user
    ):
        # Given a product person who creates a token for CI
        created = api.as_user(product_user).post(
            "/api/v1/tokens", {"name": "ci"}, format="json"
        )
        secret = created.json()["secret"]
        # When CI uses it
        ci = type(api)().bearer(secret)
        response = ci.post(
            "/api/v1/tiers", {"slug": "gold", "name": "Gold"}, format="json"
        )
        # Then it acts with the user's role, the secret is never shown again, and it is audited
        assert response.status_code == 201
        assert AuditEntry.objects.get(object_type="tier").actor == "pat-product"
        assert "secret" not in api.get("/api/v1/tokens").json()["results"][0]
        assert AuditEntry.objects.filter(action=AuditAction.TOKEN_CREATE).count() == 1

    def test_api_token__revoked__401_and_audited(self, api, viewer_user):
        created = (
            api.as_user(viewer_user)
            .post("/api/v1/tokens", {"name": "script"}, format="json")
            .json()
        )
        assert api.delete(f"/api/v1/tokens/{created['id']}").status_code == 204
        response = type(api)().bearer(created["secret"]).get("/api/v1/tiers")
        assert response.status_code == 401
        assert AuditEntry.objects.filter(action=AuditAction.TOKEN_REVOKE).count() == 1

    def test_api_token__wrong_secret__401(self, api):
        assert type(api)().bearer("slu_nope").get("/api/v1/tiers").status_code == 401


class TestLists:
    def test_policies__filter_by_tier_and_kind__only_matching(self, api, viewer_user):
        pro = TierFactory(slug="pro")
        PolicyFactory(tier=pro)
        PolicyFactory(tier=TierFactory(slug="free"))
        PolicyFactory(override=True)
        api.as_user(viewer_user)
        by_tier = api.get("/api/v1/policies?tier=pro").json()
        overrides = api.get("/api/v1/policies?override=true").json()
        assert [p["tier"] for p in by_tier["results"]] == ["pro"]
        assert [p["scope"] for p in overrides["results"]] == ["tenant"]

    def test_tenants__paginated__count_next_and_limit(self, api, viewer_user):
        for n in range(5):
            TenantFactory(slug=f"t{n}")
        page = (
            api.as_user(viewer_user).get("/api/v1/tenants?limit=2&ordering=slug").json()
        )
        assert page["count"] == 5
        assert [t["slug"] for t in page["results"]] == ["t0", "t1"]
        assert "offset=2" in page["next"]

    def test_list__unknown_query_parameter__400_naming_it(self, api, viewer_user):
        response = api.as_user(viewer_user).get("/api/v1/policies?teir=pro")
        assert response.status_code == 400
        assert response.json()["fields"] == {"teir": ["Unknown query parameter."]}

    def test_audit__read_only_and_filtered(self, api, product_user):
        api.as_user(product_user).post(
            "/api/v1/tiers", {"slug": "pro", "name": "Pro"}, format="json"
        )
        entries = api.get("/api/v1/audit?object_type=tier&action=create").json()[
            "results"
        ]
        assert [e["object_repr"] for e in entries] == ["Pro"]
        assert api.post("/api/v1/audit", {}, format="json").status_code == 405
        assert api.delete(f"/api/v1/audit/{entries[0]['id']}").status_code == 405


def test_create__policy_with_hot_key_and_concurrent_limits__201_fields_echoed(
    api, product_user, pro_and_search
):
    # Given a product person
    api.as_user(product_user)
    body = _policy_body(
        limits=[
            {
                "dimension": "tenant",
                "rate": 900,
                "period": 1,
                "burst": 900,
                "shards": 3,
            },
            {
                "kind": "concurrent",
                "dimension": "tenant",
                "max_inflight": 4,
                "timeout": 30,
            },
        ]
    )
    # When they create a policy with a sharded bucket and a concurrency cap
    response = api.post("/api/v1/policies", body, format="json")
    # Then both are saved, and read back in words
    assert response.status_code == 201, response.json()
    limits = sorted(response.json()["limits"], key=lambda lim: lim["kind"])
    assert [(lim["kind"], lim["shards"], lim["max_inflight"]) for lim in limits] == [
        ("concurrent", 1, 4),
        ("rate", 3, None),
    ]
    assert limits[0]["description"] == (
        "per tenant: at most 4 in flight (released after 30 s at most)"
    )


def test_create__concurrent_limit_without_cap__400_naming_the_row(
    api, product_user, pro_and_search
):
    api.as_user(product_user)
    body = _policy_body(
        limits=[
            {"dimension": "tenant", "rate": 5, "period": 1, "burst": 5},
            {"kind": "concurrent", "dimension": "user"},
        ]
    )
    response = api.post("/api/v1/policies", body, format="json")
    assert response.status_code == 400
    assert "limit 2, max_inflight" in str(response.json())


def test_create__policy_with_a_sliding_window__201_and_read_back(
    api, product_user, pro_and_search
):
    # Given a product person
    api.as_user(product_user)
    window = {
        "kind": "sliding_window",
        "dimension": "user",
        "rate": 100,
        "period": 60,
        "cost": 2,
    }
    # When they create a policy holding 100 in any minute per user
    response = api.post(
        "/api/v1/policies", _policy_body(limits=[window]), format="json"
    )
    # Then it is saved as a sliding window, and read back with its kind and words
    assert response.status_code == 201, response.json()
    read = api.get(f"/api/v1/policies/{response.json()['id']}").json()
    (limit,) = read["limits"]
    assert {name: limit[name] for name in window} == window
    assert limit["burst"] is None
    assert (
        limit["description"]
        == "per user: 100 requests per minute, sliding window, cost 2"
    )


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"burst": 200}, "burst", "A sliding window has no burst"),
        ({"shards": 2}, "shards", "Shards are for rate limits"),
        ({"lease": 10}, "lease", "Leases are for rate limits"),
        ({"rate": None}, "rate", "A sliding window needs this"),
    ],
    ids=["burst", "shards", "lease", "no limit"],
)
def test_create__sliding_window_with_a_bucket_setting__400_naming_the_field(
    api, product_user, pro_and_search, extra, field, message
):
    api.as_user(product_user)
    window = {"kind": "sliding_window", "dimension": "user", "rate": 100, "period": 60}
    body = _policy_body(limits=[{**window, **extra}])
    response = api.post("/api/v1/policies", body, format="json")
    assert response.status_code == 400
    assert f"limit 1, {field}: {message}" in str(response.json())
    assert not Policy.objects.filter(tier__slug="pro").exists()
