"""Short Redis stalls under load: bounded fail-open, and a breaker that comes back at once.

Two limiters (two gateway processes) x 4 threads hammer one tenant's search
(50/s, burst 100, fails open) while Redis is paused (``CLIENT PAUSE ... WRITE``)
for 300 ms, three times. What the issue measured before: 4.7 to 19 times the
limit admitted, and a second of degraded decisions after each stall. The
threads also send a tenant far from its limit, whose every decision asks Redis:
its answers show when Redis is used again after a pause.
"""

from __future__ import annotations

import time

import pytest
import redis

from sluice import Limiter
from sluice.bucket import connect
from tests.client.factories import limit, policy, rules, snapshot
from tests.faults.traffic import Hammer, between
from tests.servers import RedisServer

RATE, BURST = 50, 100
RULES = snapshot(
    rules(
        policy("default", "search", limit("tenant", RATE, 1, BURST)),
        policy("tenant:globex", "search", limit("tenant", 10**6, 1, 10**6)),
    )
)
TIMEOUT = 0.02  #: the limiter's Redis timeout: 20 ms (a loaded test machine stalls)
PAUSE = 0.3
GATEWAYS = 2


@pytest.fixture
def server():
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_redis_paused_300ms_three_times__admits_within_the_bound_and_recovers_fast(
    server,
):
    # Given two gateways hammering one tenant's search, saturated well before
    limiters = [
        Limiter(connect(server.url, timeout=TIMEOUT), RULES) for _ in range(GATEWAYS)
    ]
    admin = redis.Redis.from_url(server.url)
    hammer = Hammer(limiters, tenants=("acme", "globex")).start()
    began = time.monotonic()
    time.sleep(1.0)
    # When Redis stops running scripts for 300 ms, three times, 1.2 s apart
    pauses = []
    for _ in range(3):
        admin.execute_command("CLIENT", "PAUSE", int(PAUSE * 1000), "WRITE")
        pauses.append(time.monotonic())
        time.sleep(1.2)
    seen = hammer.stop()
    elapsed = time.monotonic() - began
    free = [s for s in seen if s.tenant == "globex"]
    seen = [s for s in seen if s.tenant == "acme"]
    # Then the fleet admitted at most what Redis grants plus the documented bound
    # of a stall: gateways x (burst + rate x stall), per stall
    admitted = sum(s.decision.allowed for s in seen)
    fail_open = sum(s.decision.fail_open for s in seen)
    per_stall = GATEWAYS * (BURST + RATE * PAUSE)
    assert admitted <= BURST + RATE * elapsed + len(pauses) * per_stall
    assert fail_open <= len(pauses) * per_stall
    # and the route failed open, not closed: admitted or limited, never a 503
    assert {s.decision.status for s in seen} <= {200, 429}
    # and each stall cost about itself: once Redis is back, the tenant far from
    # its limit is decided in Redis again within a cooldown (0.1 s), not after
    # the old breaker's whole second
    recoveries, spans = [], []
    for start in pauses:
        window = between(free, start - 0.05, start + 1.0)
        degraded = [s for s in window if s.decision.degraded]
        assert degraded, "the pause was not felt"
        back = start + PAUSE
        healthy = next(s for s in free if s.at >= back and not s.decision.degraded)
        recoveries.append(healthy.at - back)
        spans.append(healthy.at - min(s.at for s in degraded))
    assert sorted(recoveries)[1] < 0.2
    assert max(recoveries) < 0.6
    # and no decision waited for Redis much beyond the timeout (no pile-up)
    slow = sorted(s.seconds for s in seen)
    assert slow[int(0.99 * (len(slow) - 1))] < TIMEOUT + 0.05
    print(
        f"fault: Redis paused 300 ms x3 under {GATEWAYS} gateways x 4 threads on one "
        f"tenant (50/s, burst 100): admitted {admitted:,} in {elapsed:.1f} s "
        f"(Redis maximum {BURST + RATE * elapsed:,.0f}), {fail_open} of them failing "
        f"open (bound {len(pauses) * per_stall:,.0f}); degraded spans "
        f"{', '.join(f'{x * 1000:.0f}' for x in spans)} ms; recovered "
        f"{', '.join(f'{x * 1000:.0f}' for x in recoveries)} ms after each pause; "
        f"p99 {slow[int(0.99 * (len(slow) - 1))] * 1000:.1f} ms over {len(seen):,} decisions"
    )
