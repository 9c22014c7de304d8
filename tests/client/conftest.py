"""Fixtures of the enforcement client's tests: rules, and real Redis / Redis Cluster stores.

Decision tests take the ``store`` fixture, parametrized over a plain Redis and a
real 3-master Redis Cluster (each started once per test worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import redis
import redis.asyncio

from sluice import Dimension, Limit, Policy, Route, Rules
from sluice.bucket import connect, connect_async
from tests.client.factories import REDIS_TIMEOUT
from tests.servers import RedisClusterServers


@pytest.fixture
def rules_with_override():
    expires_at = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(days=1)
    per_tenant = Limit(Dimension.TENANT, 10, 1, 20)
    rules = Rules(
        tiers={"pro": "Pro"},
        tenants={"acme": "pro"},
        routes={"search": Route("search", ("GET",), "/v1/search")},
        policies=(
            Policy("default", "*", (per_tenant,)),
            Policy("tier:pro", "search", (Limit(Dimension.TENANT, 50, 1, 100),)),
            Policy(
                "tenant:acme",
                "search",
                (Limit(Dimension.TENANT, 500, 1, 1000),),
                expires_at=expires_at,
            ),
        ),
    )
    return rules, expires_at


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A real Redis Cluster (3 masters on loopback) of this test worker's own."""
    cluster = RedisClusterServers().start()
    yield cluster
    cluster.cleanup()


@dataclass
class Store:
    """A Redis deployment under test: a plain server or a cluster, with sync and async clients."""

    kind: str  #: "redis" or "cluster"
    url: str
    client: redis.Redis | redis.RedisCluster  #: for the limiter (REDIS_TIMEOUT)
    inspect: redis.Redis | redis.RedisCluster  #: for assertions (decoded replies)

    @property
    def cluster(self) -> bool:
        return self.kind == "cluster"

    def async_client(self) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
        return connect_async(self.url, timeout=REDIS_TIMEOUT, cluster=self.cluster)

    def flush_scripts(self) -> None:
        """SCRIPT FLUSH on every primary: the next EVALSHA meets NOSCRIPT."""
        if isinstance(self.inspect, redis.RedisCluster):
            for node in self.inspect.get_primaries():
                node.redis_connection.script_flush()
        else:
            self.inspect.script_flush()

    def flush(self) -> None:
        if isinstance(self.inspect, redis.RedisCluster):
            self.inspect.flushdb(target_nodes=redis.RedisCluster.PRIMARIES)
        else:
            self.inspect.flushdb()


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def store(request, redis_server) -> Iterator[Store]:
    """A flushed plain Redis, then a flushed Redis Cluster: decision tests run on both."""
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster").url if cluster else redis_server.url
    # A generous timeout: these tests check decisions, not how slowness is handled.
    client = connect(url, timeout=REDIS_TIMEOUT, cluster=cluster)
    inspect = (
        redis.RedisCluster.from_url(url, decode_responses=True)
        if cluster
        else redis.Redis.from_url(url, decode_responses=True)
    )
    store = Store(request.param, url, client, inspect)
    store.flush()
    yield store
    store.flush()
    client.close()
    inspect.close()
