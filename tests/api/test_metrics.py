"""GET /metrics, black box: Prometheus text with shared counters, optionally behind a token."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from limits.core.audit import Actor
from limits.gateways.counters import SNAPSHOT_POLLS, metric_increment
from limits.publishing.services import snapshot_publish
from limits.traffic.stats import decision_stream_aggregate
from sluice import STREAM_KEY

pytestmark = pytest.mark.django_db


def samples(response) -> dict[tuple[str, tuple], float]:
    text = response.content.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def add_entry(redis_client, *outcomes: str) -> None:
    events = [
        [1_767_225_600_000, "acme", "search", "default/*", 1, o, "", 1]
        for o in outcomes
    ]
    redis_client.xadd(
        STREAM_KEY, {"v": "1", "gw": "g", "dropped": "2", "events": json.dumps(events)}
    )


def test_metrics__traffic_polls_publishes__exposed_as_counters(client, redis_client):
    # Given aggregated decisions, gateway polls counted by the snapshot endpoint,
    # a publish, and one entry not aggregated yet
    add_entry(redis_client, "allowed", "limited", "limited", "fail_open")
    decision_stream_aggregate()
    metric_increment(SNAPSHOT_POLLS, labels={"result": "304"})
    metric_increment(SNAPSHOT_POLLS, labels={"result": "304"})
    metric_increment(SNAPSHOT_POLLS, labels={"result": "200"})
    snapshot_publish(actor=Actor.system("test"), message="v1")
    add_entry(redis_client, "allowed")
    # When Prometheus scrapes
    response = client.get("/metrics")
    # Then every counter is there, with its labels
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found = samples(response)
    decisions = "sluice_enforcement_decisions_total"
    assert found[(decisions, (("outcome", "limited"),))] == 2
    assert found[(decisions, (("outcome", "fail_open"),))] == 1
    assert found[(decisions, (("outcome", "local"),))] == 0
    assert found[("sluice_enforcement_events_dropped_total", ())] == 2
    assert found[("sluice_snapshot_polls_total", (("result", "304"),))] == 2
    assert found[("sluice_snapshot_polls_total", (("result", "200"),))] == 1
    assert found[("sluice_snapshot_publishes_total", (("kind", "publish"),))] == 1
    assert found[("sluice_stats_stream_lag_entries", ())] == 1
    assert found[("sluice_stats_stream_length_entries", ())] == 2


def test_metrics__token_set__401_without_it(client, settings):
    settings.SLUICE_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_metric_increment__unknown_counter__refused():
    with pytest.raises(ValueError, match="not a counter"):
        metric_increment("sluice_made_up_total")


@pytest.mark.parametrize(
    "meta",
    [
        {"REMOTE_ADDR": "203.0.113.9"},  # a public client, straight to gunicorn
        {"REMOTE_ADDR": "10.1.2.3"},  # another machine of the network
        # a reverse proxy on this machine, forwarding anyone's request
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "127.0.0.1"},
    ],
)
def test_metrics__no_token__remote_or_proxied_client__403(client, settings, meta):
    # Given the defaults: no metrics token
    settings.SLUICE_METRICS_TOKEN = ""
    # When a client not on this machine, or one behind a proxy, scrapes
    response = client.get("/metrics", **meta)
    # Then nothing is exposed, and the answer says how to allow a scraper
    assert response.status_code == 403
    assert "SLUICE_METRICS_TOKEN" in response.content.decode()


def test_metrics__no_token__loopback_or_configured_network__200(client, settings):
    settings.SLUICE_METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    # Prometheus in the operator's network, named in SLUICE_METRICS_NETWORKS
    settings.SLUICE_METRICS_NETWORKS = ["127.0.0.0/8", "10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    # through a proxy the control plane trusts, the forwarded client is judged
    settings.SLUICE_TRUSTED_PROXIES = ["127.0.0.1"]
    proxied = {"REMOTE_ADDR": "127.0.0.1"}
    assert (
        client.get("/metrics", HTTP_X_FORWARDED_FOR="10.9.9.9", **proxied).status_code
        == 200
    )
    assert (
        client.get(
            "/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9", **proxied
        ).status_code
        == 403
    )


def test_metrics__token_set__remote_client_with_it__200(client, settings):
    settings.SLUICE_METRICS_TOKEN = "s3cret"
    response = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer s3cret"
    )
    assert response.status_code == 200
