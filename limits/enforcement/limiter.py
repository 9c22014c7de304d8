"""The limiter gateways call: a request in, a :class:`~.decision.Decision` out.

One decision costs one Redis round trip (EVALSHA of the token-bucket script)
plus a resolution and some string formatting. :mod:`.aio` is the asyncio twin;
both share :class:`LimiterCore` and therefore behave the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis

from .bucket import STORE_ERRORS, TokenBucket, connect
from .bundle import Bundle, SnapshotProvider, StaticSource
from .decision import Decision
from .engine import Engine, Prepared
from .failure import BreakerState, CircuitBreaker, LocalBuckets, failover
from .snapshot import FailureMode, Snapshot

__all__ = ["Limiter", "LimiterCore"]

logger = logging.getLogger("limits.enforcement")


class LimiterCore:
    """What the sync and asyncio limiters share: rules, breaker, local buckets, failover."""

    def __init__(
        self,
        rules: SnapshotProvider | Snapshot | Bundle,
        *,
        breaker: CircuitBreaker | None = None,
        local: LocalBuckets | None = None,
        unmatched: FailureMode = FailureMode.LOCAL,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(rules, Snapshot | Bundle):
            rules = StaticSource(rules, wall=wall)
        self.source = rules
        self.breaker = breaker or CircuitBreaker()
        self.local = local or LocalBuckets()
        self.unmatched = unmatched
        self._wall = wall
        self._engine: Engine | None = None

    def engine(self) -> Engine:
        """The engine of the snapshot in force; rebuilt only when the snapshot changes."""
        snapshot = self.source.current()
        engine = self._engine
        if engine is None or engine.snapshot is not snapshot:
            engine = self._engine = Engine(snapshot, unmatched=self.unmatched)
        return engine

    def prepare(
        self,
        route: str | None,
        method: str | None,
        path: str | None,
        tenant: str | None,
        user: str | None,
        api_key: str | None,
        ip: str | None,
    ) -> tuple[Engine, Prepared]:
        engine = self.engine()
        prepared = engine.prepare(
            route=route,
            method=method,
            path=path,
            tenant=tenant,
            user=user,
            api_key=api_key,
            ip=ip,
            now=self._wall(),
        )
        return engine, prepared

    def store_failed(
        self, engine: Engine, prepared: Prepared, exc: Exception
    ) -> Decision:
        """Record a Redis failure and decide by the route's failure mode."""
        was = self.breaker.state
        self.breaker.failed()
        if self.breaker.state is BreakerState.OPEN and was is not BreakerState.OPEN:
            logger.warning(
                "limiter.store_down: %s: %s; circuit open for %.1f s",
                type(exc).__name__,
                exc,
                self.breaker.cooldown,
            )
        return self.fail(engine, prepared, f"{type(exc).__name__}: {exc}")

    def store_answered(self) -> None:
        """Record a good call (needed only once the breaker has seen a failure)."""
        if self.breaker.state is not BreakerState.CLOSED:
            logger.info("limiter.store_up: Redis answers again; circuit closed")
        self.breaker.succeeded()

    def fail(self, engine: Engine, prepared: Prepared, error: str) -> Decision:
        return failover(
            engine,
            prepared,
            error=error,
            local=self.local,
            retry_after=self.breaker.retry_after(),
        )


class Limiter(LimiterCore):
    """Sync limiter over a Redis or Redis Cluster client (or a URL: see :func:`.bucket.connect`).

    ``rules`` is a :class:`~.source.SnapshotSource` (or any provider), or a fixed
    snapshot or bundle. ``unmatched`` is the failure mode of requests that match
    no route. ``wall`` is the clock overrides expire by (epoch seconds).
    """

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster | str,
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
            client = connect(client, timeout=timeout)
        self.bucket = TokenBucket(client)

    def decide(
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
        """Decide one request, by ``route`` slug or by ``method`` and ``path``.

        Charges every limit of the winning policy or none. Never raises for a
        Redis failure: the route's failure mode decides instead.
        """
        engine, prepared = self.prepare(route, method, path, tenant, user, api_key, ip)
        if not self.breaker.allow():
            return self.fail(engine, prepared, "circuit open")
        try:
            reply = self.bucket(prepared.keys, prepared.plan.args)
        except STORE_ERRORS as exc:
            return self.store_failed(engine, prepared, exc)
        if self.breaker.troubled:
            self.store_answered()
        return engine.decision(prepared, reply)
