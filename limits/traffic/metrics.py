"""Prometheus metrics of the control plane (``GET /metrics``, the text format).

Every value comes from a store all web processes share, so any process answers
for the whole control plane (``docs/stats.md``):

=========================================== ====================================================
``sluice_enforcement_decisions_total``      decisions by ``outcome``, as aggregated from the
                                            decision stream (``StatCounter``, Postgres)
``sluice_enforcement_events_dropped_total`` events gateways dropped (full buffer, failed flush)
``sluice_stats_entries_lost_total``         stream entries trimmed before they were aggregated
``sluice_stats_events_malformed_total``     events that did not read as the format
``sluice_snapshot_polls_total``             gateway polls by ``result``: a Redis counter the
                                            snapshot endpoint adds to (``limits.gateways.counters``)
``sluice_snapshot_publishes_total``         published versions by ``kind`` (publish, rollback)
``sluice_stats_stream_lag_entries``         entries not yet read by the aggregation (gauge)
``sluice_stats_stream_pending_entries``     entries read and not yet acknowledged (gauge)
``sluice_stats_stream_length_entries``      entries in the stream (gauge)
=========================================== ====================================================
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import redis
from django.db.models import Count
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from limits.choices import Outcome
from limits.core.store import redis_client
from limits.gateways.counters import REDIS_COUNTERS
from limits.gateways.keys import COUNTERS_KEY, DECISION_GROUP, decision_stream
from limits.models import Snapshot, StatCounter

__all__ = ["metrics_render"]


def metrics_render() -> bytes:
    """The metrics in Prometheus' text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SluiceCollector())
    return generate_latest(registry)


class _SluiceCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _stat_counters()
        yield _publishes()
        try:
            client = redis_client()
            yield from _redis_counters(client)
            yield from _stream_gauges(client)
        except redis.RedisError:  # Postgres figures are still worth serving
            return


def _stat_counters() -> Iterator[Metric]:
    values = dict(StatCounter.objects.values_list("name", "value"))
    decisions = CounterMetricFamily(
        "sluice_enforcement_decisions",
        "Decisions by outcome, aggregated from the decision stream.",
        labels=["outcome"],
    )
    for outcome in Outcome.values:
        decisions.add_metric([outcome], values.get(f"decisions_{outcome}", 0))
    yield decisions
    for name, key, text in (
        (
            "sluice_enforcement_events_dropped",
            "events_dropped",
            "Events gateways dropped.",
        ),
        ("sluice_stats_entries_lost", "entries_lost", "Stream entries trimmed unread."),
        (
            "sluice_stats_events_malformed",
            "events_malformed",
            "Events not in the format.",
        ),
    ):
        yield CounterMetricFamily(name, text, value=values.get(key, 0))


def _publishes() -> Metric:
    family = CounterMetricFamily(
        "sluice_snapshot_publishes", "Versions published, by kind.", labels=["kind"]
    )
    for row in Snapshot.objects.values("kind").annotate(n=Count("id")).order_by("kind"):
        family.add_metric([row["kind"]], row["n"])
    return family


def _redis_counters(client: redis.Redis) -> Iterator[Metric]:
    stored = client.hgetall(COUNTERS_KEY)
    for name, text in REDIS_COUNTERS.items():
        rows = [[*json.loads(field), int(value)] for field, value in stored.items()]
        rows = [row for row in rows if row[0] == name]
        labels = sorted({key for _, found, _ in rows for key in found})
        family = CounterMetricFamily(name.removesuffix("_total"), text, labels=labels)
        for _, found, value in rows:
            family.add_metric([found.get(key, "") for key in labels], value)
        yield family


def _stream_gauges(client: redis.Redis) -> Iterator[Metric]:
    stream = decision_stream()
    length = client.xlen(stream)
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:  # no stream yet
        groups = []
    group = next(
        (g for g in groups if g["name"] in (DECISION_GROUP, DECISION_GROUP.encode())),
        {},
    )
    lag = group.get("lag")
    for name, text, value in (
        (
            "lag",
            "Entries not yet read by the aggregation.",
            length if lag is None else lag,
        ),
        ("pending", "Entries read and not yet acknowledged.", group.get("pending", 0)),
        ("length", "Entries in the decision stream.", length),
    ):
        yield GaugeMetricFamily(
            f"sluice_stats_stream_{name}_entries", text, value=value
        )
