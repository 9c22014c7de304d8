"""One Redis Cluster master killed under load, its replica promoted: decisions go on."""

from __future__ import annotations

import time

import pytest
import redis
from redis.crc import key_slot

from sluice import CircuitBreaker, Limiter
from sluice.bucket import connect
from tests.celery_fixtures import wait_until
from tests.faults.traffic import (
    PATIENCE,
    RULES,
    Seen,
    Traffic,
    WatchedBreaker,
    between,
    median,
    wait_seen,
    wrong_modes,
)
from tests.servers import RedisClusterServers

pytestmark = pytest.mark.cluster

#: The limiter's Redis timeout, seconds: a killed node refuses at once, so the
#: fault needs no short one. A call this machine still runs out of time for
#: says so (``Seen.timed_out``) and is not held against the product.
TIMEOUT = 0.2
SETTLED = 50  #: decisions per thread on the promoted replica before stopping


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
    cluster: RedisClusterServers, replica, timeout: float = PATIENCE
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
    # that has used every master
    client = connect(cluster.url, timeout=TIMEOUT, cluster=True)
    limiter = Limiter(client, RULES, breaker=WatchedBreaker(min_calls=5, cooldown=0.5))
    traffic = Traffic(limiter).start()
    master = next(n for n in cluster.nodes if cluster.role(n) == "master")
    replica = replica_of(cluster, master)
    lost = slots_of(master)
    wait_seen(traffic, lambda seen: _healthy_on(lost, seen), why="the master used")
    # When that master is killed and the cluster promotes its replica
    killed = time.monotonic()
    master.kill()
    promoted, mark = wait_promoted(cluster, replica), len(traffic.seen)
    # (counted from the answer of the first healthy decision on the lost slots:
    # the promoted replica known to answer; then every thread uses it a while)
    back = wait_seen(
        traffic,
        lambda seen: min(
            (s.answered for s in _healthy_on(lost, seen) if s.at >= promoted),
            default=None,
        ),
        since=mark,
        why="the promoted replica used",
    )
    wait_seen(
        traffic,
        lambda seen: all(
            len([s for s in _healthy_on(lost, seen) if s.at >= back and s.source == t])
            >= SETTLED
            for t in range(traffic.threads)
        ),
        since=mark,
        why=f"{SETTLED} decisions per thread on the promoted replica",
    )
    seen = traffic.stop()
    outage = between(seen, killed, promoted)
    # Then every degraded decision followed its route's mode, and those of the
    # lost master's tenants failed at once (its port refuses: a median, since one
    # stalled thread proves nothing, under the timeout none of them waits for)
    assert not wrong_modes(outage)
    gone = [s.seconds for s in outage if on(lost, s.tenant) and s.decision.degraded]
    assert gone
    assert median(gone) < TIMEOUT
    # and only the tenants of the lost master failed over (a breaker per master):
    # the others kept deciding in Redis, short of their own calls that this
    # machine ran out of time for
    elsewhere = [s for s in outage if not on(lost, s.tenant)]
    failed_elsewhere = sum(s.decision.degraded and not s.timed_out for s in elsewhere)
    assert elsewhere
    assert failed_elsewhere <= len(elsewhere) // 20
    # and no breaker refused its node longer than its wait after it last heard
    # of it
    breakers = [limiter.breaker, *limiter._node_breakers.values()]
    late = [x for b in breakers for x in b.late]
    assert not late, f"refusals past a breaker's wait: {late[:5]}"
    # and once the promoted replica answered, decisions use the cluster again, for
    # every tenant (waited for above), short of this machine's timeouts
    settled = [s for s in seen if s.at >= back]
    failed = sum(s.decision.degraded and not s.timed_out for s in settled)
    assert failed <= len(settled) // 100
    print(
        f"fault: cluster master killed: replica promoted {promoted - killed:.2f} s after "
        f"the kill; during it {sum(s.decision.degraded for s in outage)} of "
        f"{len(outage)} degraded ({failed_elsewhere} of {len(elsewhere)} on the other "
        f"masters, {sum(s.timed_out for s in elsewhere)} timed out); the lost tenants "
        f"answered in a median {median(gone) * 1000:.1f} ms; the promoted replica "
        f"used {back - promoted:.2f} s after the promotion; {failed} of {len(settled)} "
        f"failed after; slowest decision {max(s.seconds for s in seen) * 1000:.0f} ms"
    )


def _healthy_on(lost: list[tuple[int, int]], seen: list[Seen]) -> list[Seen]:
    return [s for s in seen if on(lost, s.tenant) and not s.decision.degraded]


def test_cluster_unreachable__every_node_down__route_modes_decide_nothing_raises():
    # Given a limiter on a 3-master cluster that has answered once
    servers = RedisClusterServers().start()
    try:
        limiter = Limiter(
            connect(servers.url, timeout=TIMEOUT, cluster=True),
            RULES,
            breaker=CircuitBreaker(min_calls=100),
        )
        wait_until(
            lambda: not limiter.decide(route="search", tenant="t1").degraded,
            timeout=PATIENCE,
            why="a decision in the cluster",
        )
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
