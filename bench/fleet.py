"""A fleet of gateways polling the control plane, and a publish in the middle of it.

Used by ``bench/polling.py``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

from bench.common import PYTHON, ROOT, table
from bench.httpclient import Block, Reply, get, poll_headers


async def fleet(port, token, etag, gateways, interval, seconds, connections) -> Block:
    """``gateways`` that run the bundle ``etag`` polling every ``interval`` ± 20 % for
    ``seconds``, at most ``connections`` requests in flight."""
    limit = asyncio.Semaphore(connections)
    replies: list[Reply] = []
    rng = random.Random(11)
    deadline = time.perf_counter() + seconds

    async def gateway(index: int, etag: str) -> None:
        await asyncio.sleep(rng.uniform(0, interval))  # gateways start spread out
        while time.perf_counter() < deadline:
            headers = poll_headers(token, f"gw-{index}", etag)
            async with limit:
                reply = await get(port, "/api/v1/snapshot", headers)
            replies.append(reply)
            if reply.status == 200:
                etag = reply.etag
            await asyncio.sleep(interval * rng.uniform(0.8, 1.2))

    began = time.perf_counter()
    await asyncio.gather(*(gateway(i, etag) for i in range(gateways)))
    return Block(replies, time.perf_counter() - began)


async def publish_later(env: dict[str, str], delay: float) -> float:
    """After ``delay`` s, publish a new version (``bench_publish``); return how long it took."""
    await asyncio.sleep(delay)
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        PYTHON,
        str(ROOT / "manage.py"),
        "bench_publish",
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
    )
    await process.wait()
    return time.perf_counter() - began


def fleet_report(block: Block, gateways: int, interval: float) -> str:
    statuses = Counter(r.status for r in block.replies)
    rows = []
    for status in sorted(statuses):
        subset = Block([r for r in block.replies if r.status == status], block.seconds)
        rows.append(
            [
                str(status) if status else "error",
                f"{len(subset.replies):,}",
                f"{subset.per_s:.0f}",
                f"{subset.latency_ms(0.5):.1f}",
                f"{subset.latency_ms(0.99):.1f}",
            ]
        )
    rows.append(
        [
            "all",
            f"{len(block.replies):,}",
            f"{block.per_s:.0f}",
            f"{block.latency_ms(0.5):.1f}",
            f"{block.latency_ms(0.99):.1f}",
        ]
    )
    offered = gateways / interval
    return (
        f"{gateways:,} gateways every {interval:g} s ± 20 % (offered ≈ {offered:.0f} polls/s) "
        f"for {block.seconds:.0f} s; errors: {block.errors}\n\n"
        + table(["status", "polls", "polls/s", "p50 ms", "p99 ms"], rows)
    )
