"""Redis Cluster clients for the limiter: several seed nodes, a start that does not
need the cluster, and no sleep on ``CLUSTERDOWN``.

redis-py's :class:`redis.RedisCluster` maps the cluster when it is built, so a
gateway whose seed node is down could not start; and on a ``CLUSTERDOWN``
reply it sleeps 0.25 s and maps the cluster again *inside the call*, beyond any
socket timeout. Here:

- ``seeds`` (:func:`parse_seeds`): a URL may name several nodes,
  ``redis://10.0.0.1:7000,10.0.0.2:7000`` (the others as ``host:port`` or as
  URLs); redis-py tries them in turn;
- :class:`DeferredCluster` builds the client on first use and, while no seed
  answers, raises :class:`~redis.exceptions.RedisClusterException` (a store
  error: the route's failure mode decides), trying again at most every
  ``retry_every`` seconds;
- its connections turn ``CLUSTERDOWN`` into :class:`ClusterUnavailable`, a
  plain :class:`~redis.exceptions.ResponseError`, which redis-py raises at once
  instead of sleeping: a call during a failover takes one round trip. The slot
  map is still refreshed on connection errors and ``MOVED`` replies. The
  asyncio cluster client gets the same connections (:func:`no_clusterdown_sleep`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.cluster import ClusterNode
from redis.commands.core import Script
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, RedisClusterException, ResponseError

__all__ = [
    "ClusterUnavailable",
    "DeferredCluster",
    "cluster_client",
    "no_clusterdown_sleep",
    "parse_seeds",
]


class ClusterUnavailable(ResponseError):
    """The node answered ``CLUSTERDOWN``: it serves no key until the cluster heals."""


class _Connection(redis.Connection):
    """A node connection whose ``CLUSTERDOWN`` errors are not redis-py's ClusterDownError."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except ClusterDownError as exc:
            raise ClusterUnavailable(str(exc)) from None


class _AsyncConnection(redis.asyncio.Connection):
    """The asyncio twin of :class:`_Connection`: ``CLUSTERDOWN`` fails the call at once."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except ClusterDownError as exc:
            raise ClusterUnavailable(str(exc)) from None


def no_clusterdown_sleep(
    client: redis.asyncio.RedisCluster,
) -> redis.asyncio.RedisCluster:
    """Make ``client``'s node connections raise :class:`ClusterUnavailable` on ``CLUSTERDOWN``.

    redis.asyncio's cluster client takes no connection class: it fixes one in
    the connection options it shares with its nodes manager, and has built the
    startup nodes with it already. Both are set here, before the first command
    (the cluster is mapped then), so every node it ever makes uses ours.
    """
    client.connection_kwargs["connection_class"] = _AsyncConnection
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = _AsyncConnection
    return client


def parse_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The first node's URL (it carries the options) and the other seeds' (host, port)."""
    first, *others = [part.strip() for part in url.split(",") if part.strip()]
    seeds = []
    for other in others:
        parts = urlsplit(other if "://" in other else f"redis://{other}")
        if not parts.hostname:
            raise ValueError(f"not a Redis node: {other!r}")
        seeds.append((parts.hostname, parts.port or 6379))
    return first, seeds


class DeferredCluster:
    """A :class:`redis.RedisCluster` made by ``make`` on first use, then used as is.

    Until ``make`` succeeds, every command raises ``RedisClusterException``
    (tried again at most every ``retry_every`` seconds of ``clock``), so a
    gateway starts with its seeds down and decides by failure mode until the
    cluster answers. Offers what the limiter and the decision events use
    (``evalsha``, ``script_load``, ``register_script``, ``pipeline``,
    ``keyslot``, ``nodes_manager``) and hands anything else to the client.
    """

    def __init__(
        self,
        make: Callable[[], redis.RedisCluster],
        *,
        retry_every: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make, self.retry_every, self._clock = make, retry_every, clock
        self._client: redis.RedisCluster | None = None
        self._next_try = float("-inf")
        self._lock = threading.Lock()
        with contextlib.suppress(RedisClusterException, redis.RedisError):
            self.client()  # else decided by failure mode until the cluster answers

    def client(self) -> redis.RedisCluster:
        """The cluster client, made now if it can be; raises while no seed answers."""
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                now = self._clock()
                if now < self._next_try:
                    raise RedisClusterException("Redis Cluster not reached yet")
                self._next_try = now + self.retry_every
                self._client = self._make()
            return self._client

    @property
    def ready(self) -> bool:
        return self._client is not None

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.client().evalsha(sha, numkeys, *keys_and_args)

    def script_load(self, script: Any) -> Any:
        return self.client().script_load(script)

    def register_script(self, script: Any) -> Script:
        return Script(self, script)  # type: ignore[arg-type]  # duck-typed client

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        return self.client().pipeline(*args, **kwargs)  # type: ignore[no-untyped-call]

    def keyslot(self, key: str) -> int:
        """The key's hash slot (needs no node: the same CRC16 redis-py computes)."""
        return key_slot(key.encode())

    @property
    def nodes_manager(self) -> Any:
        return self.client().nodes_manager

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.client(), name)


def cluster_client(url: str, **options: Any) -> DeferredCluster:
    """A :class:`DeferredCluster` on the seeds of ``url`` (see :func:`parse_seeds`)."""
    first, seeds = parse_seeds(url)

    def make() -> redis.RedisCluster:
        nodes = [ClusterNode(host, port) for host, port in seeds]  # type: ignore[no-untyped-call]
        return redis.RedisCluster(
            url=first, startup_nodes=nodes, connection_class=_Connection, **options
        )

    return DeferredCluster(make)
