"""The gateway endpoint as a contract: 200 with prepared bytes, 304 without a query, errors in JSON."""

import gzip
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_get
from limits.gateways.tokens import token_create, token_revoke
from limits.models import GatewayToken, Limit
from limits.publishing.services import snapshot_publish
from sluice.bundle import parse_bundle_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]

URL = "/api/v1/snapshot"


@pytest.fixture
def published(rules, redis_client, django_capture_on_commit_callbacks):
    """Version 1 of the `rules` working copy, active, with its bundle in Redis."""
    with django_capture_on_commit_callbacks(execute=True):
        return snapshot_publish(actor=Actor.system(), message="first")


@pytest.fixture
def gateway_secret(db):
    return token_create(token=GatewayToken(name="gw-eu-1"), actor=Actor.system())


def _poll(client, secret, **headers):
    headers = {"HTTP_SLUICE_GATEWAY_ID": "gw-eu-1", **headers}
    return client.get(URL, HTTP_AUTHORIZATION=f"Bearer {secret}", **headers)


def test_snapshot__first_poll__200_with_the_bundle_gateways_parse(
    client, published, gateway_secret
):
    # Given version 1 is active / When a gateway polls without an ETag
    response = _poll(client, gateway_secret)
    # Then it gets the bundle its client parses, with the stored document as is
    assert response.status_code == 200
    bundle = parse_bundle_bytes(response.content)
    assert bundle.active.version == 1
    assert bundle.scheduled == ()
    assert json.loads(response.content)["active"] == json.loads(
        bytes(published.content)
    )
    assert response["ETag"] == snapshot_bundle_get().etag


def test_snapshot__matching_if_none_match__304_without_queries(
    client, published, gateway_secret, django_assert_num_queries
):
    # Given a gateway that runs the active version (and whose token was seen once)
    etag = _poll(client, gateway_secret)["ETag"]
    # When it polls with that ETag
    with django_assert_num_queries(0):
        response = _poll(
            client,
            gateway_secret,
            HTTP_IF_NONE_MATCH=etag,
            HTTP_SLUICE_APPLIED_VERSION="1",
        )
    # Then, with the same validators a cache would get with the 200
    assert response.status_code == 304
    assert response["ETag"] == etag
    assert response.content == b""
    first = _poll(client, gateway_secret)
    assert response["Vary"] == first["Vary"]


def test_snapshot__gzip_asked__same_bytes_compressed(client, published, gateway_secret):
    plain = _poll(client, gateway_secret).content
    response = _poll(client, gateway_secret, HTTP_ACCEPT_ENCODING="gzip, br")
    assert response["Content-Encoding"] == "gzip"
    assert gzip.decompress(response.content) == plain


def test_snapshot__scheduled_version__carried_with_its_effective_time(
    client, published, gateway_secret, rules, django_capture_on_commit_callbacks
):
    # Given a lowering published to take effect tomorrow
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    tomorrow = timezone.now() + timedelta(days=1)
    with django_capture_on_commit_callbacks(execute=True):
        snapshot_publish(
            actor=Actor.system(), message="lower pro search", effective_at=tomorrow
        )
    # When a gateway polls
    bundle = parse_bundle_bytes(_poll(client, gateway_secret).content)
    # Then it has both, and switches by itself at the effective time
    assert bundle.active.version == 1
    assert [s.version for s in bundle.scheduled] == [2]
    assert bundle.in_force(tomorrow.timestamp() + 1).version == 2


def test_snapshot__etag_changes_when_a_version_is_scheduled(
    client, published, gateway_secret, rules, django_capture_on_commit_callbacks
):
    etag = _poll(client, gateway_secret)["ETag"]
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    with django_capture_on_commit_callbacks(execute=True):
        snapshot_publish(
            actor=Actor.system(),
            message="later",
            effective_at=timezone.now() + timedelta(days=1),
        )
    assert _poll(client, gateway_secret, HTTP_IF_NONE_MATCH=etag).status_code == 200


@pytest.mark.parametrize(
    ("authorization", "detail"),
    [
        (None, "gateway token is required"),
        ("Bearer slg_wrong", "Invalid or revoked"),
        ("Basic abc", "required"),
    ],
)
def test_snapshot__no_or_wrong_token__401_json(
    client, published, authorization, detail
):
    headers = {"HTTP_SLUICE_GATEWAY_ID": "gw"}
    if authorization:
        headers["HTTP_AUTHORIZATION"] = authorization
    response = client.get(URL, **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert detail in response.json()["detail"]


def test_snapshot__revoked_token__401(
    client, published, django_capture_on_commit_callbacks
):
    token = GatewayToken(name="gw")
    secret = token_create(token=token, actor=Actor.system())
    assert _poll(client, secret).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        token_revoke(token=token, actor=Actor.system())
    assert _poll(client, secret).status_code == 401


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"HTTP_SLUICE_GATEWAY_ID": "has space"}, "Sluice-Gateway-Id"),
        ({"HTTP_SLUICE_GATEWAY_ID": ""}, "Sluice-Gateway-Id"),
        ({"HTTP_SLUICE_APPLIED_VERSION": "v3"}, "Sluice-Applied-Version"),
        ({"HTTP_SLUICE_REJECTED_VERSION": "-1"}, "Sluice-Rejected-Version"),
        ({"HTTP_SLUICE_REHEARSED_VERSION": "next"}, "Sluice-Rehearsed-Version"),
    ],
)
def test_snapshot__malformed_header__400_naming_it(
    client, published, gateway_secret, headers, field
):
    response = _poll(client, gateway_secret, **headers)
    assert response.status_code == 400
    assert field in response.json()["fields"]


def test_snapshot__unknown_query_parameter__400(client, published, gateway_secret):
    response = client.get(
        URL + "?version=3",
        HTTP_AUTHORIZATION=f"Bearer {gateway_secret}",
        HTTP_SLUICE_GATEWAY_ID="gw",
    )
    assert response.status_code == 400
    assert response.json()["fields"] == {"version": ["Unknown query parameter."]}


def test_snapshot__nothing_published__503_json(client, gateway_secret, redis_client):
    response = _poll(client, gateway_secret)
    assert response.status_code == 503
    assert response.json()["error"] == "nothing_published"


def test_snapshot_document__gateway_token__reads_one_version(
    client, published, gateway_secret
):
    response = client.get(
        "/api/v1/snapshots/1", HTTP_AUTHORIZATION=f"Bearer {gateway_secret}"
    )
    assert response.status_code == 200
    assert response.content == bytes(published.content)
    assert response["ETag"] == f'"{published.hash}"'
    assert (
        client.get(
            "/api/v1/snapshots/9", HTTP_AUTHORIZATION=f"Bearer {gateway_secret}"
        ).status_code
        == 404
    )


@pytest.mark.parametrize(
    "url", ["/api/v1/tiers", "/api/v1/fleet", "/api/v1/snapshots", "/api/v1/audit"]
)
def test_gateway_token__management_endpoints__403(
    client, published, gateway_secret, url
):
    assert (
        client.get(url, HTTP_AUTHORIZATION=f"Bearer {gateway_secret}").status_code
        == 403
    )


def test_fleet__after_polls__each_gateway_with_its_version_and_state(
    client, published, gateway_secret, viewer_user
):
    # Given one gateway in sync and one that rejected the bundle
    _poll(client, gateway_secret, HTTP_SLUICE_APPLIED_VERSION="1")
    _poll(
        client,
        gateway_secret,
        HTTP_SLUICE_GATEWAY_ID="gw-us-2",
        HTTP_SLUICE_REJECTED_VERSION="1",
        HTTP_SLUICE_REJECTED_REASON="hash mismatch",
    )
    client.force_login(viewer_user)
    # When a person reads the fleet from the API and the admin
    fleet = client.get("/api/v1/fleet").json()
    page = client.get(reverse("admin:limits_fleet")).content.decode()
    # Then both show every gateway with its state and the versions in use
    states = {g["gateway"]: (g["state"], g["applied"]) for g in fleet["gateways"]}
    assert states == {"gw-eu-1": ("in sync", 1), "gw-us-2": ("error", None)}
    assert fleet["active_version"] == 1
    assert {"version": 1, "gateways": 1} in fleet["versions"]
    assert "gw-eu-1" in page
    assert "hash mismatch" in page
    assert all(g["token"] == gateway_secret[:12] for g in fleet["gateways"])


def test_fleet__gateway_rehearses_a_scheduled_version__shown_per_version(
    client,
    published,
    gateway_secret,
    viewer_user,
    rules,
    django_capture_on_commit_callbacks,
):
    # Given a lowering scheduled as version 2 (a gateway may only name a published
    # version), two gateways that say they rehearse it, and one that rehearses none
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    with django_capture_on_commit_callbacks(execute=True):
        snapshot_publish(
            actor=Actor.system(),
            message="lower pro search",
            effective_at=timezone.now() + timedelta(days=1),
        )
    for gateway in ("gw-eu-1", "gw-us-2"):
        _poll(
            client,
            gateway_secret,
            HTTP_SLUICE_GATEWAY_ID=gateway,
            HTTP_SLUICE_APPLIED_VERSION="1",
            HTTP_SLUICE_REHEARSED_VERSION="2",
        )
    _poll(
        client,
        gateway_secret,
        HTTP_SLUICE_GATEWAY_ID="gw-old",
        HTTP_SLUICE_APPLIED_VERSION="1",
    )
    client.force_login(viewer_user)
    # When a person reads the fleet from the API and the admin
    fleet = client.get("/api/v1/fleet").json()
    page = client.get(reverse("admin:limits_fleet")).content.decode()
    # Then both say which gateways rehearse version 2
    rehearsed = {g["gateway"]: g["rehearsed"] for g in fleet["gateways"]}
    assert rehearsed == {"gw-eu-1": 2, "gw-us-2": 2, "gw-old": None}
    assert fleet["rehearsals"] == [{"version": 2, "gateways": ["gw-eu-1", "gw-us-2"]}]
    assert "<td>2</td><td>2: gw-eu-1, gw-us-2</td>" in page


def test_snapshot__polls__counted_by_result_on_the_metrics_endpoint(
    client, published, gateway_secret, settings
):
    # Given polls counted at once (no poll window), a first poll (200), an up-to-date
    # poll (304) and one with a wrong token (401)
    settings.SLUICE_POLL_WINDOW_MS = 0
    etag = _poll(client, gateway_secret)["ETag"]
    _poll(client, gateway_secret, HTTP_IF_NONE_MATCH=etag)
    _poll(client, "slg_wrong")
    # When Prometheus scrapes the control plane
    text = client.get("/metrics").content.decode()
    # Then each poll is counted once, under its result
    for result in ("200", "304", "401"):
        assert f'sluice_snapshot_polls_total{{result="{result}"}} 1.0' in text


@pytest.mark.parametrize(
    "if_none_match",
    [
        "W/{etag}",
        '"older", {etag}',
        '"older", W/{etag}',
        'W/"older",W/{etag} , "other"',
        "*",
    ],
)
@pytest.mark.parametrize("window_ms", [1000, 0])
def test_snapshot__if_none_match_weak_list_or_star__304(
    client, published, gateway_secret, settings, if_none_match, window_ms
):
    # Given a gateway that received the bundle, with or without the poll window
    settings.SLUICE_POLL_WINDOW_MS = window_ms
    etag = _poll(client, gateway_secret)["ETag"]
    # When it polls with the ETag marked weak, within a list, or with *
    response = _poll(
        client, gateway_secret, HTTP_IF_NONE_MATCH=if_none_match.format(etag=etag)
    )
    # Then the weak comparison of RFC 9110 (13.1.2) matches: 304 with the strong ETag
    assert response.status_code == 304
    assert response["ETag"] == etag


@pytest.mark.parametrize(
    "if_none_match", ['"older"', 'W/"older", "other"', "{bare}", 'W/"{bare}x"']
)
def test_snapshot__if_none_match_without_the_etag__200(
    client, published, gateway_secret, if_none_match
):
    # Given the current ETag / When a gateway holds other tags (or an unquoted one)
    etag = _poll(client, gateway_secret)["ETag"]
    header = if_none_match.format(bare=etag.strip('"'))
    response = _poll(client, gateway_secret, HTTP_IF_NONE_MATCH=header)
    # Then it gets the bundle
    assert response.status_code == 200
    assert response["ETag"] == etag
