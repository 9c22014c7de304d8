"""Traffic through the demo gateway shows on the dashboards: a real worker and beat aggregate it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db.models import Sum

from gateway.traffic import Plan, generate
from limits.choices import Outcome
from limits.models import DecisionMinute
from tests.celery_fixtures import wait_until
from tests.servers import DemoGatewayServer

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo_gateway(redis_server, redis_client, tmp_path):
    """The demo gateway (gunicorn) on a free port, its rules from the published bundle's file."""
    call_command("seed_demo")  # also publishes the demo rules as version 1
    bundle = tmp_path / "bundle.json"
    call_command("gateway_bundle", output=str(bundle))
    server = DemoGatewayServer(
        {
            "SLUICE_BUNDLE_FILE": str(bundle),
            "SLUICE_GATEWAY_ID": "e2e-gw",
            "SLUICE_REDIS_URL": redis_server.url,
            "SLUICE_REDIS_TIMEOUT": "1.0",  # counts must not depend on a busy machine
        }
    ).start()
    yield server.url
    server.stop()


def decided() -> int:
    return DecisionMinute.objects.aggregate(n=Sum("count", default=0))["n"]


def test_traffic__through_the_demo_gateway__on_the_dashboards_within_a_minute(
    demo_gateway, celery_worker, celery_beat, admin_client
):
    # Given the demo gateway, a Celery worker, and beat rolling the stream up every second
    url = demo_gateway
    # When the traffic generator sends 3 s of skewed traffic from five tenants
    report = generate(Plan(gateway=url, rate=100, seconds=3, workers=4, seed=11))
    answered = report.sent - sum(codes[0] for codes in report.statuses.values())
    # Then within a minute every decision is counted, exactly once
    wait_until(
        lambda: decided() == answered,
        why=f"{answered} decisions counted, not {decided()}\n{celery_worker.output()[-3000:]}",
    )
    limited = dict(
        DecisionMinute.objects.filter(outcome=Outcome.LIMITED)
        .values_list("tenant")
        .annotate(n=Sum("count"))
    )
    sent_429 = {t: codes[429] for t, codes in report.statuses.items() if codes[429]}
    assert limited == sent_429
    # and the dashboard shows the most limited tenant, with a link to its rejections
    top = max(limited, key=limited.get)
    page = admin_client.get("/admin/limits/decisionminute/").content.decode()
    assert f"/admin/limits/decisionminute/tenant/{top}/" in page
    tenant_page = admin_client.get(f"/admin/limits/decisionminute/tenant/{top}/")
    assert "e2e-gw" in tenant_page.content.decode()
