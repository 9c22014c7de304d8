"""Publishing from automation: versions, publish, rollback, diff and explain over HTTP."""

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import AuditAction
from limits.models import AuditEntry, GatewayToken, Limit, Snapshot

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("no_notice_period", "no_approval_rule"),
]


@pytest.fixture
def product_api(api, product_user, redis_client):
    return api.as_user(product_user)


def _publish(api, **body):
    return api.post(
        "/api/v1/snapshots/publish", {"message": "ci publish", **body}, format="json"
    )


def test_publish__working_copy__201_version_with_etag_and_audit(product_api, rules):
    response = _publish(product_api)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["version"], body["status"], body["kind"]) == (1, "active", "publish")
    assert response["ETag"] == body["etag"]
    assert AuditEntry.objects.filter(action=AuditAction.PUBLISH).count() == 1


def test_publish__unchanged_rules__400_saying_so(product_api, rules):
    _publish(product_api)
    response = _publish(product_api)
    assert response.status_code == 400
    assert (
        "nothing" in str(response.json()).lower()
        or "unchanged" in str(response.json()).lower()
    )
    assert Snapshot.objects.count() == 1


def test_publish__invalid_rules__400_naming_object_and_nothing_stored(
    product_api, rules
):
    # Given a route whose cost is above a policy's burst, written behind the service's back
    rules["search"].__class__.objects.filter(pk=rules["search"].pk).update(cost=500)
    response = _publish(product_api)
    assert response.status_code == 400
    assert "below the request cost 500" in str(response.json())
    assert not Snapshot.objects.exists()


def test_publish__future_effective_time__scheduled(product_api, rules):
    later = (timezone.now() + timedelta(days=2)).isoformat()
    _publish(product_api)
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    response = _publish(product_api, effective_at=later)
    assert response.json()["status"] == "scheduled"
    listing = product_api.get("/api/v1/snapshots").json()["results"]
    assert [(v["version"], v["status"]) for v in listing] == [
        (2, "scheduled"),
        (1, "active"),
    ]


@pytest.mark.parametrize("role", ["support", "viewer"])
def test_publish__not_product__403(api, request, rules, redis_client, role):
    api.as_user(request.getfixturevalue(f"{role}_user"))
    assert _publish(api).status_code == 403
    assert not Snapshot.objects.exists()


def test_rollback__earlier_version__new_version_with_its_rules(product_api, rules):
    _publish(product_api)
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=70, burst=140)
    _publish(product_api)
    response = product_api.post(
        "/api/v1/snapshots/1/rollback", {"message": "too generous"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert (response.json()["version"], response.json()["restored_version"]) == (3, 1)
    assert (
        Limit.objects.get(policy=rules["pro_search"]).rate == 50
    )  # the working copy follows


def test_rollback__unknown_version__4xx(product_api, rules):
    _publish(product_api)
    response = product_api.post(
        "/api/v1/snapshots/9/rollback", {"message": "x"}, format="json"
    )
    assert response.status_code in (400, 404)


def test_diff__working_copy_against_active__classified_changes(product_api, rules):
    _publish(product_api)
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    diff = product_api.get("/api/v1/snapshots/diff?old=active&new=working").json()
    (change,) = diff["changes"]
    assert change["kind"] == "lowered"
    assert diff["lowers"] is True
    assert "acme" in diff["affected"]["tenants"]
    assert "50 / s, burst 100 → 20 / s, burst 40" in change["text"]


@pytest.mark.parametrize("query", ["old=banana", "new=-1", "colour=blue"])
def test_diff__bad_query__400(product_api, rules, query):
    assert product_api.get(f"/api/v1/snapshots/diff?{query}").status_code == 400


def test_explain__tenant_and_path__policy_keys_and_what_it_beat(product_api, rules):
    _publish(product_api)
    body = product_api.get(
        "/api/v1/explain?tenant=acme&method=GET&path=/v1/search&ip=203.0.113.9"
    ).json()
    assert body["policy"]["description"] == "tier pro · search"
    assert body["level"] == "tier · route"
    assert [k["key"] for k in body["keys"]] == [
        "rl:{tenant:acme}:route:search:tenant:acme:1s"
    ]
    assert [b["description"] for b in body["beaten"]] == ["default · all routes"]


def test_explain__working_copy_before_any_publish__answers(product_api, rules):
    body = product_api.get(
        "/api/v1/explain?tenant=initech&route=search&source=working"
    ).json()
    assert body["version"] is None
    assert body["policy"]["description"] == "tier free · all routes"


def test_explain__nothing_published__400_saying_so(product_api, rules):
    response = product_api.get("/api/v1/explain?tenant=acme&route=search")
    assert response.status_code == 400
    assert "Nothing has been published" in str(response.json())


def test_gateway_tokens__product_creates_viewer_reads_secret_once(
    api, product_user, viewer_user
):
    created = api.as_user(product_user).post(
        "/api/v1/gateway-tokens", {"name": "gw-1"}, format="json"
    )
    assert created.status_code == 201
    assert created.json()["secret"].startswith("slg_")
    listing = api.as_user(viewer_user).get("/api/v1/gateway-tokens").json()["results"]
    assert [t["name"] for t in listing] == ["gw-1"]
    assert "secret" not in listing[0]
    assert (
        api.post("/api/v1/gateway-tokens", {"name": "x"}, format="json").status_code
        == 403
    )
    assert api.delete(f"/api/v1/gateway-tokens/{listing[0]['id']}").status_code == 403
    api.as_user(product_user).delete(f"/api/v1/gateway-tokens/{listing[0]['id']}")
    assert GatewayToken.objects.get().revoked_at is not None


def test_publish__note_and_emergency_reason__reach_the_announcement(
    product_api, rules, settings
):
    # Given a lowering, and the notice period in force
    settings.SLUICE_NOTICE_PERIOD_DAYS = 14
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    # When it is published now, as an emergency, with a note for customers
    response = _publish(
        product_api, note="Abuse from one network.", emergency_reason="incident 99"
    )
    # Then the version takes effect now and its announcement carries both
    assert response.status_code == 201, response.content
    announcement = Snapshot.objects.get(version=1).announcement
    assert announcement.note == "Abuse from one network."
    assert announcement.emergency_reason == "incident 99"


def test_versions__paginated__limit_and_offset_accepted(product_api, rules):
    _publish(product_api)
    page = product_api.get("/api/v1/snapshots?limit=1&offset=0").json()
    assert (page["count"], [v["version"] for v in page["results"]]) == (1, [1])


def test_explain__at_a_second__why_the_tenant_was_rejected_then(product_api, rules):
    # Given version 1, and initech's recorded traffic: 12 requests in one second
    from limits.models import DecisionPeak

    published = Snapshot.objects.get(version=_publish(product_api).json()["version"])
    at = published.effective_at.replace(second=30, microsecond=0) + timedelta(minutes=1)
    seconds = [0] * 60
    seconds[30] = 12
    DecisionPeak.objects.create(
        minute=at.replace(second=0),
        tenant="initech",
        route="search",
        count=12,
        peak=12,
        seconds=seconds,
    )
    # When automation asks why initech got a 429 at that second
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    body = product_api.get(
        f"/api/v1/explain?tenant=initech&route=search&at={stamp}&limit=tenant-s"
    ).json()
    # Then the version then in force, the rejecting limit, and what would have admitted it
    rejection = body["rejection"]
    assert rejection["version"] == 1
    assert rejection["requests"] == 12
    (verdict,) = rejection["verdicts"]
    assert verdict["rejected"] is True
    assert verdict["words"] == "5 requests per second per account, bursts of 10"
    assert (verdict["allowed_then"], verdict["burst_needed"]) == (10, 12)
    assert body["policy"]["limits"][0]["public_name"] == "Rate limit per account"
    assert rejection["windows"] == []


def test_explain__sliding_window_at_a_second__judged_as_a_window(product_api, rules):
    # Given initech's free tier holds 5 in any second, and 12 requests in one second
    from limits.models import DecisionPeak

    Limit.objects.filter(policy__tier=rules["free"]).update(
        kind="sliding_window", burst=None
    )
    published = Snapshot.objects.get(version=_publish(product_api).json()["version"])
    at = published.effective_at.replace(second=30, microsecond=0) + timedelta(minutes=1)
    seconds = [0] * 60
    seconds[30] = 12
    DecisionPeak.objects.create(
        minute=at.replace(second=0),
        tenant="initech",
        route="search",
        count=12,
        peak=12,
        seconds=seconds,
    )
    # When automation asks why initech got a 429 at that second
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    body = product_api.get(
        f"/api/v1/explain?tenant=initech&route=search&at={stamp}"
    ).json()
    # Then the window, not a bucket, and the limit that would have admitted them
    rejection = body["rejection"]
    assert rejection["verdicts"] == []
    (window,) = rejection["windows"]
    assert window["words"] == "5 requests in any second per account"
    assert (window["rejected"], window["busiest"], window["admits"]) == (True, 12, 5)
    assert window["limit_needed"] == 12


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("tenant=initech&route=search&at=yesterday", "at"),
        ("route=search&at=2026-12-03T14:03:07Z", "tenant"),
        ("tenant=initech&route=search&at=2000-01-01T00:00:00Z", "at"),
    ],
)
def test_explain__bad_time_or_no_tenant__400_naming_the_field(
    product_api, rules, query, field
):
    _publish(product_api)
    response = product_api.get(f"/api/v1/explain?{query}")
    assert response.status_code == 400
    assert field in response.content.decode()
