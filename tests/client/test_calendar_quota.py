"""Calendar quotas deciding: on the memory store (its clock moved across days and
billing dates), on real Redis and Redis Cluster (periods chosen around Redis
time: the script takes the bounds the caller passes), beside a bucket, in the
headers, the reject cache and the local failure mode."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from sluice import Limiter, LocalBuckets, Outcome, rate_limit_headers
from sluice.bucket import SCRIPT
from sluice.headers import error_response
from sluice.kinds import CALENDAR_QUOTA
from sluice.kinds.quota import quota_shape
from sluice.memory import MemoryStore
from sluice.model import Calendar, CalendarQuota, Dimension, Rules
from sluice.plans import compile_policy
from sluice.testing import Clock
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.client.test_calendar import tz_rule

MICROS = 1_000_000


def quota(most=3, per="day", dimension="tenant", **members) -> CalendarQuota:
    return CalendarQuota(Dimension(dimension), most, per, **members)


def quota_rules(*limits, calendars=None, zones=None) -> Rules:
    plain = rules(policy("tenant:acme", "search", *limits))
    return Rules(
        plain.tiers,
        plain.tenants,
        plain.routes,
        plain.policies,
        calendars=calendars or {},
        zones=zones or {},
    )


def at(text: str) -> float:
    """Epoch seconds of an ISO time in UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def on_memory(rules_: Rules, clock: Clock, store: MemoryStore | None = None) -> Limiter:
    store = store or MemoryStore(clock=clock)
    return Limiter(store, snapshot(rules_), clock=clock, wall=clock)


def search(limiter: Limiter, tenant="acme"):
    return limiter.decide(route="search", tenant=tenant)


# -- the memory store, on its clock ---------------------------------------------------


def test_quota__used_up__rejected_until_midnight_then_reset():
    # Given 3 a day per tenant, at 23:59:00 UTC
    clock = Clock(at("2026-12-16T23:59:00"))
    limiter = on_memory(quota_rules(quota()), clock)
    # When the tenant sends 4 requests
    decisions = [search(limiter) for _ in range(4)]
    # Then 3 pass, counting down; the 4th waits for midnight, a minute away
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.statuses[0].remaining for d in decisions[:3]] == [2, 1, 0]
    assert decisions[-1].retry_after == 60
    assert decisions[-1].deciding.name == "tenant-day-quota"
    # And at midnight the day starts over
    clock.advance(60)
    again = search(limiter)
    assert again.allowed
    assert again.statuses[0].remaining == 2


def test_quota__headers__remaining_reset_and_policy_of_the_period():
    # Given 3 a day at 18:00 UTC, 2 used
    clock = Clock(at("2026-12-16T18:00:00"))
    limiter = on_memory(quota_rules(quota()), clock)
    search(limiter)
    allowed = search(limiter)
    # Then the headers say 1 left, reset at midnight (6 h), over a day
    headers = dict(rate_limit_headers(allowed))
    assert headers["RateLimit-Policy"] == '"tenant-day-quota";q=3;w=86400'
    assert headers["RateLimit"] == '"tenant-day-quota";r=1;t=21600'
    # And the 429 says to come back at midnight
    search(limiter)
    rejected = dict(error_response(search(limiter)).headers)
    assert rejected["Retry-After"] == "21600"
    assert rejected["RateLimit"] == '"tenant-day-quota";r=0;t=21600'


def test_quota__billing_cycle__from_the_tenants_billing_day_in_its_zone():
    # Given 2 a billing month for a tenant billed on the 17th in Paris, at 23:59
    # Paris time on December 16 (22:59 UTC)
    paris = tz_rule("Europe/Paris")
    rules_ = quota_rules(
        quota(2, "month", cycle="billing"),
        calendars={"acme": Calendar("Europe/Paris", 17)},
        zones={"Europe/Paris": paris},
    )
    clock = Clock(at("2026-12-16T22:59:00"))
    limiter = on_memory(rules_, clock)
    decisions = [search(limiter) for _ in range(3)]
    # Then the cycle (Nov 17 - Dec 17, 30 days) is used up until Paris's midnight
    assert [d.allowed for d in decisions] == [True, True, False]
    assert decisions[-1].retry_after == 60
    assert decisions[-1].deciding.key.endswith(
        ":tenant:acme:month-billing:calendar_quota"
    )
    assert decisions[-1].deciding.window == 30 * 86_400
    # And the next cycle starts then, 31 days long (Dec 17 - Jan 17)
    clock.advance(60)
    again = search(limiter)
    assert (again.allowed, again.statuses[0].remaining) == (True, 1)
    assert again.statuses[0].window == 31 * 86_400


def test_quota__raised_mid_period__keeps_what_was_used():
    # Given 2 a day, used up
    clock = Clock(at("2026-12-16T12:00:00"))
    store = MemoryStore(clock=clock)
    before = on_memory(quota_rules(quota(2)), clock, store)
    assert [search(before).allowed for _ in range(3)] == [True, True, False]
    # When the quota is raised to 5 the same day (a new snapshot, same keys)
    after = on_memory(quota_rules(quota(5)), clock, store)
    decisions = [search(after) for _ in range(4)]
    # Then 3 more pass, not 5: the 2 used still count
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert decisions[0].statuses[0].remaining == 2


def test_quota__beside_a_bucket__all_or_nothing():
    # Given 20 / s burst 40 AND 3 a day per tenant
    clock = Clock(at("2026-12-16T12:00:00"))
    limiter = on_memory(quota_rules(limit("tenant", 20, 1, 40), quota()), clock)
    decisions = [search(limiter) for _ in range(4)]
    # Then the quota rejects the 4th, and the bucket was not charged for it
    assert [d.allowed for d in decisions] == [True, True, True, False]
    bucket = next(s for s in decisions[-1].statuses if s.name == "tenant-s")
    assert (bucket.fits, bucket.remaining) == (True, 37)


def test_quota__engine__compiles_again_when_the_period_ends():
    # Given a limiter that decided once today
    clock = Clock(at("2026-12-16T23:59:59"))
    limiter = on_memory(quota_rules(quota()), clock)
    first = search(limiter).statuses[0]
    # When the clock passes midnight (with no request in between)
    clock.advance(2)
    second = search(limiter).statuses[0]
    # Then the plan is the next day's: its own key count, its own bounds
    assert (first.remaining, second.remaining) == (2, 2)
    assert first.reset == 1
    assert second.reset == 86_399


def test_quota__local_failure_mode__simulated_as_a_bucket_of_the_period():
    # Given the local failure mode's buckets and 2 a day compiled
    clock = Clock(1_000.0)
    local = LocalBuckets(gateways=1, clock=clock)
    bounds = (0, 86_400, 172_800)
    plan = compile_policy(policy("default", "search", quota(2)), cost=1, now=1_000)
    assert plan.limits[0].shape == quota_shape(2, 1, bounds)
    # When a key asks 3 times at once
    replies = [local(["k"], plan)[0] for _ in range(3)]
    # Then the simulation admits the quota, then rejects (a bucket of 2 per day)
    assert replies == [1, 1, 0]


# -- the script on Redis, with periods around Redis time ------------------------------


def quota_args(most: int, bounds: tuple[int, int, int], cost: int = 1) -> list[bytes]:
    return list(CALENDAR_QUOTA.arguments(quota_shape(most, cost, bounds), flag=b"0"))


def redis_seconds(script) -> int:
    """Redis's time, whole seconds: what a reply of the script says."""
    return script(keys=["rl:{tenant:q}:probe"], args=[b"1", b"1", b"1"])[-1] // MICROS


KEY = "rl:{tenant:q}:route:*:tenant:q:day:calendar_quota"


def test_quota__on_redis__resets_when_redis_time_passes_the_end(store):
    # Given a period ending 2 s from Redis's now, used up (2 of 2), on Redis and
    # Redis Cluster (again with a new period if the machine was slower than 2 s)
    script = store.client.register_script(SCRIPT)
    for _ in range(5):
        now = redis_seconds(script)
        bounds = (now - 10, now + 2, now + 4)
        replies = [script(keys=[KEY], args=quota_args(2, bounds)) for _ in range(3)]
        if replies[-1][-1] < bounds[1] * MICROS:
            break
        store.flush()
    assert [r[0] for r in replies] == [1, 1, 0]
    # ... the rejection's state is a wait until the end
    shape = quota_shape(2, 1, bounds)
    assert 0 < shape.wait(replies[-1][2]) <= 2 * MICROS
    assert store.inspect.hgetall(KEY) == {"p": str(now - 10), "n": "2"}
    # When Redis time passes the end, and the caller passes the next period
    while redis_seconds(script) < bounds[1]:
        time.sleep(0.2)
    reply = script(keys=[KEY], args=quota_args(2, (now + 2, now + 600, now + 1200)))
    # Then the quota starts over
    assert reply[:2] == [1, 1]
    assert store.inspect.hgetall(KEY) == {"p": str(now + 2), "n": "1"}
    assert 0 < store.inspect.pttl(KEY) <= 600_000


def test_quota__on_redis__caller_clock_lags_the_boundary__next_period(store):
    # Given a caller whose clock has not reached the boundary Redis has passed
    script = store.client.register_script(SCRIPT)
    now = redis_seconds(script)
    lagging = (now - 86_400, now - 1, now + 86_399)
    # When it asks 3 times for 2 a day
    replies = [script(keys=[KEY], args=quota_args(2, lagging)) for _ in range(3)]
    # Then Redis counts in the period it is in, which ends a day later
    assert [r[0] for r in replies] == [1, 1, 0]
    assert store.inspect.hget(KEY, "p") == str(now - 1)
    assert 86_000_000 < store.inspect.pttl(KEY) <= 86_400_000
    wait = quota_shape(2, 1, lagging).wait(replies[-1][2])
    assert 86_000 * MICROS < wait <= 86_400 * MICROS


def test_quota__on_redis__caller_clock_runs_ahead__old_period_goes_on(store):
    # Given a key counting today (1 used), and a caller whose clock is already in
    # tomorrow (a period that starts a minute after Redis's now)
    script = store.client.register_script(SCRIPT)
    now = redis_seconds(script)
    script(keys=[KEY], args=quota_args(2, (now - 100, now + 60, now + 100)))
    ahead = (now + 60, now + 100, now + 200)
    # When it asks twice
    replies = [script(keys=[KEY], args=quota_args(2, ahead)) for _ in range(2)]
    # Then it counts in today's period until it ends: 1 more fits, not 2
    assert [r[0] for r in replies] == [1, 0]
    assert store.inspect.hgetall(KEY) == {"p": str(now - 100), "n": "2"}


def test_quota__on_redis__limiter_headers_and_a_bucket_beside(store):
    # Given 20 / s burst 40 AND 2 a day per tenant, through the limiter
    limiter = Limiter(
        store.client,
        snapshot(quota_rules(limit("tenant", 20, 1, 40), quota(2))),
        timeout=REDIS_TIMEOUT,
    )
    decisions = [search(limiter) for _ in range(3)]
    # Then the quota rejects the 3rd, the bucket untouched by it
    assert [d.allowed for d in decisions] == [True, True, False]
    assert decisions[-1].deciding.name == "tenant-day-quota"
    bucket = next(s for s in decisions[-1].statuses if s.name == "tenant-s")
    assert bucket.remaining == 38
    # And the 429 sends the client to midnight UTC (Redis's clock)
    midnight = (int(decisions[-1].at) // 86_400 + 1) * 86_400
    assert abs(decisions[-1].retry_after - (midnight - decisions[-1].at)) < 1
    headers = dict(error_response(decisions[-1]).headers)
    assert '"tenant-day-quota";q=2;w=86400' in headers["RateLimit-Policy"]
    assert abs(int(headers["Retry-After"]) - (midnight - decisions[-1].at)) <= 1
    # And the key is the spec's, a hash of the period's start and count
    key = decisions[-1].deciding.key
    assert key == "rl:{tenant:acme}:route:search:tenant:acme:day:calendar_quota"
    assert store.inspect.hgetall(key) == {"p": str(midnight - 86_400), "n": "2"}


def test_quota__on_redis__reject_cache__rejects_in_process_until_the_period_ends(store):
    # Given 2 a day that rejected a request, on a limiter whose clock the test moves
    clock = Clock(1_000.0)
    limiter = Limiter(
        store.client,
        snapshot(quota_rules(quota(2))),
        timeout=REDIS_TIMEOUT,
        clock=clock,
    )
    rejected = [search(limiter) for _ in range(3)][-1]
    # When the key is emptied behind the gateway's back
    store.flush()
    again = search(limiter)
    # Then the gateway still rejects without asking Redis, until the period's end
    assert (again.allowed, again.outcome) == (False, Outcome.LIMITED)
    assert limiter.rejections.hits == 1
    assert abs(again.retry_after - rejected.retry_after) < 1
    clock.now += rejected.retry_after + 1
    assert search(limiter).allowed


def test_quota__memory_store__replies_as_redis_at_the_same_instants(redis_client):
    # Given a quota of 3 over a period around Redis's now, called on Redis (used
    # up, then a caller lagging a boundary Redis passed)
    script = redis_client.register_script(SCRIPT)
    now = redis_seconds(script)
    calls = []
    for bounds in ((now - 50, now + 60, now + 120), (now - 60, now - 5, now + 60)):
        for _ in range(4):
            args = quota_args(3, bounds)
            calls.append((args, script(keys=[KEY], args=args)))
    # When a memory store runs the same calls at the instants Redis ran them
    clock = Clock()
    memory = MemoryStore(clock=clock).script(SCRIPT)
    replayed = []
    for args, reply in calls:
        clock.now = (reply[-1] + 0.5) / MICROS
        replayed.append(memory([KEY], args))
    # Then every reply is Redis's
    assert replayed == [reply for _, reply in calls]
    assert [reply[1] for _, reply in calls] == [1, 1, 1, 0, 1, 1, 1, 0]


@pytest.mark.parametrize("cost", [1, 2])
def test_quota__state__read_with_the_buckets_arithmetic(cost):
    # Given 5 a day (a tick of a fifth of the day), read as a bucket
    from sluice.kinds.gcra import Geometry

    shape = quota_shape(5, cost, (0, 86_400, 172_800))
    bucket = Geometry(shape.tick, cost * shape.tick, 5 * shape.tick)
    for state in (0, shape.tick, 3 * shape.tick, 5 * shape.tick + 7):
        assert (shape.fits(state), shape.remaining(state), shape.wait(state)) == (
            bucket.fits(state),
            bucket.remaining(state),
            bucket.wait(state),
        )
