"""The token bucket in Redis: the Lua script, the clients, and a look at buckets.

The bucket's geometry (its units in microseconds) is the GCRA kind's
(:mod:`.kinds.gcra`), re-exported here where it used to live.

``lua/token_bucket.lua`` is package data and the only place the algorithm runs
against Redis; :class:`TokenBucket` runs it by EVALSHA like every script of the
client (:class:`~.scripts.Script`: one round trip, NOSCRIPT reloaded).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Awaitable, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.retry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .cluster import cluster_client, no_clusterdown_sleep, parse_seeds
from .kinds.gcra import Geometry, geometry
from .kinds.sliding import Sliding, sliding_count
from .pipelining import AutoPipeline
from .scripts import AsyncScript, Client, Script

__all__ = [
    "DEFAULT_REDIS_TIMEOUT",
    "SCRIPT",
    "STORE_ERRORS",
    "AsyncTokenBucket",
    "Client",
    "Geometry",
    "TokenBucket",
    "connect",
    "connect_async",
    "geometry",
    "patient",
    "peek",
    "peek_windows",
]

SCRIPT = (
    importlib.resources.files("sluice").joinpath("lua/token_bucket.lua").read_bytes()
)

_MICROS = 1_000_000

#: Seconds a limiter waits for Redis before the route's failure mode decides.
#: Measured (``bench/redis_timeout.py``, docs/benchmarks.md): on a 2-core machine
#: beside 2 CPU hogs per core, 2.5-4.3 % of decisions on a healthy local Redis
#: took over 5 ms and 0.04-0.06 % over 50 ms; quiet, none did.
DEFAULT_REDIS_TIMEOUT = 0.05

#: What a failed store call raises. A cluster client that cannot reach any node
#: to refresh its slot map raises RedisClusterException, which is not a RedisError.
STORE_ERRORS: tuple[type[Exception], ...] = (
    redis.RedisError,
    redis.exceptions.RedisClusterException,
)


def peek(client: redis.Redis, keys: Sequence[str]) -> tuple[list[int], int]:
    """Read buckets without charging them: each one's debt in µs (0 for a full or
    absent bucket), and the Redis time of the reading (µs since the epoch).

    The debt is what the script computes before charging (``lua/token_bucket.lua``):
    ``max(TAT - now, 0)``; :meth:`Geometry.remaining` turns it into tokens left.
    One round trip; meant for people looking (the admin), not the request path.
    """
    pipe = client.pipeline(transaction=False)
    pipe.time()
    for key in keys:
        pipe.get(key)
    (seconds, micros), *tats = pipe.execute()
    now = int(seconds) * _MICROS + int(micros)
    return [max(0, int(tat) - now) if tat else 0 for tat in tats], now


def peek_windows(
    client: redis.Redis, keys: Sequence[str], shapes: Sequence[Sliding]
) -> list[float]:
    """Read sliding windows without charging them: each one's count now (requests'
    worth, :func:`~.kinds.sliding.sliding_count`, what the script compares with the
    limit), at Redis's time. One round trip, for people looking, like :func:`peek`.

    A key is a hash of the counts of its windows by number (``now // window``,
    ``lua/token_bucket.lua``); an absent key or window counts nothing.
    """
    pipe = client.pipeline(transaction=False)
    pipe.time()
    for key in keys:
        pipe.hgetall(key)
    (seconds, micros), *hashes = pipe.execute()
    now = int(seconds) * _MICROS + int(micros)
    counts = []
    for fields, shape in zip(hashes, shapes, strict=True):
        number, elapsed = divmod(now, shape.window)
        held = {int(k): int(v) for k, v in fields.items()}
        previous, current = held.get(number - 1, 0), held.get(number, 0)
        counts.append(sliding_count(shape, previous, current, elapsed))
    return counts


def _no_retry() -> Retry:
    # redis-py retries timeouts 10 times with backoff by default: a few ms of
    # timeout would become a second of waiting. The breaker does the retrying.
    return Retry(NoBackoff(), 0)


def _no_retry_async() -> redis.asyncio.retry.Retry:
    # the asyncio clients' own kind (redis-py 8.2 converts a sync one, with a warning)
    return redis.asyncio.retry.Retry(NoBackoff(), 0)


def connect(
    url: str, *, timeout: float = DEFAULT_REDIS_TIMEOUT, cluster: bool = False
) -> Client:
    """Return a client for the limiter: short timeouts, no retries, pooled connections.

    With ``cluster``, ``url`` may name several seed nodes, comma-separated
    (``redis://a:7000,b:7000``), and the client is a
    :class:`~.cluster.DeferredCluster`: it is made once a seed answers, and a
    ``CLUSTERDOWN`` reply fails the call at once (``sluice.cluster``).
    """
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": _no_retry(),
    }
    if cluster:
        return cluster_client(url, **options)
    if "," in url:
        raise ValueError("several nodes in a URL need cluster=True")
    return redis.Redis.from_url(url, **options)


def connect_async(
    url: str,
    *,
    timeout: float = DEFAULT_REDIS_TIMEOUT,
    cluster: bool = False,
    max_connections: int = 100,
) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    """The asyncio twin of :func:`connect`.

    With ``cluster``, ``url`` may name several seed nodes, as for :func:`connect`
    (the asyncio cluster client maps the cluster on its first command, so it
    starts with its seeds down as it is). Without auto-pipelining every call in
    flight holds a connection. A plain Redis gets a blocking pool: past
    ``max_connections`` calls in flight a call waits up to ``timeout`` for a
    free one instead of failing at once, as redis-py's default pool does.
    redis-py's cluster client has no such pool: past ``max_connections`` calls
    in flight to one node, a call fails (and its decision takes its failure
    mode). The auto-pipelined limiter needs one connection per node.
    """
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": _no_retry_async(),
    }
    if cluster:
        first, seeds = parse_seeds(url)
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in seeds]
        return no_clusterdown_sleep(
            redis.asyncio.RedisCluster.from_url(
                first, startup_nodes=nodes, max_connections=max_connections, **options
            )
        )
    if "," in url:
        raise ValueError("several nodes in a URL need cluster=True")
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=timeout, **options
    )
    return redis.asyncio.Redis(connection_pool=pool)


def patient(client: Client, *, timeout: float = 1.0) -> Client:
    """A client of the same Redis with ``timeout`` for work off the request path
    (the backlog, :mod:`.backlog`), so that a Redis too busy for the limiter's
    short timeout still takes it. A cluster client is returned as it is."""
    if not isinstance(client, redis.Redis):
        return client
    pool = client.connection_pool
    options = {
        **pool.connection_kwargs,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
    }
    return redis.Redis(
        connection_pool=type(pool)(connection_class=pool.connection_class, **options)
    )


class TokenBucket(Script):
    """Runs the token-bucket script on a Redis or Redis Cluster client: one EVALSHA
    per call, on the lean path of :class:`~.scripts.Script`."""

    def __init__(self, client: Client) -> None:
        super().__init__(client, SCRIPT)

    def __call__(self, keys: Sequence[str], args: Sequence[bytes]) -> list[int]:
        """Decide for ``keys``; return the script's reply (see the script's header)."""
        reply: list[int] = super().__call__(keys, args)
        return reply


class AsyncTokenBucket(AsyncScript):
    """The asyncio twin of :class:`TokenBucket` (redis.asyncio), auto-pipelined when
    given a ``pipeline``."""

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        *,
        pipeline: AutoPipeline | None = None,
    ) -> None:
        super().__init__(client, SCRIPT, pipeline=pipeline)

    def __call__(
        self,
        keys: Sequence[str],
        args: Sequence[bytes],
        deadline: float | None = None,
    ) -> Awaitable[list[int]]:
        """Decide for ``keys``; await the script's reply (see the script's header), or
        ``TimeoutError`` once ``deadline`` (the loop's clock) has passed."""
        return super().__call__(keys, args, deadline)
