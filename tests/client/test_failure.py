"""Failure modes on a real Redis that is stopped, paused, restarted; breaker and local buckets."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from sluice import (
    AsyncLimiter,
    BreakerState,
    CircuitBreaker,
    FailureMode,
    LocalBuckets,
    Outcome,
    Route,
)
from sluice.bucket import connect
from sluice.engine import compile_policy
from sluice.limiter import Limiter
from tests.celery_fixtures import wait_until
from tests.client.factories import (
    REDIS_TIMEOUT,
    ROUTES,
    limit,
    policy,
    rules,
    snapshot,
)
from tests.servers import RedisServer

#: Per IP a burst of 8, one token a minute: what Redis counts cannot refill while
#: a loaded machine runs a test (the local buckets run on the tests' FakeClock).
RULES = snapshot(rules(policy("default", "*", limit("ip", 1, 60, 8))))
UNBOUNDED = FailureMode.OPEN_UNBOUNDED


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def private_redis():
    """A redis-server of this test's own, to stop, pause and restart."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def make_limiter(server, clock, *, threshold=3, gateways=4) -> Limiter:
    """A limiter on ``server`` whose breaker and local buckets run on ``clock``.

    A stopped Redis refuses connections at once, so the timeout only bounds the
    calls to a healthy one: no decision of these tests is degraded by slowness.
    """
    return Limiter(
        connect(server.url, timeout=REDIS_TIMEOUT),
        RULES,
        breaker=CircuitBreaker(min_calls=threshold, cooldown=2.0, clock=clock),
        local=LocalBuckets(gateways=gateways, clock=clock),
        clock=clock,
    )


@pytest.mark.parametrize(
    ("path", "method", "outcome", "status"),
    [
        ("/v1/search", "GET", Outcome.FAIL_OPEN, 200),
        ("/v1/orders/1", "GET", Outcome.FAIL_CLOSED, 503),
        ("/v1/orders", "POST", Outcome.LOCAL, 200),
        ("/unrouted", "GET", Outcome.LOCAL, 200),
    ],
)
def test_decide__redis_stopped__route_failure_mode_decides(
    private_redis, path, method, outcome, status
):
    # Given a limiter whose Redis has stopped
    limiter = make_limiter(private_redis, FakeClock())
    private_redis.stop()
    # When a request comes for a route that fails open, closed or local
    decision = limiter.decide(method=method, path=path, ip="10.0.0.1")
    # Then the route's mode decides, and the decision says it is degraded and why
    assert decision.outcome is outcome
    assert decision.status == status
    assert decision.degraded
    assert decision.fail_open is (outcome is Outcome.FAIL_OPEN)
    assert "ConnectionError" in decision.error
    if status == 503:
        assert decision.retry_after >= 1


def test_decide__redis_stopped__breaker_opens_and_stops_calling(private_redis):
    # Given a breaker that opens after 3 failures
    clock = FakeClock()
    limiter = make_limiter(private_redis, clock, threshold=3)
    private_redis.stop()
    # When requests keep coming
    failures = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(3)]
    skipped = limiter.decide(route="search", ip="10.0.0.1")
    # Then after 3 failed calls Redis is not called at all until the cooldown ends
    assert all("ConnectionError" in d.error for d in failures)
    assert limiter.breaker.state is BreakerState.OPEN
    assert skipped.error == "circuit open"
    assert skipped.outcome is Outcome.FAIL_OPEN


def test_decide__redis_back__probe_closes_breaker_and_reloads_script(private_redis):
    # Given an open breaker on a Redis that was stopped
    clock = FakeClock()
    limiter = make_limiter(private_redis, clock, threshold=1)
    limiter.decide(route="search", ip="10.0.0.1")
    private_redis.stop()
    # (on a route that fails closed: nothing is admitted, so nothing is owed to
    # Redis, and no charge in the background can reach it before the probe)
    limiter.decide(route="orders.read", ip="10.0.0.1")
    assert limiter.breaker.state is BreakerState.OPEN
    assert len(limiter.charges) == 0
    # When Redis is back (empty: no script) and the cooldown has passed
    private_redis.start()
    clock.now += 2.0
    decision = limiter.decide(route="search", ip="10.0.0.1")
    # Then the probe decides normally and the breaker closes
    assert not decision.degraded
    assert decision.outcome is Outcome.ALLOWED
    assert decision.remaining == 7
    assert limiter.breaker.state is BreakerState.CLOSED


def test_decide__redis_paused__times_out_then_recovers(private_redis):
    # Given a limiter, and Redis pausing every write until told (far past the
    # limiter's timeout, however slow the machine); on the real clock, on which the
    # backlog tries a charge again if the first try fails
    limiter = make_limiter(private_redis, time.monotonic, threshold=5)
    admin = redis.Redis.from_url(private_redis.url)
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        # When a decision is asked
        slow = limiter.decide(route="search", ip="10.0.0.1")
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    # (the charge of what it admitted goes to Redis in the background)
    wait_until(
        lambda: limiter.charges.charged >= 1,
        timeout=60,
        every=0.01,
        why="the charge of the decision that timed out",
    )
    recovered = limiter.decide(route="search", ip="10.0.0.1")
    # Then it times out into the route's mode (admitted by the local bucket), the
    # next one is normal again, and Redis was charged for the one it did not see
    assert slow.outcome is Outcome.FAIL_OPEN
    assert "Timeout" in slow.error
    assert not recovered.degraded
    assert recovered.remaining == 6


def test_decide__redis_stopped_local_mode__enforces_a_share_of_the_limit(private_redis):
    # Given a burst of 8 shared by 4 gateways, and Redis stopped
    limiter = make_limiter(private_redis, FakeClock(), gateways=4)
    private_redis.stop()
    # When a client sends 2 orders at once through the local mode
    decisions = [
        limiter.decide(method="POST", path="/v1/orders", ip="10.0.0.1")
        for _ in range(2)
    ]
    # Then this gateway's share (8 / 4 = 2 tokens, orders cost 2) admits 1 of them
    assert [d.allowed for d in decisions] == [True, False]
    assert decisions[0].outcome is Outcome.LOCAL
    assert decisions[1].outcome is Outcome.LIMITED
    assert decisions[1].degraded
    assert decisions[1].status == 429
    assert decisions[0].limit == 2


def test_decide__redis_stopped_open_route__admits_the_whole_limit_and_no_more(
    private_redis,
):
    # Given a route that fails open, a limit of burst 8 (1 per minute), Redis stopped
    clock = FakeClock()
    limiter = make_limiter(private_redis, clock, gateways=4)
    private_redis.stop()
    # When one client sends 10 searches at once, then again 2 min later (2 tokens' refill)
    first = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(10)]
    clock.now += 120
    later = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(3)]
    # Then the whole burst of 8 is admitted (not the local mode's share of 2), the
    # rest is refused like Redis would refuse it, and the refill admits 2 more
    assert [d.allowed for d in first] == [True] * 8 + [False] * 2
    assert [d.allowed for d in later] == [True, True, False]
    assert {d.outcome for d in first[:8]} == {Outcome.FAIL_OPEN}
    assert all(d.fail_open and d.degraded for d in first[:8])
    refused = first[8]
    assert (refused.outcome, refused.status, refused.degraded) == (
        Outcome.LIMITED,
        429,
        True,
    )
    assert not refused.fail_open
    assert refused.retry_after == pytest.approx(60, abs=0.01)


def test_decide__redis_stopped_open_unbounded_route__admits_everything(private_redis):
    # Given a route that fails open-unbounded, and Redis stopped
    routes = {**ROUTES, "export": Route("export", ("GET",), "/v1/export", 1, UNBOUNDED)}
    rules_ = snapshot(
        rules(policy("default", "*", limit("ip", 100, 60, 8)), routes=routes)
    )
    limiter = Limiter(connect(private_redis.url, timeout=REDIS_TIMEOUT), rules_)
    private_redis.stop()
    # When one client sends 50 requests
    decisions = [limiter.decide(route="export", ip="10.0.0.1") for _ in range(50)]
    # Then every one is admitted unchecked, as ``open`` did before it was bounded
    assert all(d.allowed and d.fail_open and d.degraded for d in decisions)
    assert {d.outcome for d in decisions} == {Outcome.FAIL_OPEN}
    assert all(d.statuses == () for d in decisions)


def test_decide__redis_stopped_after_a_rejection__open_starts_from_redis_debt(
    private_redis,
):
    # Given a client that spent its burst of 8 in Redis and was refused once
    # (the reject cache keeps what Redis said of the bucket)
    clock = FakeClock()
    limiter = make_limiter(private_redis, clock)
    spent = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(9)]
    assert [d.allowed for d in spent] == [True] * 8 + [False]
    # When Redis stops, and 2 min pass (2 tokens' refill at 1 per minute)
    private_redis.stop()
    clock.now += 120
    after = [limiter.decide(route="search", ip="10.0.0.1") for _ in range(5)]
    # Then failing open admits the 2 refilled tokens only, not a fresh burst of 8
    assert [d.allowed for d in after] == [True, True, False, False, False]
    assert after[0].outcome is Outcome.FAIL_OPEN


def test_async_decide__redis_stopped__same_failure_modes(private_redis):
    # Given the asyncio limiter on a Redis that has stopped
    async def scenario():
        limiter = AsyncLimiter(
            private_redis.url,
            RULES,
            timeout=REDIS_TIMEOUT,
            breaker=CircuitBreaker(min_calls=1),
        )
        private_redis.stop()
        # When requests for an open and a closed route come
        first = await limiter.decide(route="search", ip="10.0.0.1")
        second = await limiter.decide(route="orders.read", ip="10.0.0.1")
        await limiter.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    # Then the failure modes decide as in the sync limiter; the breaker opened
    assert first.outcome is Outcome.FAIL_OPEN
    assert "ConnectionError" in first.error
    assert second.outcome is Outcome.FAIL_CLOSED
    assert second.error == "circuit open"


def test_async_decide__redis_back__what_failed_open_is_charged_to_it(private_redis):
    # Given the asyncio limiter on a route that fails open, and Redis stopped
    key = "rl:{ip:10.0.0.1}:route:*:ip:10.0.0.1:60s"

    async def scenario():
        limiter = AsyncLimiter(private_redis.url, RULES, timeout=REDIS_TIMEOUT)
        private_redis.stop()
        # When 3 searches are admitted locally, and Redis comes back
        admitted = [
            await limiter.decide(route="search", ip="10.0.0.1") for _ in range(3)
        ]
        private_redis.start()
        # (the backlog task retries every 0.1 s, doubling up to 2 s)
        deadline = time.monotonic() + 60
        while not limiter.charges.charged:
            assert time.monotonic() < deadline, "the backlog never charged Redis"
            await asyncio.sleep(0.02)
        after = await limiter.decide(route="search", ip="10.0.0.1")
        await limiter.aclose()
        return admitted, after

    admitted, after = asyncio.run(scenario())
    # Then Redis was charged for them: 8 - 3 - 1 tokens are left
    assert all(d.outcome is Outcome.FAIL_OPEN for d in admitted)
    assert not after.degraded
    assert after.remaining == 4
    assert redis.Redis.from_url(private_redis.url).get(key) is not None


def test_breaker__failures_below_the_rate__stays_closed():
    # Given a breaker judging 10 calls or more at a failure rate of 50 %
    clock = FakeClock()
    breaker = CircuitBreaker(min_calls=10, failure_rate=0.5, clock=clock)
    for _ in range(20):
        breaker.succeeded()
    # When 19 calls in a row fail (a stall times out every thread's call)
    for _ in range(19):
        breaker.failed()
    # Then 19 of 39 is under half: it stays closed
    assert breaker.state is BreakerState.CLOSED
    assert breaker.counts() == (39, 19)
    assert breaker.allow()


def test_breaker__sustained_failure__opens_at_the_rate():
    # Given 5 good calls
    breaker = CircuitBreaker(min_calls=10, failure_rate=0.5, clock=FakeClock())
    for _ in range(5):
        breaker.succeeded()
    # When calls fail, one after the other
    opened_at = next(n for n in range(1, 20) if _fail(breaker) is BreakerState.OPEN)
    # Then it opens at the 5th failure: 5 of 10 calls, the minimum judged
    assert opened_at == 5
    assert not breaker.allow()


def test_breaker__calls_older_than_the_window__no_longer_count():
    # Given 100 good calls a second and more ago
    clock = FakeClock()
    breaker = CircuitBreaker(min_calls=10, window=1.0, clock=clock)
    for _ in range(100):
        breaker.succeeded()
    clock.now += 1.1
    # When 10 calls fail now
    for _ in range(10):
        breaker.failed()
    # Then only they are judged: the breaker is open
    assert breaker.state is BreakerState.OPEN
    assert breaker.counts() == (10, 10)


def test_breaker__short_stall__probes_every_cooldown_then_slower_up_to_the_max():
    # Given a breaker that opened (cooldown 0.1 s; slower after 1 s; at most 0.4 s)
    clock = FakeClock()
    breaker = CircuitBreaker(
        min_calls=1, cooldown=0.1, max_cooldown=0.4, patience=1.0, clock=clock
    )
    breaker.failed()
    waits, down = [breaker.retry_after()], 0.0
    # When every probe fails for 2 s, then one succeeds
    while down < 2.0:
        wait = breaker.retry_after()
        clock.now += wait
        down += wait
        assert breaker.allow()
        breaker.failed()
        waits.append(breaker.retry_after())
    clock.now += breaker.retry_after()
    assert breaker.allow()
    breaker.succeeded()
    # Then it probed every 0.1 s for the first second (a short stall costs at
    # most 0.1 s more than itself), then every 0.2, 0.4, 0.4 s; closed, the
    # window is forgotten and the next opening waits 0.1 s again
    assert waits[:10] == pytest.approx([0.1] * 10)
    assert waits[10:13] == pytest.approx([0.2, 0.4, 0.4])
    assert waits[13:] == pytest.approx([0.4] * len(waits[13:]))
    assert breaker.state is BreakerState.CLOSED
    assert breaker.counts() == (1, 0)
    breaker.failed()
    assert breaker.retry_after() == pytest.approx(0.1)


def test_breaker__open__lets_one_probe_through_per_cooldown():
    # Given an open breaker
    clock = FakeClock()
    breaker = CircuitBreaker(min_calls=1, cooldown=5.0, max_cooldown=5.0, clock=clock)
    breaker.failed()
    # When the cooldown passes, then two callers ask
    before = breaker.allow()
    clock.now += 5.0
    probes = [breaker.allow(), breaker.allow()]
    # Then exactly one probe goes; its failure reopens for another cooldown
    assert before is False
    assert probes == [True, False]
    breaker.failed()
    assert breaker.state is BreakerState.OPEN
    assert breaker.retry_after() == 5.0


def _fail(breaker: CircuitBreaker) -> BreakerState:
    breaker.failed()
    return breaker.state


def test_breaker__probe_never_reports__another_probe_after_a_cooldown():
    # Given an open breaker whose probe went out and never reported (its caller died)
    clock = FakeClock()
    breaker = CircuitBreaker(min_calls=1, cooldown=5.0, max_cooldown=5.0, clock=clock)
    breaker.failed()
    clock.now += 5.0
    assert breaker.allow()
    # When callers ask during the next cooldown, then after it
    during = breaker.allow()
    clock.now += 5.0
    after = [breaker.allow(), breaker.allow()]
    # Then none goes while the probe may still answer, then one new probe goes,
    # and its success closes the breaker
    assert during is False
    assert after == [True, False]
    breaker.succeeded()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.allow()


def test_local_buckets__after_refill_time__admit_again():
    # Given a local share of 1 token refilling every 4 s (1 per second over 4 gateways)
    clock = FakeClock()
    plan = compile_policy(policy("default", "*", limit("ip", 1, 1, 4)), cost=1, share=4)
    buckets = LocalBuckets(gateways=4, clock=clock)
    first, second = buckets(["k"], plan), buckets(["k"], plan)
    # When 4 s pass
    clock.now += 4.0
    third = buckets(["k"], plan)
    # Then the bucket admitted, rejected, then admitted again
    assert [first[0], second[0], third[0]] == [1, 0, 1]


def test_local_buckets__more_keys_than_max__forgets_the_oldest():
    plan = compile_policy(policy("default", "*", limit("ip", 1, 60, 1)), cost=1)
    buckets = LocalBuckets(gateways=1, max_keys=2, clock=FakeClock())
    for key in ("a", "b", "c"):
        buckets([key], plan)
    assert buckets(["a"], plan)[0] == 1  # forgotten, so full again
    assert buckets(["c"], plan)[0] == 0
