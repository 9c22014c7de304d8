"""The replay of recorded traffic through token buckets, against the script's arithmetic
request by request."""

from __future__ import annotations

import random

import pytest

from limits.traffic.replay import (
    Bucket,
    Minute,
    buckets_of,
    could_reject,
    quotas_of,
    replay,
)
from sluice import Dimension, Limit, Policy
from tests.client.factories import limit

SECOND = 1_000_000


def exact(schedule: list[int], buckets: list[Bucket]) -> int:
    """Rejections of requests arriving at ``schedule`` (µs, sorted), as token_bucket.lua
    decides them: all limits must fit, and a rejection charges nothing."""
    tats = [0] * len(buckets)
    rejected = 0
    for now in schedule:
        debts = [max(0, tat - now) for tat in tats]
        if all(
            d + b.increment <= b.capacity for d, b in zip(debts, buckets, strict=True)
        ):
            tats = [now + d + b.increment for d, b in zip(debts, buckets, strict=True)]
        else:
            rejected += 1
    return rejected


def recorded(schedule: list[int]) -> list[Minute]:
    """What the tally keeps of a schedule: per minute, the per-second counts."""
    minutes: dict[int, list[int]] = {}
    for at in schedule:
        seconds = minutes.setdefault(at // (60 * SECOND), [0] * 60)
        seconds[at // SECOND % 60] += 1
    return [Minute(m, sum(s), s) for m, s in sorted(minutes.items())]


def evenly(per_second: list[int], start: int = 0) -> list[int]:
    """A schedule with ``per_second[i]`` requests spread evenly over second ``i``."""
    return [
        start + i * SECOND + (2 * k + 1) * SECOND // (2 * n)
        for i, n in enumerate(per_second)
        for k in range(n)
    ]


def bucket(rate: int, period: int, burst: int, dimension=Dimension.TENANT) -> Bucket:
    (only,) = buckets_of(
        Policy("tier:pro", "search", (limit(dimension, rate, period, burst),)),
        route_cost=1,
    )
    return only


def test_replay__burst_inside_a_quiet_minute__caught_by_the_seconds():
    # Given 10/s with a burst of 10, and a minute of 300 requests: 5/s on average,
    # but all of them in three seconds
    buckets = [bucket(10, 1, 10)]
    seconds = [100, 100, 100] + [0] * 57
    # When the minute is replayed with its seconds, and with its count alone
    with_seconds = replay([Minute(1000, 300, seconds)], buckets)
    count_only = replay([Minute(1000, 300, None)], buckets)
    # Then the seconds show the burst the count hides: 10 + 10/s refill admitted
    assert count_only.rejected == 0
    assert with_seconds.rejected == exact(evenly(seconds), buckets)
    assert 255 <= with_seconds.rejected <= 265
    assert (with_seconds.worst_minute, with_seconds.worst_rejected) == (
        1000,
        with_seconds.rejected,
    )


@pytest.mark.parametrize("seed", range(8))
def test_replay__random_bursty_traffic__within_2_percent_of_the_script(seed):
    # Given ten minutes of bursty traffic (quiet seconds, busy ones, idle minutes)
    # and a policy of two limits, per second and per minute
    rng = random.Random(seed)
    per_second = []
    for _ in range(600):
        busy = rng.random() < 0.2
        per_second.append(rng.randint(20, 80) if busy else rng.randint(0, 12))
    schedule = evenly(per_second)
    buckets = [bucket(20, 1, 40), bucket(600, 60, 900)]
    # When the recorded minutes are replayed
    estimated = replay(recorded(schedule), buckets)
    # Then the rejections match the script's, request by request, within 2 %
    truth = exact(schedule, buckets)
    assert truth > 0
    assert estimated.seen == len(schedule)
    assert abs(estimated.rejected - truth) <= max(2, 0.02 * truth)


def stretches(seed: int, phase: float, seconds: int = 30) -> list[int]:
    """Bursts of 4 to 9 s at 30 to 50 a second between quiet stretches of 2 to 5 s at
    up to 5 a second, arrivals at random, the first starting ``phase`` into a second."""
    rng = random.Random(seed)
    offsets, start, busy = [], phase, False
    while start < seconds:
        length = rng.uniform(4, 9) if busy else rng.uniform(2, 5)
        rate = rng.uniform(30, 50) if busy else rng.uniform(0, 5)
        offsets += [start + rng.random() * length for _ in range(int(rate * length))]
        start, busy = start + length, not busy
    return sorted(int((60 + offset) * SECOND) for offset in offsets)


def test_replay__bursts_starting_mid_second__edges_placed_next_to_the_burst():
    # Given 24 schedules of bursts that start and end anywhere within a second, and a
    # per-second limit (15/s, burst 20): where the per-second counts blur the edges
    buckets = [bucket(15, 1, 20)]
    errors = []
    for seed in range(6):
        for phase in (0.0, 0.25, 0.5, 0.75):
            schedule = stretches(seed, phase)
            truth = exact(schedule, buckets)
            # When the recorded minutes are replayed
            estimated = replay(recorded(schedule), buckets).rejected
            errors.append(abs(estimated - truth) / truth)
    # Then the estimate stays close to the script's rejections: a burst's edge
    # seconds are not lent a whole second's refill (spread evenly, they would be
    # about 7 % low on average, up to 11 %)
    assert sum(errors) / len(errors) <= 0.05
    assert max(errors) <= 0.08


@pytest.mark.parametrize("seed", range(4))
def test_replay__one_bucket__the_same_as_with_a_bucket_that_never_binds(seed):
    # Given bursty traffic, one limit alone, and the same with a huge second limit
    schedule = stretches(seed, 0.4)
    alone = [bucket(15, 1, 20)]
    with_another = [*alone, bucket(1_000_000, 1, 1_000_000)]
    # When both are replayed / Then the inlined one-bucket path agrees with the general one
    assert replay(recorded(schedule), alone) == replay(recorded(schedule), with_another)


def test_replay__idle_gap__buckets_refill():
    # Given a tenant that empties a 60/min bucket, then comes back an hour later
    buckets = [bucket(60, 60, 60)]
    full = [Minute(0, 60, [1] * 60), Minute(60, 60, [60] + [0] * 59)]
    # When replayed
    result = replay(full, buckets)
    # Then nothing is rejected: the hour refilled the bucket
    assert result.rejected == 0


@pytest.mark.parametrize("seed", range(20))
def test_could_reject__says_no__the_script_rejects_nothing(seed):
    # Given random traffic and random limits
    rng = random.Random(seed)
    per_second = [rng.choice([0, 0, 1, 3, rng.randint(0, 30)]) for _ in range(600)]
    schedule = evenly(per_second)
    rate = rng.choice([5, 10, 30, 100])
    buckets = [bucket(rate, 1, rate * rng.choice([1, 2, 4]))]
    minutes = recorded(schedule)
    busiest = [
        max(per_second),
        max(m.count for m in minutes),
        len(schedule),
        len(schedule),
    ]
    # When the filter rules the traffic out, Then the script agrees, request by request
    if not could_reject(buckets, busiest):
        assert exact(schedule, buckets) == 0


def test_could_reject__well_within_a_minute_limit__ruled_out():
    # Given 1000 per minute with a burst of 1000; the busiest minute had 300 requests
    buckets = [bucket(1000, 60, 1000)]
    # Then no replay is needed; at 600 a minute it is
    assert not could_reject(buckets, [40, 300, 9000, 50_000])
    assert could_reject(buckets, [40, 600, 9000, 50_000])


def test_buckets_of__shadow_limits__left_out_and_per_user_marked():
    policy = Policy(
        "tier:pro",
        "search",
        (
            limit(Dimension.TENANT, 10, 1, 20),
            limit(Dimension.USER, 5, 1, 5),
            limit(Dimension.TENANT, 1, 1, 1, shadow=True),
        ),
    )
    buckets = buckets_of(policy, route_cost=2)
    assert [b.per_tenant for b in buckets] == [True, False]
    assert buckets[0].increment == 2 * SECOND // 10


def test_buckets_of__sliding_window__replayed_as_limit_per_window_limit_deep():
    from sluice.model import SlidingWindow

    # Given 100 in any minute per tenant, on a route of cost 2
    window = SlidingWindow(Dimension.TENANT, limit=100, window=60)
    (only,) = buckets_of(Policy("tier:pro", "search", (window,)), route_cost=2)
    # Then it is replayed as a bucket refilling 100 a minute and holding 100
    assert (only.increment, only.capacity) == (2 * 60 * SECOND // 100, 60 * SECOND)
    assert only.per_tenant
    # And a busiest minute of 25 requests (two windows' worth: 100) cannot be
    # rejected, while one of 51 may be
    assert not could_reject([only], [1, 25, 25, 25])
    assert could_reject([only], [1, 51, 51, 51])


def test_buckets_of__calendar_quota__not_a_bucket_but_listed_for_the_count():
    from dataclasses import replace

    from sluice.model import CalendarQuota

    # Given 20/s burst 40, 10,000 a month per tenant, and a shadow daily quota
    bucket = Limit(Dimension.TENANT, 20, 1, 40)
    quota = CalendarQuota(Dimension.TENANT, 10000, "month", cycle="billing")
    shadow = replace(quota, per="day", cycle="calendar", shadow=True)
    policy = Policy("tier:pro", "search", (bucket, quota, shadow))
    # Then only the bucket is replayed, and the enforced quota is what the count takes
    (only,) = buckets_of(policy, route_cost=1)
    assert only.capacity == 40 * SECOND // 20
    assert quotas_of(policy) == (quota,)
    assert quotas_of(Policy("tier:pro", "search", (bucket,))) == ()


def test_replay__rejections_kept_per_minute():
    # Given 10/s burst 10, and two minutes: one of 30 a second for 5 s, one quiet
    bucket = buckets_of(
        Policy("tier:pro", "search", (Limit(Dimension.TENANT, 10, 1, 10),)),
        route_cost=1,
    )
    steps = [Minute(100, 150, [30] * 5 + [0] * 55), Minute(101, 5, [1] * 5 + [0] * 55)]
    # When replayed
    result = replay(steps, bucket)
    # Then the minute's rejections are kept by minute, the quiet one not at all
    assert result.lost == {100: result.rejected}
    assert result.rejected > 0
