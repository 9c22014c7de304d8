"""One Redis Cluster master killed under load, its replica promoted: decisions go on."""

from __future__ import annotations

import time

import pytest
import redis
from redis.crc import key_slot

from sluice import CircuitBreaker, Limiter
from sluice.bucket import connect
from tests.faults.traffic import (
    RULES,
    Seen,
    Traffic,
    between,
    first_healthy_after,
    until_recovered,
    wrong_modes,
)
from tests.servers import RedisClusterServers

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster():
    """3 masters with one replica each; a silent master is failed after 1 s; the
    masters that are up keep serving their slots meanwhile (as the operator guide
    recommends for the counters' cluster)."""
    servers = RedisClusterServers(
        replicas=1,
        node_timeout=1000,
        extra=("--cluster-require-full-coverage", "no"),
    )
    try:
        servers.start().wait_replicas()
        yield servers
    finally:
        servers.cleanup()


def wait_promoted(
    cluster: RedisClusterServers, replica, timeout: float = 20.0
) -> float:
    """Wait until ``replica`` says it is a master; return when it did (monotonic)."""
    deadline = time.monotonic() + timeout
    while cluster.role(replica) != "master":
        assert time.monotonic() < deadline, "the replica was never promoted"
        time.sleep(0.05)
    return time.monotonic()


def replica_of(cluster: RedisClusterServers, master) -> object:
    master_id = redis.Redis(port=master.port).cluster("MYID")
    for node in cluster.nodes:
        info = redis.Redis(port=node.port).info("replication")
        if info["role"] == "slave" and info["master_port"] == master.port:
            return node
    raise AssertionError(f"no replica of {master.port} ({master_id})")


def slots_of(master) -> list[tuple[int, int]]:
    """The slot ranges ``master`` serves."""
    ranges = redis.Redis(port=master.port).cluster("SLOTS")
    return [(r[0], r[1]) for r in ranges if r[2][1] == master.port]


def on(ranges: list[tuple[int, int]], tenant: str) -> bool:
    """Whether ``tenant``'s buckets (hash tag ``{tenant:<slug>}``) fall in ``ranges``."""
    slot = key_slot(f"tenant:{tenant}".encode())
    return any(low <= slot <= high for low, high in ranges)


def test_cluster_master_killed__replica_promoted__decisions_continue(cluster):
    # Given traffic on 1000 tenants (every master's slots) through a cluster client
    client = connect(cluster.url, timeout=0.2, cluster=True)
    limiter = Limiter(client, RULES, breaker=CircuitBreaker(min_calls=5, cooldown=0.5))
    traffic = Traffic(limiter).start()
    time.sleep(0.5)
    master = next(n for n in cluster.nodes if cluster.role(n) == "master")
    replica = replica_of(cluster, master)
    lost = slots_of(master)
    # When that master is killed and the cluster promotes its replica
    killed = time.monotonic()
    master.kill()
    promoted = wait_promoted(cluster, replica)
    until_recovered(limiter, then=2.5)
    seen = traffic.stop()
    outage = between(seen, killed, promoted)
    # Then no decision hung and every degraded one followed its route's mode
    assert not wrong_modes(outage)
    slowest = max(s.seconds for s in seen)
    assert slowest < 2.0
    # and only the tenants of the lost master failed over (a breaker per master):
    # the others kept deciding in Redis
    elsewhere = [s for s in outage if not on(lost, s.tenant)]
    degraded_elsewhere = sum(s.decision.degraded for s in elsewhere)
    assert elsewhere
    assert degraded_elsewhere <= len(elsewhere) // 20
    # and after the promotion decisions use the cluster again, for every tenant
    recovery = first_healthy_after(seen, promoted)
    assert recovery is not None
    settled = between(seen, promoted + recovery + 1.0, float("inf"))
    assert settled
    assert sum(s.decision.degraded for s in settled) <= len(settled) // 100
    print(
        f"fault: cluster master killed: replica promoted {promoted - killed:.2f} s after the kill; during it "
        f"{sum(s.decision.degraded for s in outage)} of {len(outage)} degraded "
        f"({degraded_elsewhere} of {len(elsewhere)} on the other masters); "
        f"healthy again {recovery:.2f} s after; slowest decision {slowest * 1000:.0f} ms"
    )


def test_cluster_unreachable__every_node_down__route_modes_decide_nothing_raises():
    # Given a limiter on a 3-master cluster that has answered once
    servers = RedisClusterServers().start()
    try:
        limiter = Limiter(
            connect(servers.url, timeout=0.05, cluster=True),
            RULES,
            breaker=CircuitBreaker(min_calls=100),
        )
        assert not limiter.decide(route="search", tenant="t1").degraded
        # When every node is gone (the client cannot even refresh its slot map)
        for node in servers.nodes:
            node.kill()
        decisions = [
            limiter.decide(method=m, path=p, tenant=f"t{n}")
            for n in range(5)
            for m, p in (("GET", "/v1/search"), ("GET", "/v1/orders/1"))
        ]
    finally:
        servers.cleanup()
    # Then each request gets its route's failure mode instead of an exception
    assert all(d.degraded for d in decisions)
    assert not wrong_modes([Seen(0.0, 0.0, d) for d in decisions])
