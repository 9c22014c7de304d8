"""Auto-pipelining for the asyncio limiter: script calls that meet a round trip in
flight go to Redis together in the next one.

An asyncio gateway decides many requests at once, and one process is bounded by
what it does per call, not by Redis. So each Redis node gets one *lane*: a
connection of its own with at most one batch of commands in flight. A call that
finds its lane idle is sent at once; calls that arrive while a batch is in
flight are queued and sent together, in one write, as soon as it returns (at
most ``max_batch`` a batch). It is a pipeline without MULTI: each EVALSHA stays
atomic on its own, and every call gets its own reply, in order, or its own error.

What it costs: a call that arrives while its lane is busy waits for that round
trip to end before its own starts, so at most one round trip more. Failure stays
per call: a timeout or a broken connection fails the calls of that batch that
had no reply yet (each decision then takes its route's failure mode, as with
any Redis error) and the connection is dropped, never reused; a call whose caller
gave up while it was queued (its deadline passed) is not sent; NOSCRIPT loads the
script and sends the calls that met it again, once; on a Redis Cluster calls go
to the lane of the master that holds their hash slot, and a call redirected by
MOVED or ASK (a slot that moved) is sent again through redis-py, which follows
the redirection and refreshes its slot map. ``AsyncLimiter(pipelining=False)``
sends every call on its own through redis-py instead.

Deadlines: a call submitted with a ``deadline`` (the event loop's clock) and
still unanswered then fails with ``TimeoutError``, as under
``asyncio.timeout_at``; the calls of a pipeline share one timer
(:class:`_Deadlines`) instead of one timer and one cancelled task each.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    ResponseError,
    SlotNotCoveredError,
)

from .scripts import pack_evalsha

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # the hiredis extra packs the same bytes in C
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover
    _pack_command = None

__all__ = ["AutoPipeline", "LaneStats"]

#: Calls sent together at most; more wait for the next round trip.
DEFAULT_MAX_BATCH = 64


@dataclass(slots=True)
class _Call:
    script: Any  #: the :class:`~.scripts.AsyncScript` being run
    keys: Sequence[str]
    args: Sequence[bytes]
    future: asyncio.Future[Any]


@dataclass(slots=True)
class LaneStats:
    """What one lane sent: for tests, benchmarks and the curious."""

    batches: int = 0
    calls: int = 0
    largest: int = 0


@dataclass(eq=False)
class _Lane:
    """One node's connection, with at most one batch in flight."""

    connection_class: Any
    connection_kwargs: dict[str, Any]
    max_batch: int
    timeout: float | None
    queue: list[_Call] = field(default_factory=list)
    busy: bool = False
    connection: Any = None
    stats: LaneStats = field(default_factory=LaneStats)

    def enqueue(self, call: _Call, pipeline: AutoPipeline) -> None:
        self.queue.append(call)
        if not self.busy:  # idle: the queue held nothing else; send it now
            self.busy = True
            pipeline.spawn(self._drain(pipeline))

    async def _drain(self, pipeline: AutoPipeline) -> None:
        """Send batch after batch while calls are queued: one round trip in flight.

        Runs in a task of its own, so a caller that is cancelled (its client went
        away) cancels nobody else's call.
        """
        try:
            while self.queue:
                # a call its caller gave up on while queued (a deadline) is never sent
                batch = [c for c in self.queue[: self.max_batch] if not c.future.done()]
                del self.queue[: self.max_batch]
                if not batch:
                    continue
                try:
                    await self._send(batch, pipeline)
                except BaseException as exc:
                    for call in batch:
                        _settle(call, error=_as_error(exc))
                    raise
        except BaseException as exc:  # the loop is closing: nothing is left waiting
            for call in self.queue:
                _settle(call, error=_as_error(exc))
            self.queue.clear()
            if not isinstance(exc, Exception):
                raise
        finally:
            self.busy = False

    async def _send(self, batch: list[_Call], pipeline: AutoPipeline) -> None:
        self.stats.batches += 1
        self.stats.calls += len(batch)
        self.stats.largest = max(self.stats.largest, len(batch))
        missing, redirected = await self._round_trip(batch)
        if missing:
            await self._reload(missing)
            missing, more = await self._round_trip(missing)
            redirected += more
            for call in missing:
                _settle(call, error=NoScriptError("NOSCRIPT after a reload"))
        for call in redirected:
            await pipeline.fallback(call)

    async def _round_trip(self, batch: list[_Call]) -> tuple[list[_Call], list[_Call]]:
        """Send ``batch`` in one write and read every reply, all within the socket
        timeout; return the calls that met NOSCRIPT and those a cluster redirected
        (both still unsettled)."""
        missing: list[_Call] = []
        redirected: list[_Call] = []
        connection = self.connection
        if connection is None:
            connection = self.connection = self.connection_class(
                **self.connection_kwargs
            )
        try:
            async with asyncio.timeout(self.timeout):
                await connection.send_packed_command(
                    [b"".join([_pack(call) for call in batch])], check_health=False
                )
                for call in batch:
                    try:  # one timeout for the batch, not one per reply
                        reply = await connection.read_response(timeout=math.inf)
                    except NoScriptError:
                        missing.append(call)
                    except (MovedError, AskError):
                        redirected.append(call)
                    except ResponseError as exc:  # this call's own error reply
                        _settle(call, error=exc)
                    else:
                        _settle(call, reply=reply)
        except BaseException as exc:
            # A timeout or a broken connection: replies may still come; never reuse it.
            self.connection = None
            await connection.disconnect()
            if isinstance(exc, TimeoutError):
                raise redis.exceptions.TimeoutError(
                    f"no reply within {self.timeout} s (a batch of {len(batch)})"
                ) from None
            raise
        return missing, redirected

    async def _reload(self, calls: list[_Call]) -> None:
        sources = {call.script.source: call for call in calls}
        connection = self.connection
        try:
            for source in sources:
                await connection.send_command("SCRIPT", "LOAD", source)
                await connection.read_response()
        except BaseException:
            self.connection = None
            await connection.disconnect()
            raise


def _pack(call: _Call) -> bytes:
    script = call.script
    if _pack_command is not None:
        return _pack_command(
            (b"EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)
        )
    return pack_evalsha(script.head, call.keys, call.args)


def _as_error(exc: BaseException) -> Exception:
    """What a waiting call is failed with: the error itself, or a connection error for
    a cancellation (which a future cannot carry as an exception)."""
    if isinstance(exc, Exception):
        return exc
    return redis.exceptions.ConnectionError(f"auto-pipeline stopped: {exc!r}")


def _settle(
    call: _Call, *, reply: Any = None, error: BaseException | None = None
) -> None:
    if call.future.done():
        return
    if error is not None:
        call.future.set_exception(error)
    else:
        call.future.set_result(reply)


class _Deadlines:
    """Fails each pending future still unanswered at its deadline with ``TimeoutError``,
    with one timer for them all: armed at the earliest deadline, as most calls end
    long before theirs, it fires about once per deadline's length, not per call."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, asyncio.Future[Any]]] = []
        self._order = itertools.count()  #: ties never compare futures
        self._timer: asyncio.TimerHandle | None = None
        self._at = math.inf  #: when the timer fires
        self._pruned = _PRUNE  #: entries past which ended calls are dropped at once

    def add(self, deadline: float, future: asyncio.Future[Any]) -> None:
        heapq.heappush(self._heap, (deadline, next(self._order), future))
        if len(self._heap) > self._pruned:  # far deadlines: keep only what is pending
            self._heap = [entry for entry in self._heap if not entry[2].done()]
            heapq.heapify(self._heap)
            self._pruned = max(_PRUNE, 2 * len(self._heap))
        if deadline < self._at:
            self._arm(future.get_loop(), deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at = at
        self._timer = loop.call_at(at, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        # the deadline armed for has come, whatever the clock says (as timeout_at)
        due, heap = max(self._at, loop.time()), self._heap
        self._timer, self._at = None, math.inf
        while heap and (heap[0][0] <= due or heap[0][2].done()):
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_exception(TimeoutError())
        if heap:
            self._arm(loop, heap[0][0])


_PRUNE = 4096  #: deadlines held before the ended calls among them are dropped


class AutoPipeline:
    """The lanes of one asyncio Redis or Redis Cluster client (one lane per node)."""

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.client = client
        self.max_batch = max_batch
        self.lanes: dict[str, _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._single: _Lane | None = None
        self._deadlines = _Deadlines()
        if not isinstance(client, redis.asyncio.RedisCluster):
            pool = client.connection_pool
            self._single = self.lanes["redis"] = self._new_lane(
                pool.connection_class, pool.connection_kwargs
            )

    def submit(
        self,
        script: Any,
        keys: Sequence[str],
        args: Sequence[bytes],
        deadline: float | None = None,
    ) -> Awaitable[Any]:
        """Queue ``script`` on ``keys`` (one hash tag) and ``args`` for the next batch of
        the node holding them; await the result for its reply (or its error, and
        ``TimeoutError`` once ``deadline``, the loop's clock, has passed)."""
        if self._single is None:
            return self._submit_to_node(script, keys, args, deadline)
        future = asyncio.get_running_loop().create_future()
        self._single.enqueue(_Call(script, keys, args, future), self)
        if deadline is not None:
            self._deadlines.add(deadline, future)
        return future

    async def _submit_to_node(
        self,
        script: Any,
        keys: Sequence[str],
        args: Sequence[bytes],
        deadline: float | None,
    ) -> Any:
        async with asyncio.timeout_at(deadline):  # the slot map may be fetched first
            lane = await self._lane(keys[0])
            future = asyncio.get_running_loop().create_future()
            lane.enqueue(_Call(script, keys, args, future), self)
            return await future

    async def fallback(self, call: _Call) -> None:
        """Send one call through redis-py (it follows cluster redirections)."""
        try:
            _settle(call, reply=await call.script.unbatched(call.keys, call.args))
        except Exception as exc:
            _settle(call, error=exc)

    def stats(self) -> dict[str, LaneStats]:
        """Per node (``host:port``): batches and calls sent so far."""
        return {name: lane.stats for name, lane in self.lanes.items()}

    async def aclose(self) -> None:
        for lane in self.lanes.values():
            if lane.connection is not None:
                await lane.connection.disconnect()
                lane.connection = None

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run a lane's drain in a task, kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _lane(self, key: str) -> _Lane:
        if self._single is not None:  # a plain Redis: one lane
            return self._single
        node = await _node_of(self.client, key)  # type: ignore[arg-type]
        lane = self.lanes.get(node.name)
        if lane is None:
            lane = self.lanes[node.name] = self._new_lane(
                node.connection_class, node.connection_kwargs
            )
        return lane

    def _new_lane(self, kind: Any, kwargs: dict[str, Any]) -> _Lane:
        return _Lane(kind, dict(kwargs), self.max_batch, kwargs.get("socket_timeout"))


async def _node_of(client: redis.asyncio.RedisCluster, key: str) -> Any:
    """The master holding ``key``'s slot (the client maps the cluster on first use)."""
    try:
        node = client.get_node_from_key(key)
    except SlotNotCoveredError:
        await client.initialize()
        node = client.get_node_from_key(key)
    if node is None:
        raise SlotNotCoveredError(f"no node holds the slot of {key!r}")
    return node
