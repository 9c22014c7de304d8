"""The sliding-window counter kind: its format, validation, decisions (memory store,
Redis, Redis Cluster), headers, in-process simulation and direction."""

from __future__ import annotations

import time

import pytest

from sluice import (
    Limiter,
    LocalBuckets,
    SnapshotError,
    rate_limit_headers,
    retry_after_seconds,
    validate_rules,
)
from sluice.bucket import SCRIPT, peek_windows
from sluice.kinds import SLIDING_WINDOW, Direction, kind_of
from sluice.kinds.gcra import Geometry
from sluice.memory import MemoryStore
from sluice.model import (
    Dimension,
    SlidingWindow,
    describe_limit,
    limit_in_words,
    parse_limit,
    parse_policy,
)
from sluice.plans import compile_policy
from sluice.rehearsal import rehearsal_plan
from sluice.testing import Clock
from tests.client.factories import (
    REDIS_TIMEOUT,
    concurrent,
    limit,
    policy,
    rules,
    snapshot,
)


def sliding(dimension="ip", most=5, window=60, **members) -> SlidingWindow:
    return SlidingWindow(Dimension(dimension), most, window, **members)


def _searches(*limits) -> object:
    return snapshot(rules(policy("default", "search", *limits)))


def _on_a_minute() -> Clock:
    """A clock at the start of a minute of today: a window starts now."""
    return Clock(float(int(time.time()) // 60 * 60))


# -- the format -----------------------------------------------------------------------


def test_sliding__to_json_and_back__same_limit_and_kind_named():
    # Given a sliding window with a cost and a public name
    window = sliding("user", 100, 60, cost=2, name="Searches")
    # When it is written and read back
    data = window.to_json()
    # Then the document names its kind, and reads back as the same limit
    assert data == {
        "kind": "sliding_window",
        "dimension": "user",
        "limit": 100,
        "window": 60,
        "cost": 2,
        "shadow": False,
        "name": "Searches",
    }
    assert parse_limit(data) == window


def test_sliding__a_limit_without_kind__is_gcra():
    # Given a limit document as every snapshot before the kinds holds
    data = limit("ip", 10, 1, 20).to_json()
    # Then it has no kind member, and reads back as a token bucket
    assert "kind" not in data
    assert parse_limit(data) == limit("ip", 10, 1, 20)


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"kind": "leaky"}, "p.limits[0].kind", "'leaky' is not one of"),
        ({"window": 90}, "p.limits[0].window", "must be one of"),
        ({"limit": 0}, "p.limits[0].limit", "at least 1"),
        ({"rate": 5}, "p.limits[0]", "unknown member(s): rate"),
    ],
)
def test_sliding__bad_member__error_names_it(change, path, message):
    # Given a policy document whose sliding window has one bad member
    data = {**sliding().to_json(), **change}
    document = {"scope": "default", "route": "search", "expires_at": None}
    # When it is parsed
    with pytest.raises(SnapshotError) as error:
        parse_policy({**document, "limits": [data]}, "p")
    # Then the error names the member
    assert error.value.path == path
    assert message in error.value.message


@pytest.mark.parametrize(
    ("window", "field", "message"),
    [
        (sliding(most=1, cost=2), "limits[0].limit", "below the request cost 2"),
        (sliding(shards=2), "limits[0].shards", "GCRA limits only"),
        (sliding(lease=5), "limits[0].lease", "GCRA limits only"),
    ],
)
def test_sliding__validation__field_named_problem(window, field, message):
    # Given a rule set holding a sliding window that cannot be enforced
    problems = validate_rules(rules(policy("default", "search", window)))
    # Then validation names the member at fault
    assert [p.field for p in problems] == [field]
    assert message in problems[0].message


def test_sliding__with_concurrency_or_leases__refused():
    # Given a sliding window beside a concurrency limit, and beside a leased bucket
    capped = policy("default", "search", sliding(), concurrency=(concurrent("ip", 2),))
    leased = policy("tier:pro", "search", sliding(), limit("user", 10, 1, 20, lease=5))
    # When the rules are validated
    problems = validate_rules(rules(capped, leased))
    # Then each sliding window is refused: the hot script knows GCRA only
    assert [(p.key, p.field) for p in problems] == [
        ("default/search", "limits[0]"),
        ("tier:pro/search", "limits[0]"),
    ]
    assert "GCRA limits only, not sliding_window" in problems[0].message


# -- decisions -------------------------------------------------------------------------


def test_sliding__full_window__rejected_until_previous_share_runs_down():
    # Given 5 per minute per IP, at the start of a minute, on the memory store
    clock = _on_a_minute()
    limiter = Limiter(
        MemoryStore(clock=clock), _searches(sliding()), wall=clock, clock=clock
    )
    # When an IP sends 6 requests at once
    decisions = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(6)]
    # Then 5 pass, and the 6th waits until the next minute's weighted count
    # leaves room: 5 x (1 - 12/60) + 0 = 4, 72 s from now
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert decisions[-1].retry_after == pytest.approx(72)
    assert retry_after_seconds(decisions[-1]) == 72
    headers = dict(rate_limit_headers(decisions[-1], wall=clock))
    assert headers["RateLimit-Policy"] == '"ip-min-sliding";q=5;w=60'
    assert headers["RateLimit"].startswith('"ip-min-sliding";r=0;')
    # And 1 s short of it, still rejected; then admitted
    clock.advance(71)
    assert not limiter.decide(route="search", ip="10.0.0.1").allowed
    clock.advance(1)
    assert limiter.decide(route="search", ip="10.0.0.1").allowed


def test_sliding__literal_limit__no_burst_across_the_boundary():
    # Given 5 per minute, all spent at the end of a minute
    clock = _on_a_minute()
    limiter = Limiter(
        MemoryStore(clock=clock), _searches(sliding()), wall=clock, clock=clock
    )
    clock.advance(59)
    spent = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(5)]
    # When the next minute starts (a fixed window would admit 5 more at once)
    clock.advance(1)
    after = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(5)]
    # Then nothing more passes: the previous minute still counts in full
    assert all(d.allowed for d in spent)
    assert [d.allowed for d in after] == [False] * 5


def test_sliding__remaining__counts_down_the_window():
    # Given 5 per minute at the start of a minute
    clock = _on_a_minute()
    limiter = Limiter(
        MemoryStore(clock=clock), _searches(sliding()), wall=clock, clock=clock
    )
    # When 3 requests pass
    decisions = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(3)]
    # Then each says what is left of the window
    assert [d.remaining for d in decisions] == [4, 3, 2]


def test_sliding__on_redis__decides_and_keeps_one_hash(store):
    # Given 5 per minute per IP on Redis (plain and Cluster)
    limiter = Limiter(store.client, _searches(sliding()), timeout=REDIS_TIMEOUT)
    # When an IP sends 6 requests at once
    decisions = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(6)]
    # Then 5 pass; the 6th waits at most two minutes
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert 0 < decisions[-1].retry_after <= 120
    assert decisions[-1].deciding.name == "ip-min-sliding"
    # And the key is a hash counting this minute's 5, expiring within 2 windows
    key = decisions[-1].deciding.key
    assert key.endswith(":60s:sliding_window")
    counts = store.inspect.hgetall(key)
    assert list(counts.values()) == ["5"]
    assert 0 < store.inspect.pttl(key) <= 120_000


def test_peek_windows__after_requests__reads_the_count_without_charging(redis_client):
    # Given 3 requests of an IP against 5 per minute, on Redis
    window = sliding()
    limiter = Limiter(redis_client, _searches(window), timeout=REDIS_TIMEOUT)
    decisions = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(3)]
    key = decisions[-1].deciding.key
    shape = SLIDING_WINDOW.shape(window, cost=1)
    # When the window is read twice
    counts = [peek_windows(redis_client, [key], [shape])[0] for _ in range(2)]
    # Then it counts the 3 (less if the minute turned meanwhile: they slide off), and
    # reading charged nothing
    assert all(0 < count <= 3 for count in counts)
    assert sum(int(v) for v in redis_client.hgetall(key).values()) == 3
    # And a key nobody charged counts nothing
    assert peek_windows(redis_client, [key + ":none"], [shape]) == [0.0]


def test_sliding__beside_a_bucket__all_or_nothing(store):
    # Given 3 per minute (sliding) and 100 / h burst 100 per IP, on Redis (a bucket
    # that refills slowly, so how long the requests take cannot change its count)
    limiter = Limiter(
        store.client,
        _searches(sliding(most=3), limit("ip", 100, 3600, 100)),
        timeout=REDIS_TIMEOUT,
    )
    # When 4 requests come at once
    decisions = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(4)]
    # Then the window rejects the 4th, and the bucket was not charged for it
    assert [d.allowed for d in decisions] == [True, True, True, False]
    bucket = next(s for s in decisions[-1].statuses if s.name == "ip-h")
    assert bucket.fits
    assert bucket.remaining == 97


def test_sliding__local_failure_mode__simulated_in_process():
    # Given the local failure mode's buckets and a sliding window compiled
    clock = Clock(1_000.0)
    local = LocalBuckets(gateways=1, clock=clock)
    plan = compile_policy(policy("default", "search", sliding(most=2)), cost=1)
    # When a key asks 3 times at once
    replies = [local(["k"], plan)[0] for _ in range(3)]
    # Then the simulation admits the window's limit, then rejects
    assert replies == [1, 1, 0]


def test_sliding__rehearsal_shares_the_window__flag_keeps_it():
    # Given a window in force and a scheduled version that keeps it beside a new limit
    active = compile_policy(policy("default", "search", sliding()), cost=1)
    scheduled = compile_policy(
        policy("default", "search", sliding(), limit("user", 1, 1, 1)), cost=1
    )
    # When the rehearsal's arguments are made
    plan = rehearsal_plan(active, scheduled, version=2)
    # Then the shared window is flagged shared, its window still given
    assert plan is not None
    assert plan.args[:3] == (b"1", b"5", b"3w60000000")


@pytest.mark.parametrize(
    ("after", "direction"),
    [
        (sliding(), Direction.UNCHANGED),
        (sliding(most=4), Direction.LOWERED),
        (sliding(window=3600), Direction.LOWERED),  # the same limit over longer
        (sliding(cost=2), Direction.LOWERED),
        (sliding(most=6), Direction.RAISED),
        (sliding(most=600, window=3600), Direction.RAISED),  # 10 / min
        (sliding(most=6, cost=2), Direction.LOWERED),  # against the client wins
    ],
)
def test_sliding__direction__against_the_client_is_lowered(after, direction):
    # Given 5 per minute at the route's cost of 1
    before = sliding()
    # Then a change's direction is the kind's
    assert kind_of(before) is SLIDING_WINDOW
    assert SLIDING_WINDOW.direction(before, after, route_cost=1) is direction


def test_sliding__in_words__no_burst_any_window():
    # Given 3 requests in any minute per user, costing 2 each
    window = sliding("user", 3, 60, cost=2)
    # Then customers and support read it as a window, not a bucket
    assert limit_in_words(window) == (
        "3 requests in any minute per user; each request counts as 2"
    )
    assert (
        describe_limit(window)
        == "per user: 3 requests per minute, sliding window, cost 2"
    )


@pytest.mark.parametrize(
    "state", [0, 1, 11_999_999, 12_000_000, 48_000_000, 48_000_001, 90_000_000]
)
def test_sliding__state__read_with_the_buckets_arithmetic(state):
    # Given 5 per minute at a cost of 1 (a tick of 12 s), and the bucket of
    # increment 1 tick, capacity 5 ticks (what the nginx module runs for it)
    shape = SLIDING_WINDOW.shape(sliding(), cost=1)
    bucket = Geometry(shape.tick, shape.tick, 5 * shape.tick)
    # Then both read any state alike
    assert (shape.fits(state), shape.charged(state)) == (
        bucket.fits(state),
        bucket.charged(state),
    )
    assert (shape.remaining(state), shape.wait(state), shape.reset(state)) == (
        bucket.remaining(state),
        bucket.wait(state),
        bucket.reset(state),
    )


def test_sliding__memory_store__replies_as_redis_at_the_same_instants(redis_client):
    # Given a window of 3 per second, called on Redis for a little over two
    # windows (both of the wait's branches, and a window's first charges)
    args = SLIDING_WINDOW.arguments(
        SLIDING_WINDOW.shape(sliding(most=3, window=1), cost=1), flag=b"0"
    )
    script = redis_client.register_script(SCRIPT)
    key = "rl:{t}:route:search:ip:1:1s:sliding_window"
    calls = [script(keys=[key], args=args)]
    while calls[-1][-1] - calls[0][-1] < 2_200_000:  # Redis's µs, not this clock
        calls.append(script(keys=[key], args=args))
    # When a memory store runs the same calls at the instants Redis ran them
    clock = Clock()
    memory = MemoryStore(clock=clock).script(SCRIPT)
    replayed = []
    for reply in calls:
        clock.now = (reply[-1] + 0.5) / 1_000_000  # exactly that µs once truncated
        replayed.append(memory([key], list(args)))
    # Then every reply is Redis's: fits, state and time
    assert replayed == calls
    assert {reply[1] for reply in calls} == {0, 1}
