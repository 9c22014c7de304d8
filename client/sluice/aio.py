"""The asyncio twin of :class:`~.limiter.Limiter`, over ``redis.asyncio``.

Same rules, same keys, same scripts, same failure handling, hot-key options,
concurrency slots and decision events (the shared :class:`~.limiter.LimiterCore`);
only the Redis calls are awaited.
"""

from __future__ import annotations

import asyncio
from typing import Unpack

import redis.asyncio

from .backlog import Orphan
from .bucket import (
    DEFAULT_REDIS_TIMEOUT,
    SCRIPT,
    STORE_ERRORS,
    AsyncTokenBucket,
    connect_async,
)
from .bundle import Bundle, SnapshotProvider
from .decision import Decision, Held
from .engine import Engine, Prepared
from .failure import CircuitBreaker
from .hot import HotCall
from .limiter import CoreOptions, LimiterCore, logger
from .memory import AsyncMemoryScript, MemoryStore, memory_store
from .pipelining import DEFAULT_MAX_BATCH, AutoPipeline
from .scripts import CHARGE, HOT, RELEASE, AsyncScript, charge_args
from .snapshot import Snapshot

__all__ = ["AsyncLimiter"]


#: Whether limiters auto-pipeline unless told (``pipelining=``); the test suite runs
#: once with it off.
PIPELINING_DEFAULT = True


class AsyncLimiter(LimiterCore):
    """Asyncio limiter over a ``redis.asyncio`` Redis or RedisCluster client, or a URL,
    or in memory (``"memory://"`` or a :class:`~.memory.MemoryStore`: one process only).

    Script calls are auto-pipelined (:mod:`.pipelining`): those that meet a round
    trip in flight to their Redis node are sent together in the next one, at most
    ``max_batch`` at once. That multiplies what one process decides per second when
    many requests are in flight, and can add at most one round trip to a call;
    ``pipelining=False`` sends each call on its own.
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster | str | MemoryStore,
        rules: SnapshotProvider | Snapshot | Bundle,
        *,
        timeout: float = DEFAULT_REDIS_TIMEOUT,
        pipelining: bool | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        **options: Unpack[CoreOptions],
    ) -> None:
        super().__init__(rules, **options)
        self.pipeline: AutoPipeline | None = None
        self.bucket: AsyncTokenBucket | AsyncMemoryScript
        self.hot: AsyncScript | AsyncMemoryScript
        self._release: AsyncScript | AsyncMemoryScript
        self._charge: AsyncScript | AsyncMemoryScript
        if isinstance(client, str):
            client = memory_store(client) or connect_async(client, timeout=timeout)
        if isinstance(client, MemoryStore):  # the same scripts, in process
            self.time_told(client.time())  # its clock is the rules' clock: no I/O
            self.bucket = client.async_script(SCRIPT)
            self.hot = client.async_script(HOT)
            self._release = client.async_script(RELEASE)
            self._charge = client.async_script(CHARGE)
        else:
            self._on_redis(client, pipelining, max_batch)
        self._settling: asyncio.Task[None] | None = None
        self._time_asking: asyncio.Future[None] | None = None  #: Redis TIME, once

    def _on_redis(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        pipelining: bool | None,
        max_batch: int,
    ) -> None:
        self.watch_nodes(client)
        if pipelining is None:
            pipelining = PIPELINING_DEFAULT
        if pipelining:
            self.pipeline = AutoPipeline(client, max_batch=max_batch)
        self.bucket = AsyncTokenBucket(client, pipeline=self.pipeline)
        self.hot = AsyncScript(client, HOT, pipeline=self.pipeline)
        self._release = AsyncScript(client, RELEASE, pipeline=self.pipeline)
        self._charge = AsyncScript(client, CHARGE)  # the backlog's: not batched

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
        cost: int | None = None,
        deadline: float | None = None,
    ) -> Decision:
        """Decide one request; see :meth:`.limiter.Limiter.decide`.

        ``deadline`` (the event loop's clock, ``loop.time()``): when to have an
        answer at the latest. A call to Redis still unanswered then is given
        up, and the route's failure mode decides, as when Redis fails (see
        :meth:`out_of_time`); a request already past it never reaches Redis.
        """
        if self.needs_time:
            await self.ask_time()
        engine, prepared = self.prepare(
            route, method, path, tenant, user, api_key, ip, cost
        )
        return self.record(
            tenant, await self.decide_prepared(engine, prepared, deadline)
        )

    async def ask_time(self) -> None:
        """Ask Redis its time once, before the first decision (see :meth:`rules_time`);
        decisions arriving while it is asked wait for the same answer."""
        if self._time_asking is None:
            self._time_asking = asyncio.ensure_future(self._ask_time())
        await asyncio.shield(self._time_asking)

    async def _ask_time(self) -> None:
        # a memory store told its time when the limiter was made: only Redis is asked
        assert isinstance(self.bucket, AsyncTokenBucket)
        try:
            reply = await self.bucket.client.time()
        except STORE_ERRORS as exc:
            logger.warning("limiter.time_unknown: %s: %s", type(exc).__name__, exc)
            reply = None
        self.time_told(reply)

    async def decide_prepared(
        self, engine: Engine, prepared: Prepared, deadline: float | None = None
    ) -> Decision:
        """:meth:`decide` for a request :meth:`prepare` made, not recorded in the
        decision events (for a caller that records it itself, see
        :class:`~.service.Decider`)."""
        if self.rejections.entries:
            cached = self.cached_rejection(engine, prepared)
            if cached is not None:
                return cached
        breaker = self.breaker_for(prepared)
        if not breaker.allow():
            return self.fail(engine, prepared, "circuit open", breaker)
        if deadline is not None and deadline <= asyncio.get_running_loop().time():
            return self.out_of_time(engine, prepared, breaker, sent=False)
        if prepared.plan.hot:
            return await self._decide_hot(engine, prepared, breaker, deadline)
        rehearsal = prepared.rehearsal
        try:
            if rehearsal is None:
                reply = await self.bucket(prepared.keys, prepared.plan.args, deadline)
            else:  # the same call: one round trip, one slot
                reply = await self.bucket(
                    prepared.keys + rehearsal.keys, rehearsal.plan.args, deadline
                )
        except STORE_ERRORS as exc:
            return self.store_failed(engine, prepared, exc, breaker)
        except TimeoutError:
            return self.out_of_time(engine, prepared, breaker)
        self.store_answered(breaker)
        return self.answered(engine, prepared, reply)

    async def _decide_hot(
        self,
        engine: Engine,
        prepared: Prepared,
        breaker: CircuitBreaker,
        deadline: float | None,
    ) -> Decision:
        call = self.hot_begin(engine, prepared)
        if not isinstance(call, HotCall):
            return call
        try:
            async with asyncio.timeout_at(deadline):
                reply = await self.hot(call.keys, call.args)
        except STORE_ERRORS as exc:
            return self.hot_failed(engine, prepared, call, exc, breaker)
        except TimeoutError:
            self.hot_abandoned(prepared, call)
            return self.out_of_time(engine, prepared, breaker)
        except asyncio.CancelledError:  # the caller went away: nothing may leak
            self.hot_abandoned(prepared, call)
            raise
        self.store_answered(breaker)
        self.observe(reply[-1])
        return self.hot_finish(engine, prepared, call, reply)

    def out_of_time(
        self,
        engine: Engine,
        prepared: Prepared,
        breaker: CircuitBreaker,
        *,
        sent: bool = True,
    ) -> Decision:
        """The decision of a request whose deadline came before Redis's answer:
        the route's failure mode, like a Redis failure's, and in the decision
        events like any other.

        Not a failure of Redis for the breaker: a late answer may be the
        process's own backlog (more requests than it decides in time), which
        the failure modes shed cheaply. A call already sent may still run on
        Redis; ``open`` then owes Redis what it admits as well, so the
        request may be counted twice there (the safe side), never zero times.
        """
        why = "deadline passed in Redis" if sent else "shed: deadline passed"
        return self.fail(engine, prepared, why, breaker)

    async def release(self, decision: Decision) -> None:
        """Give back the slots ``decision`` holds; see :meth:`.limiter.Limiter.release`."""
        if decision.held is not None:
            await self.release_held(decision.held)

    async def release_held(self, held: Held) -> None:
        """Give back the slots ``held`` (a decision's ``held``, e.g. kept by a gateway)."""
        if held.local:
            self.slots.release(held.keys)
            return
        try:
            await self._release(held.keys, [held.member.encode()])
        except STORE_ERRORS as exc:
            logger.warning("limiter.release_failed: %s: %s", type(exc).__name__, exc)
            self.orphaned(held.keys, held.member)

    def settle(self) -> None:
        """Run the task that works off the backlog, if it is not running."""
        if self._settling is None or self._settling.done():
            self._settling = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        """Release orphans and send charges until none is left (the sync
        limiter's :class:`~.backlog.Backlog` thread, as a task)."""
        while waits := [
            w for w in (self.orphans.next_in(), self.charges.next_in()) if w is not None
        ]:
            await asyncio.sleep(min(waits))
            due = self.orphans.due()
            for index, orphan in enumerate(due):
                if not await self._release_one(orphan):
                    for later in due[index:]:
                        self.orphans.failed(later)
                    break
            taken = self.charges.take()
            for index, owed in enumerate(taken):
                try:
                    await self._charge(owed.keys, charge_args(owed))
                except Exception:  # the task must outlive any error; retried later
                    self.charges.failed(taken[index:])
                    break
                self.charges.done()

    async def _release_one(self, orphan: Orphan) -> bool:
        try:
            removed = await self._release(orphan.keys, [orphan.member.encode()])
        except Exception:  # the task must outlive any error; retried later
            return False
        self.orphans.done(orphan, int(removed))
        return True

    async def aclose(self) -> None:
        """Close the Redis client's connections (and the pipeline's own); stop the
        backlog's task (what it still owes is dropped: slots expire, charges are lost)."""
        if self._settling is not None and not self._settling.done():
            self._settling.cancel()
        if self.pipeline is not None:
            await self.pipeline.aclose()
        await self.bucket.client.aclose()
