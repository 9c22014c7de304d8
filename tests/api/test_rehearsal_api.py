"""A scheduled version's rehearsal figures over the API and on its admin page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_get
from limits.models import Limit, Snapshot
from limits.publishing.services import snapshot_publish
from limits.traffic.stats import decision_stream_aggregate
from sluice import DecisionEvents, Limiter
from sluice.bucket import connect
from sluice.bundle import parse_bundle_bytes
from tests.conftest import PATIENT_REDIS_TIMEOUT

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]


@pytest.fixture
def rehearsed(rules, redis_server, redis_client):
    """Version 2 lowers pro searches to 3 per minute (burst 3), scheduled in a day;
    a gateway rehearsing it saw acme search 5 times and globex once."""
    actor = Actor.system("test")
    snapshot_publish(actor=actor, message="v1")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=3, burst=3, period=60)
    snapshot_publish(
        actor=actor, message="lower", effective_at=timezone.now() + timedelta(days=1)
    )
    bundle = parse_bundle_bytes(snapshot_bundle_get().body)
    client = connect(redis_server.url, timeout=PATIENT_REDIS_TIMEOUT)  # not its speed
    events = DecisionEvents(client, gateway_id="gw-r")
    limiter = Limiter(client, bundle, events=events)
    for _ in range(5):
        limiter.decide(route="search", tenant="acme")
    limiter.decide(route="search", tenant="initech")  # free tier: unchanged
    events.flush()
    decision_stream_aggregate()
    client.close()
    return Snapshot.objects.get(version=2)


def test_rehearsal__scheduled_version__figures_per_tenant_and_route(
    client, rehearsed, viewer_user
):
    # Given a viewer / When they read version 2's rehearsal
    client.force_login(viewer_user)
    body = client.get("/api/v1/snapshots/2/rehearsal").json()
    # Then acme's searches are there, 2 of 5 would be rejected; initech's policy
    # does not change, so it was not rehearsed
    assert body["version"] == 2
    assert body["figures"] == [
        {"tenant": "acme", "route": "search", "requests": 5, "would_reject": 2}
    ]


@pytest.mark.parametrize(
    ("query", "figures"),
    [("?tenant=globex", []), ("?since=2999-01-01T00:00:00Z", [])],
)
def test_rehearsal__filtered__only_what_matches(
    client, rehearsed, viewer_user, query, figures
):
    client.force_login(viewer_user)
    assert (
        client.get(f"/api/v1/snapshots/2/rehearsal{query}").json()["figures"] == figures
    )


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("/api/v1/snapshots/9/rehearsal", 404),
        ("/api/v1/snapshots/2/rehearsal?x=1", 400),
    ],
)
def test_rehearsal__unknown_version_or_parameter__error(
    client, rehearsed, viewer_user, url, code
):
    client.force_login(viewer_user)
    assert client.get(url).status_code == code


def tight(html: bytes) -> str:
    """The HTML without the white space between tags."""
    return re.sub(r">\s+<", "><", html.decode())


def test_version_page__scheduled_version__shows_would_be_rejections_and_refreshes(
    client, rehearsed, viewer_user
):
    # Given a viewer / When they open version 2's page, and the table it reloads
    client.force_login(viewer_user)
    page = client.get(reverse("admin:limits_snapshot_change", args=[rehearsed.pk]))
    table = client.get(reverse("admin:limits_snapshot_rehearsal", args=[2]))
    # Then both show acme's searches: 2 of 5 would be rejected, in the last hour and day
    row = (
        "<td>acme</td><td>search</td><td><strong>2</strong></td><td>5</td>"
        "<td><strong>2</strong></td><td>5</td>"
    )
    assert row in tight(page.content)
    assert row in tight(table.content)
    # and the page reloads the table as traffic flows
    assert 'data-refresh="/admin/limits/snapshot/2/rehearsal/"' in page.content.decode()


def test_version_page__active_version__no_rehearsal_table(
    client, rehearsed, viewer_user
):
    client.force_login(viewer_user)
    v1 = Snapshot.objects.get(version=1)
    page = client.get(reverse("admin:limits_snapshot_change", args=[v1.pk]))
    assert page.status_code == 200
    assert "Rehearsal by the gateways" not in page.content.decode()


def test_home__scheduled_version_rehearsed__says_whom_it_would_hit(
    client, rehearsed, viewer_user
):
    # Given a viewer / When they open the admin's home page
    client.force_login(viewer_user)
    page = client.get("/admin/").content.decode()
    # Then the scheduled version says what its rehearsal saw in the last day
    assert "would reject 2 of 5 requests in the last day (1 tenant)" in page
