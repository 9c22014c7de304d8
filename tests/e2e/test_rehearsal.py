"""A scheduled lowering rehearsed by a gateway, then in force: the rehearsal foretold it.

One fixed schedule of requests goes through two real limiters in lockstep, on
real Redis, with their decision events rolled up into Postgres by the real
aggregation: one gateway while the lowering is scheduled (rehearsed in shadow),
and one where the lowering has taken effect (it alone, in force), on a
database of its own so that their buckets are apart. Each request is decided by
both, one right after the other: the rehearsal and the truth see the same
arrivals, so a loaded machine that plays the schedule late or in bunches
changes both alike.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from limits.choices import Outcome
from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_get
from limits.models import DecisionMinute, Limit
from limits.publishing.services import snapshot_publish
from limits.traffic.rehearsal import rehearsal_figures
from limits.traffic.stats import decision_stream_aggregate
from sluice import Bundle, DecisionEvents, Limiter
from sluice.bucket import connect
from sluice.bundle import parse_bundle_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]

RATE, SECONDS = 150, 4.0  #: acme's traffic: 150 searches a second for 4 s
LOWERED = 50  #: the scheduled version's limit: 50 a second, burst 50


@pytest.fixture
def lowering(rules):
    """Version 1: pro searches at 1,000/s per tenant; version 2, scheduled a day
    later, lowers them to 50/s (burst 50)."""
    actor = Actor.system("test")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=1000, burst=1000)
    snapshot_publish(actor=actor, message="v1")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=LOWERED, burst=LOWERED)
    effective = timezone.now() + timedelta(days=1)
    snapshot_publish(actor=actor, message="lower pro", effective_at=effective)
    return parse_bundle_bytes(snapshot_bundle_get().body)


def send(*limiters: Limiter) -> list[list[bool]]:
    """The fixed schedule: request i at start + i / RATE (never sooner), decided by
    each of ``limiters`` in turn; what each answered, in order."""
    start, answers = time.monotonic(), [[] for _ in limiters]
    for i in range(int(RATE * SECONDS)):
        delay = start + i / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for limiter, answered in zip(limiters, answers, strict=True):
            answered.append(limiter.decide(route="search", tenant="acme").allowed)
    return answers


def limited(tenant: str) -> int:
    rows = DecisionMinute.objects.filter(tenant=tenant, outcome=Outcome.LIMITED)
    return rows.aggregate(n=Sum("count", default=0))["n"]


def test_rehearsal__lowering_scheduled_then_in_force__foretells_its_rejections(
    lowering, redis_server, redis_client
):
    # Given a gateway's limiter and decision events on real Redis, version 1 in
    # force and the lowering (version 2) scheduled, and a gateway where version 2
    # has taken effect, its buckets on another database
    client = connect(redis_server.url, timeout=1.0)
    in_force_client = connect(redis_server.url.removesuffix("/0") + "/1", timeout=1.0)
    in_force_client.flushdb()
    events = DecisionEvents(client, gateway_id="rehearsal-gw")
    since = timezone.now() - timedelta(minutes=1)
    rehearsing = Limiter(client, lowering, events=events)
    in_force = Limiter(  # version 2 alone: as once its time has come
        in_force_client, Bundle(lowering.scheduled[0]), events=events
    )
    # When acme's traffic goes through both, each request to one then the other
    before, after = send(rehearsing, in_force)
    events.flush()
    decision_stream_aggregate()
    # Then version 1 admitted everything, and the rehearsal counted every request
    # and what version 2 would have rejected
    assert all(before)
    (figure,) = rehearsal_figures(version=2, since=since)
    assert (figure.tenant, figure.route, figure.requests) == ("acme", "search", 600)
    foretold = figure.would_reject
    # and version 2 in force rejected what the rehearsal foretold, within 10 %
    real = limited("acme")
    assert real == after.count(False)
    print(f"rehearsal foretold {foretold} rejections; version 2 made {real}")
    assert real > 0
    assert abs(foretold - real) <= 0.1 * real
    # and nothing was rehearsed by the gateway with version 2 in force (none is
    # scheduled after it)
    assert rehearsal_figures(version=2, since=since)[0].requests == 600
    in_force_client.flushdb()
    in_force_client.close()
    client.close()
