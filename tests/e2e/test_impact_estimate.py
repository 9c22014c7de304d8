"""The impact estimate against the truth: one schedule of real decisions, recorded, and
what the lowered rules really rejected of it.

A ``Limiter`` running the lowered rules decides a bursty schedule of acme's
searches against the suite's private Redis; its decision events go through the
stream and the real aggregation into Postgres. The estimate of the lowering from
that recording (which counts every request that came, whatever it was answered)
is then compared with the rejections the same requests really got. Estimate and
truth see the very same arrivals: a loaded machine that plays the schedule late
or in bunches changes both alike, so the verdict is about the estimate, not
about how punctually the machine played the schedule.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from limits.diff.diffing import rules_diff
from limits.models import DecisionPeak
from limits.traffic.estimate import impact_estimate
from limits.traffic.stats import decision_stream_aggregate
from sluice import DecisionEvents, Limiter, Outcome
from sluice.bucket import connect
from tests.client.factories import limit, policy, rules, snapshot

pytestmark = pytest.mark.django_db

IN_FORCE = rules(policy("tier:pro", "search", limit("tenant", 100, 1, 200)))
#: 15 a second with a burst of 20, and 300 a minute
LOWERED = rules(
    policy(
        "tier:pro",
        "search",
        limit("tenant", 15, 1, 20),
        limit("tenant", 300, 60, 300),
    )
)


def bursty_schedule(seconds: int, seed: int) -> list[float]:
    """Offsets (s) of acme's searches: busy stretches of 4 to 9 s at 30 to 50 a second
    between quiet ones of 2 to 5 s at up to 5 a second, arrivals at random."""
    rng = random.Random(seed)
    offsets, start, busy = [], 0.0, False
    while start < seconds:
        length = rng.uniform(4, 9) if busy else rng.uniform(2, 5)
        rate = rng.uniform(30, 50) if busy else rng.uniform(0, 5)
        offsets += [start + rng.random() * length for _ in range(int(rate * length))]
        start, busy = start + length, not busy
    return sorted(offset for offset in offsets if offset < seconds)


def run(limiter: Limiter, offsets: list[float]) -> int:
    """Decide acme's searches at ``offsets`` after now, as punctually as the machine
    allows; return the rejections."""
    start = time.monotonic() + 0.2
    rejected = 0
    for offset in offsets:
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        decision = limiter.decide(route="search", tenant="acme", user="u1")
        rejected += decision.outcome == Outcome.LIMITED
    return rejected


def test_estimate__lowering_on_recorded_real_traffic__within_10_percent_of_the_truth(
    redis_server, redis_client
):
    # Given 30 s of bursty searches decided by the lowered rules, recorded
    client = connect(redis_server.url, timeout=1.0)
    events = DecisionEvents(client, gateway_id="gw-e2e")
    offsets = bursty_schedule(30, seed=0)
    truth = run(Limiter(client, snapshot(LOWERED, version=2), events=events), offsets)
    events.flush()
    decision_stream_aggregate()
    assert sum(DecisionPeak.objects.values_list("count", flat=True)) == len(offsets)
    # When the lowering from the rules in force is estimated from what was recorded
    impact = impact_estimate(
        old=IN_FORCE,
        new=LOWERED,
        diff=rules_diff(IN_FORCE, LOWERED),
        now=timezone.now() + timedelta(minutes=1),
    )
    (row,) = impact.rows
    # Then it saw every request, knows what was rejected when they came, and its
    # estimate is within 10 % of the rejections the lowered rules really made
    print(
        f"estimate {row.rejected_new} rejections of {len(offsets)} searches; "
        f"the lowered rules made {truth}"
    )
    assert truth > 100
    assert row.seen == len(offsets)
    assert row.rejected_now == truth
    assert abs(row.rejected_new - truth) <= 0.10 * truth, (row.rejected_new, truth)
