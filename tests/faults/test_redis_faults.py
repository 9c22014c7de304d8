"""Redis slow, and Redis killed and restarted, while gateways decide (real servers).

Every verdict here is about what was decided and counted, not about how fast
this machine is: the fault lasts until the product has shown what it does
during it (a test waits for that, never a fixed time), and time is only judged
against the limiter's own configuration (its timeout, the breaker's cooldown).
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import redis

from sluice import BreakerState, Limiter
from sluice.bucket import SCRIPT, connect
from tests.celery_fixtures import wait_until
from tests.faults.traffic import (
    PATIENCE,
    ROUTES,
    RULES,
    Traffic,
    WatchedBreaker,
    between,
    each_source,
    first_healthy_after,
    median,
    wait_seen,
    wrong_modes,
)
from tests.servers import RedisServer

TIMEOUT = 0.05  #: the limiter's Redis timeout in the pause test, seconds
COOLDOWN = 0.5  #: the breaker's probe interval, seconds
FAULT = 3.0  #: the least time each fault lasts, seconds
SETTLED = 50  #: healthy decisions each thread must make once Redis is back
#: The pause is lifted by UNPAUSE; this only ends it if the test dies first.
HOLD_MS = int(PATIENCE * 2 * 1000)


@pytest.fixture
def server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def limiter_on(server: RedisServer, timeout: float = TIMEOUT) -> Limiter:
    return Limiter(
        connect(server.url, timeout=timeout),
        RULES,
        breaker=WatchedBreaker(min_calls=5, cooldown=COOLDOWN),
    )


def healthy(seen) -> bool:
    return any(not s.decision.degraded for s in seen)


def every_thread_every_route(traffic: Traffic):
    """A condition: every thread has answered each route (``seen`` given)."""
    return lambda seen: (
        each_source(traffic, seen)
        and (len({s.decision.route for s in seen}) == len(ROUTES))
    )


def wait_open_and_deciding(
    traffic: Traffic, breaker: WatchedBreaker, *, why: str
) -> float:
    """Wait until ``breaker`` opens, then until every thread has decided every route
    after that (a thread stuck on Redis would never get there); return when it opened."""
    wait_until(
        lambda: breaker.state is not BreakerState.CLOSED,
        timeout=PATIENCE,
        every=0.01,
        why="the breaker opening",
    )
    opened, mark = time.monotonic(), len(traffic.seen)
    wait_seen(
        traffic,
        lambda seen: every_thread_every_route(traffic)(
            [s for s in seen if s.at >= opened]
        ),
        since=mark,
        why=why,
    )
    return opened


def probes_allowed(breaker: WatchedBreaker, seconds: float) -> int:
    """The most calls an open breaker lets through in ``seconds``: one per cooldown
    (its shortest wait), and the one due when they began."""
    return int(seconds / breaker.cooldown) + 1


def test_redis_paused__under_load__fails_over_per_route_without_pile_up_then_recovers(
    server,
):
    # Given 4 threads deciding through one limiter (50 ms timeout) on a Redis
    # it has used
    limiter = limiter_on(server)
    breaker = limiter.breaker
    baseline_threads = threading.active_count()
    traffic = Traffic(limiter).start()
    wait_seen(traffic, healthy, why="a decision in Redis")
    # When Redis stops answering writes (EVALSHA), under load, until every thread
    # has gone on deciding with the breaker open and at least FAULT s have passed
    # (lifted by UNPAUSE, so no decision can be answered by Redis before `back`)
    admin = redis.Redis.from_url(server.url)
    admin.execute_command("CLIENT", "PAUSE", HOLD_MS, "WRITE")
    paused = time.monotonic()  # the reply came: the pause is in force from here
    try:
        opened = wait_open_and_deciding(
            traffic, breaker, why="every thread deciding while Redis is paused"
        )
        time.sleep(max(0.0, paused + FAULT - time.monotonic()))
        back = time.monotonic()
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    mark = len(traffic.seen)
    wait_seen(
        traffic,
        lambda seen: healthy(s for s in seen if s.at >= back),
        since=mark,
        why="Redis used again",
    )
    seen = traffic.stop()
    during = between(seen, paused, back)
    # Then during the pause every decision is degraded, by its route's mode
    answered = [(s.at - paused, s.seconds) for s in during if not s.decision.degraded]
    assert not answered, (
        f"used Redis during the pause (s after it began, took): {answered[:5]}"
    )
    assert not wrong_modes(during)
    # and none waited for Redis: once the breaker was open every thread went on
    # deciding (waited for above), Redis was asked at most once per cooldown, and
    # a call that did ask it gave up after one timeout (a median: one stalled
    # thread proves nothing; a second wait on the socket would double every one)
    asked = [s for s in between(seen, opened, back) if not s.refused]
    assert len(asked) <= probes_allowed(breaker, back - opened)
    timed_out = [s.seconds for s in during if s.timed_out]
    assert timed_out
    assert median(timed_out) < 2 * TIMEOUT
    # and no pile-up of threads or connections (one more thread: the limiter's
    # backlog, charging Redis for what failed open)
    assert traffic.peak_threads <= baseline_threads + traffic.threads + 1
    assert (
        limiter.bucket.client.connection_pool._created_connections
        <= 2 * traffic.threads
    )
    # and the breaker never refused Redis longer than its wait after it last
    # heard of it: Redis answering again is used within one wait (waited for above)
    assert breaker.refusals
    assert not breaker.late, f"refusals past the breaker's wait: {breaker.late[:5]}"
    recovery = first_healthy_after(seen, back)
    print(
        f"fault: Redis paused {back - paused:.1f} s: {len(during)} decisions by mode, "
        f"{len(timed_out)} timed out (median {median(timed_out) * 1000:.1f} ms, "
        f"timeout {TIMEOUT * 1000:.0f} ms), {len(asked)} probes with the breaker open "
        f"(at most {probes_allowed(breaker, back - opened)}), slowest "
        f"{max(s.seconds for s in during) * 1000:.0f} ms; healthy again {recovery:.2f} s "
        f"after the pause (breaker's longest wait {breaker.longest_wait:.2f} s)"
    )


def test_redis_killed_and_restarted__under_load__breaker_opens_then_script_reloaded(
    server,
):
    # Given traffic through one limiter on a Redis it has used (a timeout that a
    # busy machine does not run out of: a dead server refuses at once, so the
    # fault does not need a short one)
    limiter = limiter_on(server, timeout=1.0)
    breaker = limiter.breaker
    traffic = Traffic(limiter).start()
    wait_seen(traffic, healthy, why="a decision in Redis")
    # When Redis is killed (SIGKILL) under load, and started again empty once every
    # thread has gone on deciding with the breaker open and FAULT s have passed
    server.kill()
    killed = time.monotonic()
    opened = wait_open_and_deciding(
        traffic, breaker, why="every thread deciding while Redis is dead"
    )
    time.sleep(max(0.0, killed + FAULT - time.monotonic()))
    restarted, mark = time.monotonic(), len(traffic.seen)
    server.start()
    # (counted from the answer of the first healthy decision: Redis known to answer)
    back = wait_seen(
        traffic,
        lambda seen: min(
            (s.answered for s in seen if s.at >= restarted and not s.decision.degraded),
            default=None,
        ),
        since=mark,
        why="Redis used again",
    )
    wait_seen(
        traffic,
        lambda seen: all(
            sum(
                1
                for s in seen
                if s.source == thread and s.at >= back and not s.decision.degraded
            )
            >= SETTLED
            for thread in range(traffic.threads)
        ),
        since=mark,
        why=f"{SETTLED} healthy decisions per thread",
    )
    seen = traffic.stop()
    down = between(seen, killed, restarted)
    # Then the breaker opened, each route failed over by its mode, and the calls
    # that reached for Redis failed at once (refused), not by waiting on a timeout
    assert any(s.refused for s in down)
    assert all(s.decision.degraded for s in down)
    assert not wrong_modes(down)
    waited = [s.decision.error for s in down if not s.refused and s.timed_out]
    assert not waited, f"calls to a dead Redis waited for the timeout: {waited[:3]}"
    asked = [s for s in between(seen, opened, restarted) if not s.refused]
    assert len(asked) <= probes_allowed(breaker, restarted - opened)
    # and the breaker never refused longer than its wait after it last heard of
    # Redis, so the restarted one was used within one wait
    assert not breaker.late, f"refusals past the breaker's wait: {breaker.late[:5]}"
    # and once Redis answered, decisions used it (every thread, waited for above);
    # one that did not was this machine's timeout, or a connection the restart
    # broke (one per thread), never another failure
    settled = [s for s in seen if s.at >= back]
    broken = [s for s in settled if "ConnectionError" in (s.decision.error or "")]
    odd = [
        s.decision.error
        for s in settled
        if s.decision.degraded
        and not (s.timed_out or s.refused or "ConnectionError" in s.decision.error)
    ]
    assert not odd, f"failed after Redis was back: {odd[:3]}"
    assert len(broken) <= traffic.threads
    sha = hashlib.sha1(SCRIPT).hexdigest()
    assert redis.Redis.from_url(server.url).script_exists(sha) == [True]
    print(
        f"fault: Redis killed {restarted - killed:.1f} s: {sum(s.refused for s in down)} "
        f"of {len(down)} decisions skipped Redis (breaker open), {len(asked)} probes; "
        f"healthy again {back - restarted:.2f} s after the restart; "
        f"{sum(s.decision.degraded for s in settled)} of {len(settled)} degraded after; "
        f"slowest while down {max(s.seconds for s in down) * 1000:.0f} ms"
    )
