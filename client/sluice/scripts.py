"""The client's Lua scripts and how a decision runs one: one EVALSHA, one round trip.

``lua/token_bucket.lua`` (:mod:`.bucket`), ``lua/hot.lua`` (leases, concurrency
slots), ``lua/release.lua`` and ``lua/charge.lua`` (the backlog, :mod:`.backlog`)
are package data. :class:`Script` runs one on a
Redis or Redis Cluster client:

* on a plain Redis, through a connection of the calling thread's own, made with
  the settings of the client's pool (timeouts, address, credentials): the command
  is packed from a prefix encoded once (``EVALSHA <sha>``) and sent with the
  connection's own send and read. That skips what a per-command
  ``execute_command`` does for nothing here (a pool checkout and return, command
  name lookups, response callbacks, observability hooks): about a third of
  redis-py's own work per call (``docs/benchmarks.md``). A timed-out or broken
  connection is dropped, never reused, so a late reply cannot be read as another
  call's;
* on a Redis Cluster, through redis-py, which routes by hash slot and follows
  MOVED and ASK redirections.

Either way NOSCRIPT (after a ``SCRIPT FLUSH``, a restart or a failover) goes
through redis-py's ``Script``, which loads the script (on every primary of a
cluster) and runs it again.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import os
import threading
import weakref
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
from redis.connection import AbstractConnection
from redis.exceptions import NoScriptError, ResponseError

from .backlog import Charge
from .cluster import DeferredCluster

if TYPE_CHECKING:
    from .pipelining import AutoPipeline

__all__ = [
    "CHARGE",
    "HOT",
    "RELEASE",
    "AsyncScript",
    "Client",
    "Script",
    "charge_args",
    "pack_evalsha",
]

#: The sync clients the limiter runs on: a Redis, or a cluster (made at once or
#: on first use: :class:`~.cluster.DeferredCluster`).
Client = redis.Redis | redis.RedisCluster | DeferredCluster


def _source(name: str) -> bytes:
    return importlib.resources.files("sluice").joinpath(name).read_bytes()


HOT = _source("lua/hot.lua")
RELEASE = _source("lua/release.lua")
CHARGE = _source("lua/charge.lua")


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def pack_evalsha(head: bytes, keys: Sequence[str], args: Sequence[bytes]) -> bytes:
    """The RESP bytes of ``EVALSHA <sha> <numkeys> keys... args...``, where ``head``
    is the encoded ``EVALSHA <sha>`` (:attr:`Script.head`)."""
    parts = [
        b"*%d\r\n" % (3 + len(keys) + len(args)),
        head,
        _bulk(b"%d" % len(keys)),
    ]
    parts += [_bulk(key.encode()) for key in keys]
    parts += [_bulk(arg) for arg in args]
    return b"".join(parts)


class _ThreadConnections:
    """One connection per thread to a plain Redis, with its pool's settings but outside
    the pool (a decision then costs no checkout). A forked child makes its own."""

    def __init__(self, client: redis.Redis) -> None:
        pool = client.connection_pool
        self._class: Any = pool.connection_class
        self._kwargs = pool.connection_kwargs
        self._local = threading.local()
        self._all: weakref.WeakSet[AbstractConnection] = weakref.WeakSet()

    def call(self, packed: bytes) -> Any:
        """Send one packed command and return its reply (raise its error reply)."""
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is None or local.pid != os.getpid():
            connection = local.connection = self._class(**self._kwargs)
            local.pid = os.getpid()
            self._all.add(connection)
        try:
            connection.send_packed_command([packed], check_health=False)
            return connection.read_response()
        except ResponseError:
            raise  # an error reply, read whole: the connection is still in step
        except BaseException:
            # A timeout or a broken connection: a reply may still come. Never reuse it.
            connection.disconnect()
            local.connection = None
            raise

    def close(self) -> None:
        for connection in list(self._all):
            connection.disconnect()  # type: ignore[no-untyped-call]


class Script:
    """One of the package's Lua scripts on a Redis or Redis Cluster client."""

    def __init__(self, client: Client, source: bytes) -> None:
        self.client = client
        self._script = client.register_script(source)
        sha = self._script.sha.encode()
        #: ``EVALSHA <sha>``, encoded once
        self.head = _bulk(b"EVALSHA") + _bulk(sha)
        self._direct = (
            _ThreadConnections(client) if isinstance(client, redis.Redis) else None
        )

    def __call__(self, keys: Sequence[str], args: Sequence[bytes]) -> Any:
        """Run the script on ``keys`` (one hash tag) and ``args``; return its reply."""
        try:
            if self._direct is not None:
                return self._direct.call(pack_evalsha(self.head, keys, args))
            return self.client.evalsha(self._script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self._script(list(keys), list(args))

    def close(self) -> None:
        """Close the connections this script made (the client's pool is the caller's)."""
        if self._direct is not None:
            self._direct.close()


class AsyncScript:
    """The asyncio twin of :class:`Script`: through an :class:`~.pipelining.AutoPipeline`
    when given one (calls meeting a round trip in flight share the next), else one
    redis-py call each."""

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
        source: bytes,
        *,
        pipeline: AutoPipeline | None = None,
    ) -> None:
        self.client = client
        self.source = source
        self._script = client.register_script(source)
        self.sha = self._script.sha.encode()
        #: ``EVALSHA <sha>``, encoded once
        self.head = _bulk(b"EVALSHA") + _bulk(self.sha)
        self._pipeline = pipeline

    def __call__(
        self,
        keys: Sequence[str],
        args: Sequence[bytes],
        deadline: float | None = None,
    ) -> Awaitable[Any]:
        """Run the script on ``keys`` (one hash tag) and ``args``; await the result for
        the reply, or ``TimeoutError`` once ``deadline`` (the loop's clock) has
        passed. (A plain function, so a pipelined call costs no coroutine.)"""
        if self._pipeline is not None:
            return self._pipeline.submit(self, keys, args, deadline)
        if deadline is None:
            return self.unbatched(keys, args)
        return self._unbatched_by(keys, args, deadline)

    async def _unbatched_by(
        self, keys: Sequence[str], args: Sequence[bytes], deadline: float
    ) -> Any:
        async with asyncio.timeout_at(deadline):
            return await self.unbatched(keys, args)

    async def unbatched(self, keys: Sequence[str], args: Sequence[bytes]) -> Any:
        """One call through redis-py: cluster routing and redirections, NOSCRIPT reload."""
        try:
            return await self.client.evalsha(self._script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self._script(list(keys), list(args))


def charge_args(owed: Charge) -> list[bytes]:
    """``charge.lua``'s ARGV for ``owed``: per key, µs to add and its capacity."""
    args = []
    for amount, capacity in zip(owed.amounts, owed.capacities, strict=True):
        args += [b"%d" % amount, b"%d" % capacity]
    return args
