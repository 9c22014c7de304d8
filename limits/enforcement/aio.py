"""The asyncio twin of :class:`~.limiter.Limiter`, over ``redis.asyncio``.

Same rules, same keys, same script, same failure handling (the shared
:class:`~.limiter.LimiterCore`); only the Redis call is awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
import redis.asyncio

from .bucket import STORE_ERRORS, AsyncTokenBucket, connect_async
from .bundle import Bundle, SnapshotProvider
from .decision import Decision
from .failure import CircuitBreaker, LocalBuckets
from .limiter import LimiterCore
from .snapshot import FailureMode, Snapshot

__all__ = ["AsyncLimiter"]


class AsyncLimiter(LimiterCore):
    """Asyncio limiter over a ``redis.asyncio`` Redis or RedisCluster client, or a URL."""

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster | str,
        rules: SnapshotProvider | Snapshot | Bundle,
        *,
        timeout: float = 0.005,
        breaker: CircuitBreaker | None = None,
        local: LocalBuckets | None = None,
        unmatched: FailureMode = FailureMode.LOCAL,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            rules, breaker=breaker, local=local, unmatched=unmatched, wall=wall
        )
        if isinstance(client, str):
            client = connect_async(client, timeout=timeout)
        self.bucket = AsyncTokenBucket(client)

    async def decide(
        self,
        *,
        route: str | None = None,
        method: str | None = None,
        path: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
        api_key: str | None = None,
        ip: str | None = None,
    ) -> Decision:
        """Decide one request; see :meth:`.limiter.Limiter.decide`."""
        engine, prepared = self.prepare(route, method, path, tenant, user, api_key, ip)
        if not self.breaker.allow():
            return self.fail(engine, prepared, "circuit open")
        try:
            reply = await self.bucket(prepared.keys, prepared.plan.args)
        except STORE_ERRORS as exc:
            return self.store_failed(engine, prepared, exc)
        if self.breaker.troubled:
            self.store_answered()
        return engine.decision(prepared, reply)

    async def aclose(self) -> None:
        """Close the Redis client's connections."""
        await self.bucket.client.aclose()
