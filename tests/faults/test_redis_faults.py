"""Redis slow, and Redis killed and restarted, while gateways decide (real servers).

Bounds on time here are generous on purpose: they prove that no decision waits
for the fault (no pile-up) and that recovery comes, not how fast this machine is.
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import redis

from sluice import BreakerState, CircuitBreaker, Limiter
from sluice.bucket import SCRIPT, connect
from tests.faults.traffic import (
    RULES,
    Traffic,
    between,
    first_healthy_after,
    until_recovered,
    wrong_modes,
)
from tests.servers import RedisServer

TIMEOUT = 0.02  #: the limiter's Redis timeout, seconds
COOLDOWN = 0.5  #: the breaker's probe interval, seconds


@pytest.fixture
def server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def limiter_on(server: RedisServer, timeout: float = TIMEOUT) -> Limiter:
    return Limiter(
        connect(server.url, timeout=timeout),
        RULES,
        breaker=CircuitBreaker(min_calls=5, cooldown=COOLDOWN),
    )


def test_redis_paused__under_load__fails_over_per_route_without_pile_up_then_recovers(
    server,
):
    # Given 4 threads deciding through one limiter (20 ms timeout) on a healthy Redis
    limiter = limiter_on(server)
    baseline_threads = threading.active_count()
    traffic = Traffic(limiter).start()
    time.sleep(0.5)
    # When Redis stops answering writes (EVALSHA) for 3 s, under load
    admin = redis.Redis.from_url(server.url)
    admin.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    paused = time.monotonic()  # the reply came: the pause is in force from here
    time.sleep(2.8)
    back = time.monotonic()
    admin.execute_command("CLIENT", "UNPAUSE")
    until_recovered(limiter)
    seen = traffic.stop()
    during = between(seen, paused, back)
    # Then during the pause every decision is degraded, by its route's mode
    assert during
    healthy = [(s.at - paused, s.seconds) for s in during if not s.decision.degraded]
    assert not healthy, (
        f"used Redis during the pause (s after it began, took): {healthy[:5]}"
    )
    assert not wrong_modes(during)
    assert {s.decision.route for s in during} == {
        "search",
        "orders.read",
        "orders.create",
    }
    # and none waited for Redis: no pile-up of threads or of time. A loaded CI machine
    # can stall a thread for a second; waiting on Redis would take the whole 3 s pause.
    assert _p99(during) < 0.5
    assert max(s.seconds for s in during) < 2.5
    # (one more: the limiter's backlog thread, charging Redis for what failed open)
    assert traffic.peak_threads <= baseline_threads + traffic.threads + 1
    assert (
        limiter.bucket.client.connection_pool._created_connections
        <= 2 * traffic.threads
    )
    # and once Redis answers again, decisions use it within a few cooldowns
    recovery = first_healthy_after(seen, back)
    assert recovery is not None
    assert recovery < 5 * COOLDOWN + 1.0
    latencies = sorted(s.seconds for s in during)
    print(
        f"fault: Redis paused 3 s: p99 {latencies[int(0.99 * len(latencies))] * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms (timeout {TIMEOUT * 1000:.0f} ms) over "
        f"{len(during)} decisions; healthy again {recovery:.2f} s after the pause"
    )


def test_redis_killed_and_restarted__under_load__breaker_opens_then_script_reloaded(
    server,
):
    # Given traffic through one limiter on a healthy Redis (a timeout long enough
    # that a busy machine does not trip it: this test is about a dead server)
    limiter = limiter_on(server, timeout=0.2)
    traffic = Traffic(limiter).start()
    time.sleep(0.5)
    # When Redis is killed (SIGKILL) under load, and started again empty 3 s later
    server.kill()
    killed = time.monotonic()
    time.sleep(1.5)
    state_while_down = limiter.breaker.state
    time.sleep(1.5)
    restarted = time.monotonic()
    server.start()
    # (2.5 s of traffic after the breaker closes: the settled decisions below start
    # 0.5 s after the first healthy one, which a loaded machine can delay)
    until_recovered(limiter, then=2.5)
    seen = traffic.stop()
    down = between(seen, killed, restarted)
    # Then the breaker opened, each route failed over by its mode, nothing hung
    assert state_while_down is not BreakerState.CLOSED
    assert any(s.decision.error == "circuit open" for s in down)
    assert all(s.decision.degraded for s in down)
    assert not wrong_modes(down)
    assert _p99(down) < 0.5  # see the pause test: stalls happen, hanging would take 3 s
    assert max(s.seconds for s in down) < 2.5
    # and after the restart the script was loaded again (NOSCRIPT) and decisions use Redis
    recovery = first_healthy_after(seen, restarted)
    assert recovery is not None
    assert recovery < 5 * COOLDOWN + 1.0
    settled = between(seen, restarted + recovery + 0.5, float("inf"))
    assert settled
    assert sum(s.decision.degraded for s in settled) <= len(settled) // 100
    print(
        f"fault: Redis killed: {sum(s.decision.error == 'circuit open' for s in down)} "
        f"of {len(down)} decisions skipped Redis (breaker open); healthy again "
        f"{recovery:.2f} s after the restart; slowest {max(s.seconds for s in down) * 1000:.0f} ms"
    )
    sha = hashlib.sha1(SCRIPT).hexdigest()
    assert redis.Redis.from_url(server.url).script_exists(sha) == [True]


def _p99(samples) -> float:
    times = sorted(s.seconds for s in samples)
    return times[int(0.99 * (len(times) - 1))]
