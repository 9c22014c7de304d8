"""A gateway on a Redis Cluster: several seeds, a start while the cluster is down,
and calls bounded by the timeout while the cluster answers CLUSTERDOWN."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from gateway.demo import build
from sluice import AsyncLimiter, CircuitBreaker, Limiter, Outcome
from sluice.bucket import connect, connect_async
from sluice.cluster import DeferredCluster
from tests.celery_fixtures import wait_until
from tests.faults.traffic import PATIENCE, RULES, Seen, median, wrong_modes
from tests.servers import RedisClusterServers, free_port

pytestmark = pytest.mark.cluster

ROUTES = (("GET", "/v1/search"), ("GET", "/v1/orders/1"), ("POST", "/v1/orders"))
#: The limiter's Redis timeout where the fault does not need a short one (a dead
#: seed, a stopped node: both refuse at once), seconds.
TIMEOUT = 1.0
#: The short timeout of the CLUSTERDOWN tests, seconds: a call then takes one
#: round trip, well under it; redis-py alone sleeps 0.25 s in the call.
SHORT = 0.05
CLUSTERDOWN_SLEEP = 0.25


@pytest.fixture
def cluster():
    servers = RedisClusterServers(node_timeout=1000)
    try:
        yield servers.start()
    finally:
        servers.cleanup()


def seeds(cluster: RedisClusterServers, *, dead_first: bool = True) -> str:
    """``redis://<a dead port>,<node>,<node>...``: the first seed answers nothing."""
    nodes = [f"127.0.0.1:{node.port}" for node in cluster.nodes]
    first = (
        f"redis://127.0.0.1:{free_port()}" if dead_first else f"redis://{nodes.pop(0)}"
    )
    return ",".join([first, *nodes])


def decide_all(limiter: Limiter, tenants: range) -> list[Seen]:
    seen = []
    for n in tenants:
        for method, path in ROUTES:
            began = time.monotonic()
            decision = limiter.decide(method=method, path=path, tenant=f"t{n}")
            seen.append(Seen(began, time.monotonic() - began, decision, f"t{n}"))
    return seen


def in_cluster(seen: list[Seen]) -> bool:
    """Whether ``seen`` was decided in the cluster: some decisions, and none
    degraded but by a call this machine ran out of time for."""
    return (
        bool(seen)
        and not any(s.decision.degraded and not s.timed_out for s in seen)
        and any(not s.decision.degraded for s in seen)
    )


def test_cluster_seeds__first_seed_dead__maps_the_cluster_from_the_next(cluster):
    # Given a seed list whose first node does not exist
    client = connect(seeds(cluster), timeout=TIMEOUT, cluster=True)
    # When a gateway decides
    decisions = decide_all(Limiter(client, RULES), range(20))
    # Then it mapped the cluster from the next seed and decides in it
    assert isinstance(client, DeferredCluster)
    assert client.ready
    assert in_cluster(decisions)


def test_cluster_down_at_start__gateway_starts_decides_by_mode_then_uses_it(
    cluster, tmp_path
):
    # Given a cluster whose every node is stopped
    for node in cluster.nodes:
        node.stop()
    # When a gateway starts on it, and requests come
    client = connect(seeds(cluster, dead_first=False), timeout=TIMEOUT, cluster=True)
    limiter = Limiter(client, RULES)
    while_down = decide_all(limiter, range(10))
    # and the demo gateway, configured on the same seeds, builds too
    demo = build(
        {
            "SLUICE_REDIS_URL": seeds(cluster, dead_first=False),
            "SLUICE_REDIS_CLUSTER": "1",
            "SLUICE_REDIS_TIMEOUT": "0.05",
            "SLUICE_BUNDLE_FILE": str(tmp_path / "none.json"),
        }
    )
    demo_decision = demo.limiter.decide(route="search", tenant="t1")
    # Then it started (no exception) and each route's failure mode decides
    assert demo_decision.degraded
    assert not client.ready
    assert all(s.decision.degraded for s in while_down)
    assert not wrong_modes(while_down)
    assert {s.decision.outcome for s in while_down} >= {
        Outcome.FAIL_OPEN,
        Outcome.FAIL_CLOSED,
        Outcome.LOCAL,
    }
    # and once the nodes are back, decisions use the cluster
    for node in cluster.nodes:
        node.start()
    cluster.wait_ready()
    back = time.monotonic()
    wait_until(
        lambda: not limiter.decide(route="search", tenant="t1").degraded,
        timeout=PATIENCE,
        every=0.02,
    )
    recovered = time.monotonic() - back
    after = decide_all(limiter, range(10, 30))
    assert client.ready
    # (one may meet a master still settling)
    assert sum(s.decision.degraded and not s.timed_out for s in after) <= 1
    print(
        f"fault: cluster down when the gateway started: {len(while_down)} decisions by "
        f"failure mode; the cluster used {recovered:.2f} s after it was ready again"
    )


def lose_a_master(cluster: RedisClusterServers) -> None:
    """Kill a master and wait until the others declare the cluster failed (CLUSTERDOWN)."""
    cluster.nodes[-1].kill()
    survivors = [redis.Redis(port=n.port) for n in cluster.nodes[:-1]]
    wait_until(
        lambda: all(c.cluster("INFO")["cluster_state"] == "fail" for c in survivors),
        timeout=PATIENCE,
        why="cluster_state:fail",
    )
    for client in survivors:
        client.close()


def assert_failed_over_within_timeout(seen: list[Seen], label: str) -> None:
    """Every call failed over by its route's mode, answered by the cluster at once
    (``ClusterUnavailable``), in less than the 50 ms timeout: redis-py's own
    handling would sleep 0.25 s in each CLUSTERDOWN call. Judged on the median:
    a stalled thread can make a few calls slow, but no load makes a call that
    slept 0.25 s faster, so a median under the timeout is no sleep's."""
    assert all(s.decision.degraded for s in seen)
    assert not wrong_modes(seen)
    errors = {(s.decision.error or "").split(":")[0] for s in seen}
    assert "ClusterUnavailable" in errors
    times = sorted(s.seconds for s in seen)
    assert median(times) < SHORT < CLUSTERDOWN_SLEEP
    print(
        f"fault: cluster down (a master lost, full coverage), {label}: {len(seen)} "
        f"calls, median {median(times) * 1000:.1f} ms, "
        f"p90 {times[int(0.9 * len(times))] * 1000:.1f} ms, max "
        f"{times[-1] * 1000:.0f} ms (timeout 50 ms; redis-py alone sleeps 250 ms)"
    )


def test_clusterdown__a_master_lost_with_full_coverage__calls_bounded_by_timeout(
    cluster,
):
    # Given a gateway whose breaker never opens (every call goes to the cluster),
    # 50 ms timeout, on a cluster that requires full coverage (Redis's default)
    limiter = Limiter(
        connect(cluster.url, timeout=SHORT, cluster=True),
        RULES,
        breaker=CircuitBreaker(min_calls=10**9),
    )
    assert in_cluster(decide_all(limiter, range(10)))
    # When a master dies and the others declare the cluster failed (CLUSTERDOWN)
    lose_a_master(cluster)
    seen = decide_all(limiter, range(60))
    # Then every call failed over by its route's mode, within about the timeout
    assert_failed_over_within_timeout(seen, "sync")


async def adecide_all(limiter: AsyncLimiter, tenants: range) -> list[Seen]:
    seen = []
    for n in tenants:
        for method, path in ROUTES:
            began = time.monotonic()
            decision = await limiter.decide(method=method, path=path, tenant=f"t{n}")
            seen.append(Seen(began, time.monotonic() - began, decision, f"t{n}"))
    return seen


@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelined", "one-by-one"])
def test_clusterdown__asyncio_limiter__calls_bounded_by_timeout(cluster, pipelining):
    # Given an asyncio gateway on the same cluster, its breaker never opening
    async def lose_a_master_under(limiter: AsyncLimiter) -> list[Seen]:
        before = await adecide_all(limiter, range(10))
        assert in_cluster(before)
        # When a master dies and the others declare the cluster failed
        lose_a_master(cluster)
        try:
            return await adecide_all(limiter, range(60))
        finally:
            await limiter.aclose()

    limiter = AsyncLimiter(
        connect_async(cluster.url, timeout=SHORT, cluster=True),
        RULES,
        breaker=CircuitBreaker(min_calls=10**9),
        pipelining=pipelining,
    )
    seen = asyncio.run(lose_a_master_under(limiter))
    # Then every call failed over by its route's mode at once, pipelined or not
    assert_failed_over_within_timeout(seen, f"asyncio, pipelining {pipelining}")
