"""The hot-path scripts besides the token bucket: ``hot.lua`` (leases, slots) and ``release.lua``.

Run like :class:`~.bucket.TokenBucket` runs its script: EVALSHA of the SHA
registered with redis-py, falling back on NOSCRIPT to redis-py's ``Script``,
which loads the script (on every primary of a cluster) and runs it again.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

__all__ = ["HOT", "RELEASE", "AsyncScript", "Script"]


def _source(name: str) -> bytes:
    return importlib.resources.files("sluice").joinpath(name).read_bytes()


HOT = _source("lua/hot.lua")
RELEASE = _source("lua/release.lua")


class Script:
    """One of the package's Lua scripts on a Redis or Redis Cluster client."""

    def __init__(self, client: redis.Redis | redis.RedisCluster, source: bytes) -> None:
        self.client = client
        self._script = client.register_script(source)

    def __call__(self, keys: list[str] | tuple[str, ...], args: list[bytes]) -> Any:
        """Run the script on ``keys`` (one hash tag) and ``args``; return its reply."""
        try:
            return self.client.evalsha(self._script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self._script(keys, args)


class AsyncScript:
    """The asyncio twin of :class:`Script`."""

    def __init__(
        self, client: redis.asyncio.Redis | redis.asyncio.RedisCluster, source: bytes
    ) -> None:
        self.client = client
        self._script = client.register_script(source)

    async def __call__(
        self, keys: list[str] | tuple[str, ...], args: list[bytes]
    ) -> Any:
        """Run the script on ``keys`` (one hash tag) and ``args``; return its reply."""
        try:
            return await self.client.evalsha(self._script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self._script(keys, args)
