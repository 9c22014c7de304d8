"""What an asyncio process pays per Redis script call: the client's auto-pipeline
against the least Python can do (issue 23: the ceiling of the decision service).

The decision service makes one EVALSHA per decision through
:class:`sluice.pipelining.AutoPipeline` (a lane: redis-py's asyncio connection,
one batch in flight, a task per busy spell). The least any asyncio process can
pay for the same call is a bare :class:`asyncio.Protocol` on the socket:
calls of one loop iteration written together, replies parsed by hiredis and
handed to their futures in order, no task, no stream, no lock. Both run the
same one-line script on a private Redis, ``callers`` coroutines in closed
loops; at 1 caller every call is its own round trip, as when a gRPC server
hands the process one call per wake-up (``docs/benchmarks.md``, issue 23).
Prints calls/s and the process's CPU µs per call; asserts nothing::

    .venv/bin/python -m bench.redis_lane [--seconds 3] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import resource
import time
from collections.abc import Callable
from typing import Any

import hiredis
import redis.asyncio
import uvloop

from bench.common import machine_line, median, spread
from sluice.pipelining import AutoPipeline
from sluice.scripts import AsyncScript
from tests.servers import RedisServer

SCRIPT = b"return redis.call('INCR', KEYS[1])"
CALLERS = (1, 2, 8, 64)


class BareLane(asyncio.Protocol):
    """EVALSHA over one connection: writes of a loop iteration joined, replies in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.pending: list[bytes] = []
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            self.waiting.popleft().set_result(reply)

    def call(self, packed: bytes) -> asyncio.Future[Any]:
        future = self.loop.create_future()
        if not self.pending:
            self.loop.call_soon(self._flush)
        self.pending.append(packed)
        self.waiting.append(future)
        return future

    def _flush(self) -> None:
        self.transport.write(b"".join(self.pending))
        self.pending.clear()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(kind: str, url: str, callers: int, seconds: float) -> tuple[float, float]:
    """(calls/s, CPU µs per call) of ``callers`` closed loops through ``kind``."""
    client = redis.asyncio.Redis.from_url(url)
    sha = (await client.script_load(SCRIPT)).encode()
    call: Callable[[bytes], Any]
    if kind == "AutoPipeline":
        script = AsyncScript(client, SCRIPT, pipeline=AutoPipeline(client))
        call = lambda key: script([key], [b"1"])  # noqa: E731
    else:
        loop = asyncio.get_running_loop()
        host, port = (
            client.connection_pool.connection_kwargs["host"],
            client.connection_pool.connection_kwargs["port"],
        )
        _, lane = await loop.create_connection(lambda: BareLane(loop), host, port)
        call = lambda key: lane.call(  # noqa: E731
            hiredis.pack_command((b"EVALSHA", sha, 1, key, b"1"))
        )
    done = 0
    stop = time.perf_counter() + seconds

    async def caller(index: int) -> None:
        nonlocal done
        key = f"lane:{index}".encode()
        while time.perf_counter() < stop:
            await call(key)
            done += 1

    cpu, began = cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    elapsed, used = time.perf_counter() - began, cpu_seconds() - cpu
    await client.aclose()
    return done / elapsed, 1e6 * used / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    print(
        f"## A Redis script call from asyncio (bench/redis_lane.py)\n\n{machine_line()}.\n"
    )
    store = RedisServer().start()
    try:
        print("| callers | lane | calls/s | CPU µs per call | x bare lane (CPU) |")
        print("|---|---|---|---|---|")
        for callers in CALLERS:
            got: dict[str, list[tuple[float, float]]] = {"AutoPipeline": [], "bare": []}
            for _ in range(options.repeats):  # interleaved
                for kind in got:
                    got[kind].append(
                        uvloop.run(run(kind, store.url, callers, options.seconds))
                    )
            bare = median(cpu for _, cpu in got["bare"])
            for kind, runs in got.items():
                ratio = median(cpu for _, cpu in runs) / bare
                print(
                    f"| {callers} | {kind} | {spread((r for r, _ in runs), 0)} | "
                    f"{spread((c for _, c in runs), 1)} | {ratio:.2f} |"
                )
        print(f"\nAfter the run: {machine_line()}.")
    finally:
        store.cleanup()


if __name__ == "__main__":
    main()
