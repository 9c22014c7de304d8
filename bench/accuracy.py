"""Accuracy under concurrency: many processes on one bucket; admitted vs the theoretical maximum.

``--processes`` processes of ``--threads`` threads hammer one tenant's bucket
(``--rate``/s, burst ``--burst``) for ``--seconds``. The most a correct limiter
may admit is ``burst + rate x elapsed``, elapsed measured on the Redis clock
from the start signal to the last answer; the ratio admitted / maximum is
reported per mode (1.0 is exact; above 1.0 would be over-admission).

Modes are entries of ``MODES``: the hot-key options of the one limit, as a
publisher would set them (``plain``: none; ``leases``: 50 tokens a lease;
``shards``: 8 keys). Each worker decides with an ordinary :class:`Limiter` on
the snapshot, so what is measured is what a gateway runs; ``asyncio`` runs
``--threads`` x 16 tasks of an auto-pipelined :class:`AsyncLimiter` per process
instead. Prints Markdown; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import threading
import time
from typing import Any

import redis

from bench.common import machine_line, table
from sluice import AsyncLimiter, Limiter, Snapshot
from tests.client.factories import limit, policy, rules, snapshot
from tests.servers import RedisServer

#: mode name -> the hot-key options of the limit (``tests.client.factories.limit``)
MODES: dict[str, dict[str, int]] = {
    "plain": {},
    "leases": {"lease": 50},
    "shards": {"shards": 8},
    "asyncio": {},
}
#: tasks of the asyncio mode per thread of the others
TASKS_PER_THREAD = 16


def one_bucket(rate: int, burst: int, **hot_keys: int) -> Snapshot:
    """Every request of tenant acme on search is charged to one per-tenant limit."""
    return snapshot(
        rules(policy("default", "*", limit("tenant", rate, 1, burst, **hot_keys)))
    )


def worker(
    url: str,
    raw: bytes,
    threads: int,
    seconds: float,
    start: Any,
    results: Any,
) -> None:
    """Decide on the one bucket from ``threads`` threads for ``seconds`` after ``start``."""
    limiter = Limiter(url, Snapshot.from_bytes(raw), timeout=1.0)
    limiter.decide(route="search", tenant="warmup")  # connect before the clock starts
    counts: list[tuple[int, int, int]] = []

    def run() -> None:
        admitted = rejected = degraded = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            decision = limiter.decide(route="search", tenant="acme")
            admitted += decision.allowed
            rejected += not decision.allowed
            degraded += decision.degraded
        counts.append((admitted, rejected, degraded))

    start.wait()
    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    results.put(tuple(map(sum, zip(*counts, strict=True))))


def async_worker(
    url: str,
    raw: bytes,
    threads: int,
    seconds: float,
    start: Any,
    results: Any,
) -> None:
    """:func:`worker`'s twin: ``threads`` x 16 tasks of one auto-pipelined AsyncLimiter."""

    async def main() -> tuple[int, int, int]:
        limiter = AsyncLimiter(url, Snapshot.from_bytes(raw), timeout=1.0)
        await limiter.decide(route="search", tenant="warmup")
        deadline = time.monotonic() + seconds

        async def run() -> tuple[int, int, int]:
            admitted = rejected = degraded = 0
            while time.monotonic() < deadline:
                decision = await limiter.decide(route="search", tenant="acme")
                admitted += decision.allowed
                rejected += not decision.allowed
                degraded += decision.degraded
            return admitted, rejected, degraded

        counts = await asyncio.gather(
            *(run() for _ in range(threads * TASKS_PER_THREAD))
        )
        await limiter.aclose()
        return tuple(map(sum, zip(*counts, strict=True)))  # type: ignore[return-value]

    start.wait()
    results.put(asyncio.run(main()))


def redis_seconds(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def run_mode(mode: str, url: str, options) -> list[str]:
    """One run of ``mode``; the table row: counts, elapsed, maximum, ratio."""
    redis.Redis.from_url(url).flushdb()
    raw = one_bucket(options.rate, options.burst, **MODES[mode]).to_bytes()
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    args = (url, raw, options.threads, options.seconds, start, results)
    target = async_worker if mode == "asyncio" else worker
    processes = [
        context.Process(target=target, args=args) for _ in range(options.processes)
    ]
    for process in processes:
        process.start()
    time.sleep(1.0)
    clock = redis.Redis.from_url(url)
    began = redis_seconds(clock)
    start.set()
    counts = [results.get(timeout=options.seconds + 60) for _ in processes]
    elapsed = redis_seconds(clock) - began
    for process in processes:
        process.join(timeout=30)
    admitted, rejected, degraded = map(sum, zip(*counts, strict=True))
    maximum = options.burst + options.rate * elapsed
    return [
        mode,
        f"{admitted:,}",
        f"{rejected:,}",
        str(degraded),
        f"{elapsed:.2f}",
        f"{maximum:,.0f}",
        f"{admitted / maximum:.4f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=500, help="tokens per second")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument(
        "--mode", action="append", choices=sorted(MODES), help="default: all"
    )
    options = parser.parse_args()
    print(f"## Accuracy under concurrency\n\n{machine_line()}")
    print(
        f"{options.processes} processes x {options.threads} threads on one bucket of "
        f"{options.rate}/s, burst {options.burst}, for {options.seconds:g} s.\n"
    )
    server = RedisServer().start()
    try:
        rows = [run_mode(mode, server.url, options) for mode in options.mode or MODES]
    finally:
        server.cleanup()
    print(
        table(
            [
                "mode",
                "admitted",
                "rejected",
                "degraded",
                "elapsed s (Redis)",
                "burst + rate x elapsed",
                "admitted / maximum",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
