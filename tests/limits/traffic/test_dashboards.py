"""The traffic dashboards: selectors over the rollups, and the admin pages viewers read."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import Outcome
from limits.models import DecisionMinute, Rejection, StatCounter
from limits.traffic import dashboards

pytestmark = pytest.mark.django_db


@pytest.fixture
def now():
    return timezone.now().replace(second=30, microsecond=0)


def counted(minute, tenant, route, outcome, count):
    DecisionMinute.objects.create(
        minute=minute.replace(second=0),
        tenant=tenant,
        route=route,
        outcome=outcome,
        count=count,
    )


@pytest.fixture
def traffic(now):
    """Acme limited on search in the last hour; globex two hours ago; some fail-open."""
    for ago, limited in ((1, 30), (5, 10)):
        counted(
            now - timedelta(minutes=ago), "acme", "search", Outcome.LIMITED, limited
        )
        counted(now - timedelta(minutes=ago), "acme", "search", Outcome.ALLOWED, 60)
    counted(now - timedelta(minutes=3), "", "orders.read", Outcome.LIMITED, 2)
    counted(now - timedelta(hours=2), "globex", "orders.read", Outcome.LIMITED, 99)
    counted(now - timedelta(minutes=2), "initech", "search", Outcome.FAIL_OPEN, 9)
    counted(now - timedelta(minutes=2), "initech", "search", Outcome.ALLOWED, 81)
    Rejection.objects.create(
        at=now,
        tenant="acme",
        route="search",
        policy="tier:pro/search",
        limit="tenant-min",
        dimension="tenant",
        snapshot_version=3,
        gateway="gw-1",
    )


def test_limited_series__last_hour__one_line_per_tenant_zeros_filled(traffic, now):
    series = dashboards.limited_series(
        by="tenant", since=now - timedelta(hours=1), until=now
    )
    assert len(series.minutes) == 61
    assert set(series.lines) == {"acme", "(anonymous)"}
    assert sum(series.lines["acme"]) == 40
    assert series.lines["acme"][-2] == 30  # a minute ago


def test_most_limited_tenants__hour_and_day__ranked_with_share(traffic, now):
    hour = dashboards.most_limited_tenants(since=now - timedelta(hours=1))
    day = dashboards.most_limited_tenants(since=now - timedelta(days=1))
    assert [(r.tenant, r.limited, r.total) for r in hour] == [
        ("acme", 40, 160),
        ("", 2, 2),
    ]
    assert day[0].tenant == "globex"
    assert hour[0].share == 0.25


def test_fail_open_share__last_hour__part_of_all_decisions(traffic, now):
    share = dashboards.fail_open_share(since=now - timedelta(hours=1))
    assert (share.part, share.total) == (9, 252)


def test_dashboard_page__gateway_timeouts__counted_apart_from_fail_open(
    client, viewer, traffic, now
):
    # Given a gateway stopped waiting for 4 decisions in the last hour (its own
    # failure behaviour answered them), and 7 two hours ago
    counted(now - timedelta(minutes=4), "acme", "search", Outcome.GATEWAY_TIMEOUT, 4)
    counted(now - timedelta(hours=2), "acme", "search", Outcome.GATEWAY_TIMEOUT, 7)
    # When a viewer opens the traffic dashboard
    client.force_login(viewer)
    page = client.get("/admin/limits/decisionminute/").content.decode()
    # Then the hour's 4 show on their own line, and the fail-open share is unchanged
    share = dashboards.gateway_timeout_share(since=now - timedelta(hours=1))
    assert (share.part, share.total) == (4, 256)
    line = page[page.index('id="gateway-timeouts"') :].split("</p>")[0]
    assert '<span class="sluice-figure warn">4</span>' in line
    assert dashboards.fail_open_share(since=now - timedelta(hours=1)).part == 9


def test_dashboard_page__viewer__charts_tables_and_share(client, viewer, traffic):
    # Given a viewer / When they open the traffic dashboard
    client.force_login(viewer)
    response = client.get("/admin/limits/decisionminute/")
    # Then charts are inline SVG, tables rank tenants, and the fail-open share shows
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count('<svg class="sluice-chart"') == 2
    assert 'aria-label="Limited requests per minute, by tenant"' in page
    assert "acme" in page
    assert "/admin/limits/decisionminute/tenant/acme/" in page
    assert "/admin/limits/decisionminute/tenant/~/" in page  # anonymous traffic
    assert "3.57 %" in page  # 9 fail-open of 252 decisions
    assert '<meta http-equiv="refresh" content="30">' in page


def test_dashboard_page__gateways_dropped_events__count_shown(client, viewer, traffic):
    # Given the aggregation counted events gateways dropped, and trimmed entries
    StatCounter.objects.create(name="events_dropped", value=1580)
    StatCounter.objects.create(name="entries_lost", value=2)
    # When a viewer opens the dashboard
    client.force_login(viewer)
    page = client.get("/admin/limits/decisionminute/").content.decode()
    # Then the loss is on it, flagged
    lost = page[page.index('id="events-lost"') :]
    assert '<span class="sluice-figure warn">1580</span>' in lost
    assert "2 stream entries trimmed" in lost


def test_dashboard_page__assets__all_local(client, viewer, traffic):
    client.force_login(viewer)
    page = client.get("/admin/limits/decisionminute/").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert not [s for s in sources if s.startswith(("http:", "https:", "//"))]
    assert "/static/limits/dashboards.css" in sources


def test_tenant_page__recent_rejections_and_limits(client, viewer, traffic):
    client.force_login(viewer)
    response = client.get("/admin/limits/decisionminute/tenant/acme/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "Recent rejections of acme" in page
    assert "<code>tenant-min</code>: 1" in page
    assert "tier:pro/search" in page


def test_dashboard_page__hostile_tenant_name__escaped(client, viewer, now):
    counted(now, "<script>x</script>", "search", Outcome.LIMITED, 1)
    client.force_login(viewer)
    page = client.get("/admin/limits/decisionminute/").content.decode()
    assert "<script>x</script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page


def test_stats_models__in_the_admin__read_only(client, product, traffic):
    client.force_login(product)
    assert client.get("/admin/limits/rejection/").status_code == 200
    assert client.get("/admin/limits/rejection/add/").status_code == 403
    assert client.get("/admin/limits/decisionminute/add/").status_code == 403


def test_scheduled_hardest_hit__lowering_in_notice__tenants_it_would_limit_first(
    rules, redis_client, admin_client
):
    # Given version 1; acme searched 30 a second for 20 s an hour ago, globex (its own
    # search policy) too; and a lowering of pro search to 20/s scheduled in 15 days
    from limits.core.audit import Actor
    from limits.publishing.services import snapshot_publish
    from tests.limits.announce_fixtures import lower_pro_search
    from tests.recorded import record

    snapshot_publish(actor=Actor.system(), message="v1")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    record("acme", "search", an_hour_ago, [30] * 20)
    record("globex", "search", an_hour_ago, [30] * 20)
    lower_pro_search(rules)
    scheduled = snapshot_publish(
        actor=Actor.system(),
        message="lower",
        effective_at=timezone.now() + timedelta(days=15),
    )
    # When the call list is read
    hits = dashboards.scheduled_hardest_hit()
    # Then acme tops it with what the lowering would have rejected; globex is not hit
    (hit,) = hits
    assert (hit.tenant, hit.version, hit.requests) == ("acme", scheduled.version, 600)
    assert 150 <= hit.rejected_new <= 200
    # and the dashboard shows it
    html = admin_client.get("/admin/limits/decisionminute/").content.decode()
    section = html.split('id="hardest-hit"')[1].split("</section>")[0]
    assert "acme" in section
    assert f"<strong>{hit.rejected_new}</strong>" in section
    assert "globex" not in section
